-- The pending queue (sql/006) no longer checks its reference to the outbox.
--
-- Its rows are written only by the outbox's own statement trigger, with exactly the ids that
-- statement inserted, so the reference holds by construction; and no outbox row is ever deleted,
-- so the cascade never ran. The check did cost: PostgreSQL's foreign-key check is a query per
-- inserted row, planned once per session and kept. In a new database the outbox is empty when that
-- plan is made, so it scans the table, and went on scanning it, row by row, as it grew: in the HTTP
-- benchmark's first round of message posts, 7,108 such scans read 33 million outbox rows, until the
-- next ANALYZE. Every message to a buyer or a shop writes an outbox row.
ALTER TABLE notification_outbox_pending DROP CONSTRAINT IF EXISTS notification_outbox_pending_outbox_id_fkey;
