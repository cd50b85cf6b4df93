-- A fan-out records each push's answer as it arrives (docs/fanout.md, "Several fan-outs, and
-- crashes"), no longer once for its whole batch: the pushes of a batch whose answers are recorded
-- are listed on the batch's row, in the transaction that records them, so that a fan-out taking
-- over the batch from one that died sends again only what was still on its way, not the batch.
ALTER TABLE push_batches
    ADD COLUMN answered_outbox_ids bigint[] NOT NULL DEFAULT '{}',
    ADD COLUMN answered_devices    uuid[]   NOT NULL DEFAULT '{}';
