-- The schedule's shop reminders (`shop_unanswered`, docs/schedule.md): what it reminded, so that a
-- second node, a restart or a replay never reminds of the same waiting message again. These are
-- state, not read models: a replay rebuilds the projections and leaves these alone. Each check
-- writes them in the same transaction as the outbox rows of its pushes.

-- One row per buyer message a reminder was sent about. A thread whose last message is one of these
-- does not remind again; the buyer's next message is a new waiting message. `message_at` is when
-- the message was written: a row whose message is older than the window (INBOX_SHOP_REMINDER_WINDOW_DAYS)
-- can never be waiting again, and the check deletes it.
CREATE TABLE shop_reminded_messages (
    message_id      text        PRIMARY KEY,
    shop_id         text        NOT NULL,
    conversation_id text        NOT NULL,
    message_at      timestamptz NOT NULL,
    reminded_at     timestamptz NOT NULL
);
CREATE INDEX shop_reminded_messages_message_at ON shop_reminded_messages (message_at);

-- One row per shop ever reminded: when its last push went out (at most one per
-- INBOX_SHOP_REMINDER_GAP_SECONDS), that push's notification id, and the pushes and messages so
-- far (`inbox status`).
CREATE TABLE shop_reminders (
    shop_id              text        PRIMARY KEY,
    last_reminded_at     timestamptz NOT NULL,
    last_notification_id text        NOT NULL,
    reminders            bigint      NOT NULL DEFAULT 0,
    messages             bigint      NOT NULL DEFAULT 0
);

-- The check reads only the threads whose last message is a buyer's and recent: this partial index
-- makes its cost follow those, not the whole history. `ThreadsProjection.createIndexes` makes it
-- for new live tables and for every replay; this makes it for live tables that an earlier release
-- created (their projection version is unchanged, so no replay comes to add it). On a new
-- database the migrations run before the live tables exist, and there is nothing to do here.
DO $$
BEGIN
    IF to_regclass('public.conversations') IS NOT NULL THEN
        CREATE INDEX IF NOT EXISTS conversations_waiting ON public.conversations (last_message_at)
            WHERE last_message_side = 'buyer' AND kind = 'watch';
    END IF;
END
$$;
