-- "Next in the log" for the inline driver (docs/projections.md, "The inline driver"), counting
-- only the transactions that can still append.
--
-- An inline writer may apply its own events to a read model and move the checkpoint past them
-- only when no older transaction can still append events that sort before them (the log is read
-- in (transaction_id, position) order). Until now that meant no older transaction open at all,
-- `pg_snapshot_xmin(pg_current_snapshot()) = pg_current_xact_id()`: every transaction holding an
-- id counted, also a projector's batch, a fan-out's or the mailer's claim, none of which ever
-- appends. While any of those was open, inline writers left their projections to the async
-- projectors, and their authors could miss their own writes on the next read.
--
-- Sessions that never append now say so: their `application_name` ends with ' [no appends]', and
-- the database holds them to it (the trigger below refuses their inserts into the log, COPY
-- included). An older open transaction of such a session no longer keeps a writer from being
-- next. The check reads `pg_stat_activity` (whose `application_name` and `backend_xid` every role
-- sees), and `pg_locks` for a subtransaction's id; whatever it cannot match (a session gone or on
-- to a newer transaction, a prepared transaction) counts as one that could append, so every doubt
-- defers, as before.

CREATE FUNCTION never_appends(p_application_name text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT right(coalesce(p_application_name, ''), 12) = '[no appends]'
$$;

CREATE FUNCTION events_refuse_non_appenders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF never_appends(current_setting('application_name')) THEN
        RAISE EXCEPTION 'this session (application_name %) never appends to the event log',
            quote_literal(current_setting('application_name'))
            USING ERRCODE = 'WR003',
                  HINT = 'Inline writers count on it: append from a session whose name does not end with [no appends].';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_appenders_only BEFORE INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_non_appenders();

-- Whether this transaction is next in the log: every older transaction still open belongs to a
-- session that never appends. Meant for a transaction that has appended (it has an id). The older
-- open transactions are those the snapshot lists below its xmax, and every id from its xmax up to
-- this transaction's own: ids handed out after the newest one that ended, so all still open (the
-- snapshot does not list them). Among those are subtransactions' ids (a projector applies its
-- batch behind a savepoint), which `pg_stat_activity` does not show: while the subtransaction is
-- open it holds the lock on its id, and `pg_locks` names its session; once released into its
-- parent it holds none, and the parent (open, older, so looked at too) decides. A transaction
-- that has ended by the time it is looked at counts for nothing: the caller reads what is pending
-- after this returns, in a newer snapshot that sees its events.
CREATE FUNCTION next_in_the_log() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    snapshot pg_snapshot := pg_current_snapshot();
    own xid8 := pg_current_xact_id();
    older xid8;
BEGIN
    IF pg_snapshot_xmin(snapshot) = own THEN
        RETURN true;
    END IF;
    FOR older IN
        SELECT x FROM pg_snapshot_xip(snapshot) AS x WHERE x < own
        UNION ALL
        SELECT n::text::xid8 FROM generate_series(pg_snapshot_xmax(snapshot)::text::bigint, own::text::bigint - 1) AS n
    LOOP
        -- Ended since the snapshot: whatever it appended is committed (or gone) before the read
        -- of what is pending, which the caller sends after this, with a snapshot of its own.
        CONTINUE WHEN coalesce(pg_xact_status(older), 'committed') <> 'in progress';
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM pg_stat_activity a WHERE a.backend_xid = older::xid AND never_appends(a.application_name));
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'transactionid' AND l.transactionid = older::xid AND l.mode = 'ExclusiveLock' AND l.granted
              AND never_appends(a.application_name));
        -- Ended while it was looked for (its id leaves the sessions and the locks as it commits).
        CONTINUE WHEN coalesce(pg_xact_status(older), 'committed') <> 'in progress';
        -- Open, yet no session's id and no lock's: a subtransaction released into its parent (its
        -- lock goes at the RELEASE). The parent is open and older still, so it is one of the ids
        -- looked at here, and decides.
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.backend_xid = older::xid)
            AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'transactionid' AND l.transactionid = older::xid);
        RETURN false;
    END LOOP;
    RETURN true;
END
$$;

-- What an inline writer that is next in the log applies first: up to p_limit events after the
-- checkpoint, committed by transactions older than this one. (`read_events_after` stops at the
-- snapshot's xmin, which an open transaction of a session that never appends may hold back;
-- when this transaction is next, nothing older than it can still be appended.)
CREATE FUNCTION read_events_before_own(p_transaction_id xid8, p_position bigint, p_limit integer)
RETURNS SETOF events
LANGUAGE sql STABLE AS $$
    SELECT * FROM events e
    WHERE (e.transaction_id, e."position") > (p_transaction_id, p_position)
      AND e.transaction_id < pg_current_xact_id()
    ORDER BY e.transaction_id, e."position"
    LIMIT p_limit
$$;
