-- An idempotency key sent again with another event is refused (WR004) instead of silently
-- answering the original: a retry sends the same event, so a different one under a used key is a
-- client's bug that it should hear about. "The same event" is the same stream, type and payload,
-- the payload compared as jsonb (key order and whitespace do not matter); metadata may differ, as
-- a retry gets a new request id. See docs/event-log.md.
--
-- The checked function wraps the one of 001 under a new name: it appends first, then compares
-- every keyed input with the one stored row that holds its key (the original, a row this call just
-- wrote, or the first of the batch with that key; rows never change, so this is race-free), and a
-- mismatch raises, which undoes the whole call. append_new_events needs no check: it refuses
-- (WR003) any batch with a key already in the log, and the client only sends it distinct keys.
ALTER FUNCTION append_events(jsonb, jsonb) RENAME TO append_events_unchecked;

CREATE FUNCTION append_events(p_events jsonb, p_expected jsonb DEFAULT '{}'::jsonb)
RETURNS TABLE (
    ordinal         integer,
    appended        boolean,
    "position"      bigint,
    transaction_id  xid8,
    stream_id       text,
    stream_version  bigint,
    type            text,
    schema_version  integer,
    payload         jsonb,
    metadata        jsonb,
    idempotency_key text,
    recorded_at     timestamptz
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_reused record;
BEGIN
    RETURN QUERY SELECT * FROM append_events_unchecked(p_events, p_expected);

    SELECT x.n - 1 AS index, x.e->>'idempotencyKey' AS key
    INTO v_reused
    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(e, n)
    JOIN events s ON s.idempotency_key = x.e->>'idempotencyKey'
    WHERE (s.stream_id, s.type, s.payload) IS DISTINCT FROM (x.e->>'stream', x.e->>'type', x.e->'payload')
    ORDER BY x.n
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'idempotency key % of event % was already used for another event', v_reused.key, v_reused.index
            USING ERRCODE = 'WR004',
                  DETAIL = jsonb_build_object('index', v_reused.index, 'key', v_reused.key)::text;
    END IF;
END
$$;
