-- A push sent at its first try no longer writes a row of its own (docs/fanout.md, "Batches").
--
-- Deciding still takes pending outbox entries (FOR UPDATE SKIP LOCKED) and deletes them from the
-- pending queue in one transaction; beside that it now writes ONE row for the whole batch: which
-- entries it decided, and who holds them until when. The fan-out sends the batch's pushes at once
-- and, in the transaction that records their answers, deletes the batch row and writes a delivery
-- row (sql/006) only for a push that must be tried again. Before, every push cost an insert into
-- and a delete from push_deliveries (three index entries each way); now a batch of a thousand
-- costs one insert and one delete.
--
-- A fan-out that dies with a batch in flight leaves the row behind; when claimed_until passes,
-- another fan-out takes the batch over, decides its entries again from the live tables (a device
-- deleted meanwhile gets nothing) and sends them, counting each as "reclaimed": it may already be
-- on the phone. So a crash can double at most the pushes that were in flight, and says how many.
CREATE TABLE push_batches (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_ids    bigint[]    NOT NULL,
    -- Who holds the batch: a new value at every claim, so that a fan-out whose batch was taken
    -- over (it was too slow, not dead) cannot delete the new holder's row.
    claim         uuid        NOT NULL,
    node          text        NOT NULL,
    claimed_until timestamptz NOT NULL,
    -- The pushes' deadline (decided + INBOX_PUSH_DEADLINE_SECONDS): a takeover keeps it.
    deadline      timestamptz NOT NULL,
    taken_over    integer     NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
