-- Every notification decided as of its event's place in the log (docs/fanout.md, "Decided as of
-- the log").
--
-- Until now the fan-out and the mailer decided who gets a notification when they took it off their
-- queue, from the people's and the preferences' projections as those happened to stand then: a
-- shop member added just before an order was paid, in one request, often missed its news, because
-- the people's projection had not applied the membership yet. Now the bell projection, which
-- enqueues every notification in the transaction that moves its checkpoint, decides it with facts
-- of its own folded in the log's order (who works at which shop, the switches people changed,
-- saved searches' settings, blocked accounts), and writes one row per person it is for, with the
-- decision:
--
--   push_skipped  why it is not pushed (blocked, preference_off, no_member); NULL: pushed to the
--                 person's devices when it is sent
--   mail_stream   the mail it joins (notifications, search:<id>, shop:<id>, sold); NULL: never mailed
--   mail_skipped  why it is not mailed; NULL with a stream: mailed
--
-- A shop's news has a row per person who works at the shop (recipient_id the person, the same
-- notification_id), or one row with an empty recipient_id and no_member when nobody does.

ALTER TABLE notification_outbox ADD COLUMN push_skipped text, ADD COLUMN mail_stream text, ADD COLUMN mail_skipped text;

-- The mail queue takes only what is mailed (or counted as not mailed); the push queue takes all,
-- so that the fan-out counts what is not pushed by its reason.
CREATE OR REPLACE FUNCTION enqueue_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notification_outbox_pending (outbox_id) SELECT id FROM inserted;
    INSERT INTO mail_pending (outbox_id) SELECT id FROM inserted WHERE mail_stream IS NOT NULL;
    PERFORM pg_notify('inbox_outbox', '');
    RETURN NULL;
END;
$$;

DO $$
DECLARE
    cp record;
