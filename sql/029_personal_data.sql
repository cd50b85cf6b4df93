-- Personal data sealed per person (docs/event-log.md, "Personal data"): the payload fields the
-- catalogue marks as personal (a message's body, a sign-in's device and place, a saved search's
-- name, a block's reason) are stored sealed with AES-256-GCM under their person's data key. Erasing
-- the person deletes the key: every copy of those fields, in the log and in every backup, is
-- unreadable from then on, and the log itself stays append-only.

-- One data key per person, wrapped (AES-256-GCM) by the key-encryption key of
-- INBOX_PERSONAL_DATA_KEY_FILE. A key without a row is gone for good.
CREATE TABLE person_data_keys (
    person_id  text        PRIMARY KEY CHECK (length(person_id) BETWEEN 1 AND 200),
    wrapped    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The people erased (`inbox erase`, or an account closed with erasure): their key is gone, and
-- no new one is ever made for them; a personal field of theirs appended later is stored erased.
CREATE TABLE person_erasures (
    person_id text        PRIMARY KEY,
    erased_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A sealed event carries `$seal`, an id of its own that its sealed fields are bound to (the
-- associated data of their AES-256-GCM). Unique: a sealed value copied into another event's row,
-- or into a new row, does not open. Time-ordered ids, so the index grows at its end.
CREATE UNIQUE INDEX events_seal ON events ((payload->>'$seal')) WHERE payload ? '$seal';

-- What makes two payloads "the same event" for an idempotent retry: a sealed field is compared by
-- its MAC (the same text of the same person gives the same MAC), not by its ciphertext (a random
-- nonce each time), and `$seal` not at all.
CREATE FUNCTION event_payload_identity(p jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p ? '$seal' THEN (
        SELECT coalesce(jsonb_object_agg(e.k, CASE WHEN jsonb_typeof(e.v) = 'object' AND e.v ? '$sealed' THEN e.v->'$sealed'->'h' ELSE e.v END), '{}'::jsonb)
        FROM jsonb_each(p - '$seal') AS e(k, v))
    ELSE p END
$$;

-- 007's check, with payloads compared by their identity.
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
            IF (stream_id, type, event_payload_identity(payload))
                IS DISTINCT FROM (v_input->>'stream', v_input->>'type', event_payload_identity(v_input->'payload')) THEN
                RAISE EXCEPTION 'idempotency key % of event % was already used for another event', v_input->>'idempotencyKey', ordinal - 1
                    USING ERRCODE = 'WR004',
                          DETAIL = jsonb_build_object('index', ordinal - 1, 'key', v_input->>'idempotencyKey')::text;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- An erased text is NULL in the read models: a message's body (threads), a saved search's name
-- (preferences). Live tables made before this release take NULL from now on; the projections
-- make new ones so (their rows do not change: no new version, no replay).
DO $$
BEGIN
    IF to_regclass('public.messages') IS NOT NULL THEN
        ALTER TABLE public.messages ALTER COLUMN body DROP NOT NULL;
    END IF;
    IF to_regclass('public.saved_searches') IS NOT NULL THEN
        ALTER TABLE public.saved_searches ALTER COLUMN name DROP NOT NULL;
    END IF;
END
$$;
