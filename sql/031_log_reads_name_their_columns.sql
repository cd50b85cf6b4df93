-- The log's two reading functions return their columns by name instead of the table's row type
-- (`SETOF events`), with the same columns in the same order: a function that returns a table's row
-- type depends on that table, so `inbox personal-data seal-log` (docs/event-log.md, "Events from
-- before sealing"), which puts a sealed copy of the log in its place, would have had to drop and
-- make them again, and a reader calling one at that moment failed ("cache lookup failed for
-- function"). Now they find `events` by name when they run, as every other statement does.
DROP FUNCTION read_events_after(xid8, bigint, integer);
CREATE FUNCTION read_events_after(p_transaction_id xid8, p_position bigint, p_limit integer)
RETURNS TABLE (
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
LANGUAGE sql STABLE AS $$
    SELECT e."position", e.transaction_id, e.stream_id, e.stream_version, e.type, e.schema_version, e.payload, e.metadata,
        e.idempotency_key, e.recorded_at
    FROM events e
    WHERE (e.transaction_id, e."position") > (p_transaction_id, p_position)
      AND e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY e.transaction_id, e."position"
    LIMIT p_limit
$$;

DROP FUNCTION read_events_before_own(xid8, bigint, integer);
CREATE FUNCTION read_events_before_own(p_transaction_id xid8, p_position bigint, p_limit integer)
RETURNS TABLE (
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
LANGUAGE sql STABLE AS $$
    SELECT e."position", e.transaction_id, e.stream_id, e.stream_version, e.type, e.schema_version, e.payload, e.metadata,
        e.idempotency_key, e.recorded_at
    FROM events e
    WHERE (e.transaction_id, e."position") > (p_transaction_id, p_position)
      AND e.transaction_id < pg_current_xact_id()
    ORDER BY e.transaction_id, e."position"
    LIMIT p_limit
$$;