BEGIN
    -- Live bell tables of version 2 get the facts of version 3, folded from the log up to the
    -- bell's checkpoint, which is locked meanwhile (an inline writer or the projector waits), so
    -- they stand exactly where its entries stand, and the bell is at version 3 without a replay.
    -- A newer node's projector then takes the bell on; an older one finds version 3 and stands
    -- down. A new database has no live tables yet: the projector makes them at version 3.
    SELECT * INTO cp FROM projection_checkpoints WHERE projection = 'bell' FOR UPDATE;
    IF to_regclass('public.bell_entries') IS NOT NULL AND cp.version = 2 THEN
        CREATE TABLE bell_shop_members (shop_id text NOT NULL, person_id text NOT NULL, PRIMARY KEY (shop_id, person_id));
        CREATE TABLE bell_switches (
            person_id text NOT NULL, category text NOT NULL, channel text NOT NULL, enabled boolean NOT NULL,
            PRIMARY KEY (person_id, category, channel));
        CREATE TABLE bell_blocked_accounts (person_id text PRIMARY KEY);
        ALTER TABLE bell_saved_searches ADD COLUMN interval text, ADD COLUMN push boolean;

        CREATE TEMPORARY TABLE folded ON COMMIT DROP AS
            SELECT type, payload, transaction_id, position FROM events
            WHERE type IN ('shop_member_added', 'shop_member_removed', 'notification_preference_changed', 'account_blocked',
                           'saved_search_created', 'saved_search_changed')
                AND (transaction_id, position) <= (cp.transaction_id, cp.position);

        INSERT INTO bell_shop_members (shop_id, person_id)
        SELECT shop_id, person_id FROM (
            SELECT DISTINCT ON (payload->>'shopId', payload->>'personId') payload->>'shopId' AS shop_id, payload->>'personId' AS person_id, type
            FROM folded WHERE type IN ('shop_member_added', 'shop_member_removed')
            ORDER BY payload->>'shopId', payload->>'personId', transaction_id DESC, position DESC) latest
        WHERE type = 'shop_member_added';

        INSERT INTO bell_switches (person_id, category, channel, enabled)
        SELECT DISTINCT ON (payload->>'personId', payload->>'category', payload->>'channel')
            payload->>'personId', payload->>'category', payload->>'channel', (payload->>'enabled')::boolean
        FROM folded WHERE type = 'notification_preference_changed'
        ORDER BY payload->>'personId', payload->>'category', payload->>'channel', transaction_id DESC, position DESC;

        INSERT INTO bell_blocked_accounts (person_id)
        SELECT DISTINCT payload->>'personId' FROM folded WHERE type = 'account_blocked';

        -- A search's interval and push: the latest that set them (a deleted search sends nothing, whatever they say).
        UPDATE bell_saved_searches s SET interval = l.interval FROM (
            SELECT DISTINCT ON (payload->>'savedSearchId') payload->>'savedSearchId' AS id, payload->>'interval' AS interval
            FROM folded WHERE type IN ('saved_search_created', 'saved_search_changed') AND payload->>'interval' IS NOT NULL
            ORDER BY payload->>'savedSearchId', transaction_id DESC, position DESC) l
        WHERE s.saved_search_id = l.id;
        UPDATE bell_saved_searches s SET push = l.push FROM (
            SELECT DISTINCT ON (payload->>'savedSearchId') payload->>'savedSearchId' AS id, (payload->>'push')::boolean AS push
            FROM folded WHERE type IN ('saved_search_created', 'saved_search_changed') AND payload->>'push' IS NOT NULL
            ORDER BY payload->>'savedSearchId', transaction_id DESC, position DESC) l
        WHERE s.saved_search_id = l.id;
        UPDATE bell_saved_searches SET interval = coalesce(interval, 'never'), push = coalesce(push, false);
        ALTER TABLE bell_saved_searches ALTER COLUMN interval SET NOT NULL, ALTER COLUMN push SET NOT NULL;

        UPDATE projection_checkpoints SET version = 3, updated_at = clock_timestamp() WHERE projection = 'bell';
    END IF;

    -- What an older release enqueued and no fan-out or mailer has taken yet is decided here, once,
    -- from the live people's and preferences' tables, as that release would have when it took it.
    -- A shop's row becomes a row per person who works at the shop, waiting in the same queues.
    IF to_regclass('public.shop_members') IS NOT NULL AND to_regclass('public.notification_preferences') IS NOT NULL
        AND to_regclass('public.saved_searches') IS NOT NULL AND to_regclass('public.blocked_accounts') IS NOT NULL THEN
        CREATE TEMPORARY TABLE waiting ON COMMIT DROP AS
            SELECT o.*, p.outbox_id IS NOT NULL AS for_push, m.outbox_id IS NOT NULL AS for_mail
            FROM notification_outbox o
            LEFT JOIN notification_outbox_pending p ON p.outbox_id = o.id
            LEFT JOIN mail_pending m ON m.outbox_id = o.id
            WHERE p.outbox_id IS NOT NULL OR m.outbox_id IS NOT NULL;

        CREATE TEMPORARY TABLE decided ON COMMIT DROP AS
            SELECT w.id AS old_id, w.for_push, w.for_mail, w.notification_id, w.audience, coalesce(m.person_id, w.recipient_id) AS recipient_id,
                w.category, w.event, w.ids, w.source_position, w.created_at, w.enqueued_at,
                CASE WHEN w.audience = 'person' AND w.category = 'saved_searches' THEN 'search:' || (w.ids->>'savedSearchId')
                     WHEN w.audience = 'person' THEN 'notifications'
                     WHEN w.event IN ('message_received', 'offer_made') THEN 'shop:' || (w.ids->>'sellerId')
                     WHEN w.event = 'order_paid' THEN 'sold' END AS mail_stream
            FROM waiting w
            LEFT JOIN shop_members m ON w.audience = 'shop' AND m.shop_id = w.recipient_id;
        ALTER TABLE decided ADD COLUMN push_skipped text, ADD COLUMN mail_skipped text;
        UPDATE decided d SET
            push_skipped = CASE
                WHEN d.audience = 'shop' AND d.recipient_id = (SELECT recipient_id FROM waiting WHERE id = d.old_id) THEN 'no_member'
                WHEN EXISTS (SELECT 1 FROM blocked_accounts b WHERE b.person_id = d.recipient_id) THEN 'blocked'
                WHEN d.category = 'saved_searches' THEN CASE WHEN EXISTS (
                    SELECT 1 FROM saved_searches s WHERE s.saved_search_id = d.ids->>'savedSearchId' AND s.person_id = d.recipient_id
                        AND NOT s.deleted AND s.push) THEN NULL ELSE 'preference_off' END
                WHEN d.category IN ('security', 'orders') THEN NULL
                WHEN EXISTS (SELECT 1 FROM notification_preferences p WHERE p.person_id = d.recipient_id AND p.category = d.category
                    AND p.channel = 'push' AND NOT p.enabled) THEN 'preference_off' END,
            mail_skipped = CASE
                WHEN d.mail_stream IS NULL THEN NULL
                WHEN d.audience = 'shop' AND d.recipient_id = (SELECT recipient_id FROM waiting WHERE id = d.old_id) THEN 'no_member'
                WHEN EXISTS (SELECT 1 FROM blocked_accounts b WHERE b.person_id = d.recipient_id) THEN 'blocked'
                WHEN d.category = 'saved_searches' THEN CASE WHEN EXISTS (
                    SELECT 1 FROM saved_searches s WHERE s.saved_search_id = d.ids->>'savedSearchId' AND s.person_id = d.recipient_id
                        AND NOT s.deleted AND s.interval <> 'never') THEN NULL ELSE 'preference_off' END
                WHEN EXISTS (SELECT 1 FROM notification_preferences p WHERE p.person_id = d.recipient_id AND p.category = d.category
                    AND p.channel = 'email' AND NOT p.enabled) THEN 'preference_off' END;
        -- A shop nobody works at: one row, for nobody.
        UPDATE decided SET recipient_id = '' WHERE push_skipped = 'no_member';

        -- The person rows are decided in place; the shop rows give way to the members' rows.
        UPDATE notification_outbox o SET push_skipped = d.push_skipped, mail_stream = d.mail_stream, mail_skipped = d.mail_skipped
        FROM decided d WHERE d.old_id = o.id AND d.audience = 'person';
        DELETE FROM mail_pending m USING decided d WHERE m.outbox_id = d.old_id AND (d.audience = 'shop' OR d.mail_stream IS NULL);
        DELETE FROM notification_outbox_pending p USING decided d WHERE p.outbox_id = d.old_id AND d.audience = 'shop';
        ALTER TABLE notification_outbox DISABLE TRIGGER notification_outbox_enqueue;
        WITH inserted AS (
            INSERT INTO notification_outbox (notification_id, audience, recipient_id, category, event, ids, source_position, created_at,
                enqueued_at, push_skipped, mail_stream, mail_skipped)
            SELECT notification_id, audience, recipient_id, category, event, ids, source_position, created_at, enqueued_at,
                push_skipped, mail_stream, mail_skipped
            FROM decided WHERE audience = 'shop'
            ON CONFLICT DO NOTHING
            RETURNING id, notification_id, recipient_id, source_position, mail_stream
        ), queued AS (
            SELECT i.id, bool_or(d.for_push) AS for_push, bool_or(d.for_mail) AS for_mail, i.mail_stream
            FROM inserted i JOIN decided d ON d.audience = 'shop' AND d.notification_id = i.notification_id
                AND d.recipient_id = i.recipient_id AND d.source_position = i.source_position
            GROUP BY i.id, i.mail_stream
        ), push AS (
            INSERT INTO notification_outbox_pending (outbox_id) SELECT id FROM queued WHERE for_push
        )
        INSERT INTO mail_pending (outbox_id) SELECT id FROM queued WHERE for_mail AND mail_stream IS NOT NULL;
        ALTER TABLE notification_outbox ENABLE TRIGGER notification_outbox_enqueue;
    END IF;
END;
$$;
