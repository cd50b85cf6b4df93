-- The outbox's "each notification once" key, with the event's position first.
--
-- It was UNIQUE (notification_id, audience, recipient_id). A notification's id is a hash of its
-- event's position and its recipient (docs/projections.md, "The bell"), so every insert went into
-- that key's B-tree at a random place: a descent to a random leaf and, once the table outgrew the
-- cache, a read and a dirtied page each. A live catch-up inserts hundreds of thousands of rows at
-- once, and that key was most of its longest statement (docs/benchmarks.md, "Issue 14, sixth
-- session").
--
-- Every writer of the outbox writes a given notification id with one position only: the bell's
-- ids are hashes of (position, recipient), a shop's news of (position, "shop:" + shop); the shop
-- reminders write position 0 always; a legacy import's own id is never sent. So a key that leads
-- with source_position refuses exactly the rows the old key refused, and rows come in the log's
-- order, each at the right end of the tree.
--
-- The writers say `ON CONFLICT DO NOTHING` with no target since this release, which takes either
-- key; a node of an older release names the old key's columns and fails until it is replaced
-- (its projector retries; nothing is lost).
CREATE UNIQUE INDEX notification_outbox_once
    ON notification_outbox (source_position, notification_id, audience, recipient_id);
ALTER TABLE notification_outbox DROP CONSTRAINT notification_outbox_notification_id_audience_recipient_id_key;
