-- A fan-out records each push's answer as it arrives (docs/fanout.md, "Several fan-outs, and
-- crashes"), no longer once for its whole batch, so that a fan-out taking over the batch of one
-- that died sends again only what was still on its way, not the batch.
--
-- The batch row now lists its pushes, (outbox entry, registration) in the order they were decided
-- (written once, with the row), and a bit per push that says its answer is recorded: recording a
-- few answers sets their bits, a small update of one row that leaves the lists as they are. The
-- counters of those answers wait on the row too (names and counts, summed when the batch ends or
-- is taken over), so that several fan-outs recording at once do not queue on `push_counters`'
-- hot rows. A batch of an older release has empty lists: a takeover decides it again from its
-- outbox entries, as that release did.
ALTER TABLE push_batches
    ADD COLUMN push_outbox_ids bigint[]    NOT NULL DEFAULT '{}',
    ADD COLUMN push_devices    uuid[]      NOT NULL DEFAULT '{}',
    ADD COLUMN answered        bit varying NOT NULL DEFAULT B'',
    ADD COLUMN counted_names   text[]      NOT NULL DEFAULT '{}',
    ADD COLUMN counted         bigint[]    NOT NULL DEFAULT '{}';

-- The lists are written once and never compressed well (ids): kept out of line as they are, so
-- that a batch's insert does not spend its time trying. A batch lists its entries in push_outbox_ids
-- only; outbox_ids stays for the batches of an older release.
ALTER TABLE push_batches ALTER COLUMN push_outbox_ids SET STORAGE EXTERNAL, ALTER COLUMN push_devices SET STORAGE EXTERNAL;
