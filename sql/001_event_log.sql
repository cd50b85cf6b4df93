-- The append-only event log. See docs/event-log.md for the guarantees and the tests that prove them.

CREATE TABLE events (
    -- Global position: handed out by a sequence before commit, so commit order can differ from it.
    position        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The writing transaction; readers only see transactions below every open one (gap safety).
    transaction_id  xid8        NOT NULL DEFAULT pg_current_xact_id(),
    stream_id       text        NOT NULL CHECK (stream_id <> '' AND length(stream_id) <= 200),
    stream_version  bigint      NOT NULL CHECK (stream_version >= 1),
    type            text        NOT NULL CHECK (type ~ '^[a-z][a-z0-9_]*$' AND length(type) <= 100),
    schema_version  integer     NOT NULL DEFAULT 1 CHECK (schema_version >= 1),
    payload         jsonb       NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    metadata        jsonb       NOT NULL CHECK (
                                    jsonb_typeof(metadata) = 'object'
                                    AND metadata->>'origin' IN ('app:ios', 'app:android', 'web', 'api')),
    idempotency_key text        CHECK (idempotency_key <> '' AND length(idempotency_key) <= 200),
    recorded_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT events_stream_version_unique UNIQUE (stream_id, stream_version)
);

CREATE UNIQUE INDEX events_idempotency_key_unique ON events (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The order readers consume in: (transaction, position).
CREATE INDEX events_transaction_position ON events (transaction_id, position);

COMMENT ON TABLE events IS 'Append-only: UPDATE, DELETE and TRUNCATE are refused by triggers.';

-- The database itself refuses to change or remove history.
CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the event log is append-only: % on events is refused', TG_OP
        USING ERRCODE = 'WR002', HINT = 'Append a new event that corrects or reverses the old one.';
END
$$;

CREATE TRIGGER events_no_update_delete BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- One input event of append_events, after the lookup of its idempotency key and stream head.
CREATE TYPE event_append_input AS (
    ordinal         integer,
    stream_id       text,
    type            text,
    schema_version  integer,
    payload         jsonb,
    metadata        jsonb,
    idempotency_key text,
    first_ordinal   integer,  -- the first input in the batch with the same idempotency key
    known_position  bigint,   -- the stored event with that key, if there is one
    stream_version  bigint    -- the version it gets; NULL when nothing is written for it
);

-- Appends a batch atomically and returns, for every input event in order, the stored event:
-- the new row (`appended`, with payload and metadata left NULL: the caller has them), or the
-- original one when its idempotency key was already known, in the log or earlier in the batch
-- (nothing is written for it).
--
-- p_events:   [{"stream", "type", "schemaVersion", "payload", "metadata", "idempotencyKey"}, ...]
-- p_expected: {"stream id": expected current version (0 = the stream must not exist)}; streams not
--             named accept any version. A mismatch raises WR001 and writes nothing.
--
-- Index lookups are scalar subqueries; joins between the batch's own rows are hash joins
-- (enable_nestloop is off inside the function: the planner cannot estimate an array's size).
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
SET enable_nestloop = off
AS $$
DECLARE
    v_input event_append_input[];
    v_conflict record;
BEGIN
    IF jsonb_typeof(p_events) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'the events must be a JSON array' USING ERRCODE = '22023';
    END IF;

    SELECT array_agg(ROW(f.ordinal, f.stream_id, f.type, f.schema_version, f.payload, f.metadata, f.idempotency_key,
                         f.first_ordinal, f.known_position, f.stream_version)::event_append_input ORDER BY f.ordinal)
    INTO v_input
    FROM (
        SELECT k.*,
               CASE WHEN k.fresh THEN
                   max(k.head) OVER (PARTITION BY k.stream_id)
                   + row_number() OVER (PARTITION BY k.stream_id, k.fresh ORDER BY k.ordinal)
               END AS stream_version
        FROM (
            SELECT d.*, d.known_position IS NULL AND d.ordinal = d.first_ordinal AS fresh,
                   -- the head of each stream, looked up once per stream (on its first event)
                   CASE WHEN d.ordinal = min(d.ordinal) OVER (PARTITION BY d.stream_id) THEN
                       coalesce((SELECT max(e.stream_version) FROM events e WHERE e.stream_id = d.stream_id), 0)
                   END AS head
            FROM (
                SELECT i.*,
                       min(i.ordinal) OVER (PARTITION BY coalesce(i.idempotency_key, 'ordinal:' || i.ordinal)) AS first_ordinal,
                       CASE WHEN i.idempotency_key IS NOT NULL THEN
                           (SELECT e."position" FROM events e WHERE e.idempotency_key = i.idempotency_key)
                       END AS known_position
                FROM (
                    SELECT x.n::integer AS ordinal, x.e->>'stream' AS stream_id, x.e->>'type' AS type,
                           coalesce((x.e->>'schemaVersion')::integer, 1) AS schema_version,
                           x.e->'payload' AS payload, x.e->'metadata' AS metadata,
                           x.e->>'idempotencyKey' AS idempotency_key
                    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(e, n)
                ) i
            ) d
        ) k
    ) f;

    IF v_input IS NULL THEN
        RETURN;
    END IF;

    -- Only streams that receive a new event are held to their expected version: a retried append
    -- whose events are all known returns the originals.
    IF p_expected IS NOT NULL AND p_expected <> '{}'::jsonb THEN
        SELECT x.key AS stream, x.value::bigint AS expected, min(a.stream_version) - 1 AS actual
        INTO v_conflict
        FROM jsonb_each_text(p_expected) x
        JOIN unnest(v_input) a ON a.stream_id = x.key AND a.stream_version IS NOT NULL
        GROUP BY x.key, x.value
        HAVING min(a.stream_version) - 1 <> x.value::bigint
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'stream % is at version %, not the expected %', v_conflict.stream, v_conflict.actual,
                v_conflict.expected
                USING ERRCODE = 'WR001',
                      DETAIL = jsonb_build_object('stream', v_conflict.stream, 'expected', v_conflict.expected,
                                                  'actual', v_conflict.actual)::text;
        END IF;
    END IF;

    -- Wakes subscribers when the transaction commits (an identical payload is sent once per transaction).
    IF EXISTS (SELECT 1 FROM unnest(v_input) a WHERE a.stream_version IS NOT NULL) THEN
        PERFORM pg_notify('inbox_events', '');
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT * FROM unnest(v_input)
    ),
    inserted AS (
        INSERT INTO events (stream_id, stream_version, type, schema_version, payload, metadata, idempotency_key)
        SELECT a.stream_id, a.stream_version, a.type, a.schema_version, a.payload, a.metadata, a.idempotency_key
        FROM input a
        WHERE a.stream_version IS NOT NULL
        ORDER BY a.ordinal
        RETURNING events."position", events.transaction_id, events.stream_id, events.stream_version,
                  events.recorded_at
    )
    SELECT q.ordinal,
           q.appended,
           coalesce(q.new_position, (q.known).position),
           coalesce(q.new_transaction_id, (q.known).transaction_id),
           coalesce((q.known).stream_id, q.stream_id),
           coalesce(q.new_stream_version, (q.known).stream_version),
           coalesce((q.known).type, q.type),
           coalesce((q.known).schema_version, q.schema_version),
           CASE WHEN q.appended THEN NULL ELSE coalesce((q.known).payload, q.payload) END,
           CASE WHEN q.appended THEN NULL ELSE coalesce((q.known).metadata, q.metadata) END,
           coalesce((q.known).idempotency_key, q.idempotency_key),
           coalesce(q.new_recorded_at, (q.known).recorded_at)
    FROM (
        SELECT a.ordinal, a.stream_version IS NOT NULL AS appended,
               f.stream_id, f.type, f.schema_version, f.payload, f.metadata, f.idempotency_key,
               i."position" AS new_position, i.transaction_id AS new_transaction_id,
               i.stream_version AS new_stream_version, i.recorded_at AS new_recorded_at,
               -- an index lookup for the (rare) events whose key was already in the log
               CASE WHEN f.known_position IS NOT NULL THEN
                   (SELECT e FROM events e WHERE e."position" = f.known_position)
               END AS known
        FROM input a
        JOIN input f ON f.ordinal = a.first_ordinal
        LEFT JOIN inserted i ON i.stream_id = f.stream_id AND i.stream_version = f.stream_version
        OFFSET 0
    ) q
    ORDER BY q.ordinal;
END
$$;

-- The common case, about twice as fast: a batch with no expected versions whose idempotency keys
-- are new (the client sends repeated keys of one batch to append_events instead). Returns the new
-- rows in insertion order. If a key turns out to be in the log already, it raises WR003 and
-- writes nothing, and the client falls back to append_events, which returns the originals.
CREATE FUNCTION append_new_events(p_events jsonb)
RETURNS TABLE ("position" bigint, transaction_id xid8, stream_id text, stream_version bigint, recorded_at timestamptz)
LANGUAGE plpgsql
SET enable_nestloop = off
AS $$
DECLARE
    v_count integer;
BEGIN
    IF jsonb_typeof(p_events) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'the events must be a JSON array' USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT x.n AS ordinal, x.e->>'stream' AS stream_id, x.e->>'type' AS type,
               coalesce((x.e->>'schemaVersion')::integer, 1) AS schema_version,
               x.e->'payload' AS payload, x.e->'metadata' AS metadata, x.e->>'idempotencyKey' AS idempotency_key
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(e, n)
    ),
    heads AS (
        SELECT s.stream_id,
               coalesce((SELECT max(e.stream_version) FROM events e WHERE e.stream_id = s.stream_id), 0) AS head
        FROM (SELECT DISTINCT i.stream_id FROM input i) s
    ),
    inserted AS (
        INSERT INTO events AS e (stream_id, stream_version, type, schema_version, payload, metadata, idempotency_key)
        SELECT i.stream_id, h.head + row_number() OVER (PARTITION BY i.stream_id ORDER BY i.ordinal),
               i.type, i.schema_version, i.payload, i.metadata, i.idempotency_key
        FROM input i JOIN heads h ON h.stream_id = i.stream_id
        ORDER BY i.ordinal
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING e."position", e.transaction_id, e.stream_id, e.stream_version, e.recorded_at
    )
    SELECT * FROM inserted;

    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count <> jsonb_array_length(p_events) THEN
        RAISE EXCEPTION 'an idempotency key of the batch is already in the log' USING ERRCODE = 'WR003';
    END IF;
    IF v_count > 0 THEN
        PERFORM pg_notify('inbox_events', '');
    END IF;
END
$$;

-- The gap-safe forward read: events of committed transactions below every transaction still in
-- flight, after a (transaction id, position) checkpoint, in that order.
CREATE FUNCTION read_events_after(p_transaction_id xid8, p_position bigint, p_limit integer)
RETURNS SETOF events
LANGUAGE sql STABLE AS $$
    SELECT * FROM events e
    WHERE (e.transaction_id, e."position") > (p_transaction_id, p_position)
      AND e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY e.transaction_id, e."position"
    LIMIT p_limit
$$;
