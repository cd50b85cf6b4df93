-- The WR004 check of 005 without a second trip to the events table. 005 looked up the stored row
-- of every keyed input after the append (an index probe, a heap fetch and a jsonb comparison per
-- event), which cost keyed batch appends about 15 % beside the server-side insert. The unchecked
-- append already answers, for each input it did not append, the stored event that holds its key
-- (stream, type and payload: the original in the log, or the first of the batch with that key),
-- so comparing those answers with the inputs is the whole check: appended inputs are their own
-- stored rows and need none. Same rule, same error, same order (the first reused input raises, and
-- the whole call is undone).
CREATE OR REPLACE FUNCTION append_events(p_events jsonb, p_expected jsonb DEFAULT '{}'::jsonb)
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
    v_input jsonb;
BEGIN
    FOR ordinal, appended, "position", transaction_id, stream_id, stream_version, type, schema_version, payload, metadata,
        idempotency_key, recorded_at IN SELECT * FROM append_events_unchecked(p_events, p_expected)
    LOOP
        IF NOT appended THEN
            v_input := p_events -> (ordinal - 1);
            IF (stream_id, type, payload) IS DISTINCT FROM (v_input->>'stream', v_input->>'type', v_input->'payload') THEN
                RAISE EXCEPTION 'idempotency key % of event % was already used for another event', v_input->>'idempotencyKey', ordinal - 1
                    USING ERRCODE = 'WR004',
                          DETAIL = jsonb_build_object('index', ordinal - 1, 'key', v_input->>'idempotencyKey')::text;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
