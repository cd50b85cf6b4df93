-- Every notification decided as of its event's place in the log (docs/fanout.md, "Decided as of
-- the event's place in the log").
--
-- Until now the fan-out and the mailer decided who gets a notification when they took it off their
-- queue, from the people's and the preferences' projections as those happened to stand then: a
-- shop member added just before an order was paid, in one request, often missed its news, because
-- the people's projection had not applied the membership yet. Now the bell projection, which
-- enqueues every notification in the transaction that moves its checkpoint, decides it with facts
-- of its own folded in the log's order (who works at which shop, the switches people changed,
-- saved searches' settings, blocked accounts), and writes its row with the decision for each
-- person it is for:
--
--   recipients    each person who works at the shop ('' alone: nobody does, and the news is
--                 counted as no_member, never sent); NULL: the person of recipient_id
--   push_skipped  per recipient, why it is not pushed (blocked, preference_off, no_member); '':
--                 pushed to the person's devices when it is sent; NULL: nobody is skipped
--   mail_skipped  the same for mail (the mail a notification joins follows from its kind)
--
-- One row per notification, as before (recipient_id still names the person or the shop), and what
-- almost every row says is NULL: a row per person who works at a shop made a catch-up write 42 %
-- more rows in the benchmark's mix, and spelled-out arrays made every row half as wide again.

ALTER TABLE notification_outbox ADD COLUMN recipients text[], ADD COLUMN push_skipped text[], ADD COLUMN mail_skipped text[];

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
    IF to_regclass('public.shop_members') IS NOT NULL AND to_regclass('public.notification_preferences') IS NOT NULL
        AND to_regclass('public.saved_searches') IS NOT NULL AND to_regclass('public.blocked_accounts') IS NOT NULL THEN
        CREATE TEMPORARY TABLE waiting ON COMMIT DROP AS
            SELECT o.id, o.audience, o.recipient_id, o.category, o.event, o.ids,
                CASE WHEN o.audience = 'person' AND o.category = 'saved_searches' THEN 'search:' || (o.ids->>'savedSearchId')
                     WHEN o.audience = 'person' THEN 'notifications'
                     WHEN o.event IN ('message_received', 'offer_made') THEN 'shop:' || (o.ids->>'sellerId')
                     WHEN o.event = 'order_paid' THEN 'sold' END AS mail_stream
            FROM notification_outbox o
            WHERE o.id IN (SELECT outbox_id FROM notification_outbox_pending UNION SELECT outbox_id FROM mail_pending);

        CREATE TEMPORARY TABLE decided ON COMMIT DROP AS
            SELECT w.id, p.person,
                CASE WHEN p.person = '' THEN 'no_member'
                     WHEN EXISTS (SELECT 1 FROM blocked_accounts b WHERE b.person_id = p.person) THEN 'blocked'
                     WHEN w.category = 'saved_searches' THEN CASE WHEN EXISTS (
                        SELECT 1 FROM saved_searches s WHERE s.saved_search_id = w.ids->>'savedSearchId' AND s.person_id = p.person
                            AND NOT s.deleted AND s.push) THEN '' ELSE 'preference_off' END
                     WHEN w.category IN ('security', 'orders') THEN ''
                     WHEN EXISTS (SELECT 1 FROM notification_preferences n WHERE n.person_id = p.person AND n.category = w.category
                        AND n.channel = 'push' AND NOT n.enabled) THEN 'preference_off'
                     ELSE '' END AS push_skipped,
                CASE WHEN w.mail_stream IS NULL THEN ''
                     WHEN p.person = '' THEN 'no_member'
                     WHEN EXISTS (SELECT 1 FROM blocked_accounts b WHERE b.person_id = p.person) THEN 'blocked'
                     WHEN w.category = 'saved_searches' THEN CASE WHEN EXISTS (
                        SELECT 1 FROM saved_searches s WHERE s.saved_search_id = w.ids->>'savedSearchId' AND s.person_id = p.person
                            AND NOT s.deleted AND s.interval <> 'never') THEN '' ELSE 'preference_off' END
                     WHEN EXISTS (SELECT 1 FROM notification_preferences n WHERE n.person_id = p.person AND n.category = w.category
                        AND n.channel = 'email' AND NOT n.enabled) THEN 'preference_off'
                     ELSE '' END AS mail_skipped
            FROM waiting w
            CROSS JOIN LATERAL (
                SELECT w.recipient_id AS person WHERE w.audience = 'person'
                UNION ALL
                SELECT m.person_id FROM shop_members m WHERE w.audience = 'shop' AND m.shop_id = w.recipient_id
                UNION ALL
                SELECT '' WHERE w.audience = 'shop' AND NOT EXISTS (SELECT 1 FROM shop_members m WHERE m.shop_id = w.recipient_id)
            ) p;

        UPDATE notification_outbox o SET recipients = d.recipients, push_skipped = d.push_skipped, mail_skipped = d.mail_skipped
        FROM waiting w,
            (SELECT id, array_agg(person ORDER BY person) AS recipients, array_agg(push_skipped ORDER BY person) AS push_skipped,
                array_agg(mail_skipped ORDER BY person) AS mail_skipped
             FROM decided GROUP BY id) d
        WHERE o.id = w.id AND d.id = w.id;
    END IF;
END;
$$;
