-- The mail outbox (docs/mail.md, "The mail outbox"): a person's notifications of every category
-- whose `email` is on, gathered into at most one mail per INBOX_MAIL_GATHER_SECONDS, with the push
-- outbox's guarantees. Four steps, each one transaction:
--
-- 1. Enqueued with the notification: the outbox's statement trigger (sql/006) now also writes the
--    person rows it inserted into `mail_pending`, in the projection's own transaction. An outbox
--    insert that meets its row again (a replay, a catch-up from an old checkpoint) inserts nothing
--    (ON CONFLICT DO NOTHING), so the trigger sees no row and nothing is mailed twice.
-- 2. Deciding: a mailer takes pending ids (FOR UPDATE SKIP LOCKED) and deletes them, keeps those
--    whose category's `email` switch is on (saved searches are mailed per search, later), and
--    queues them per person in `mail_queue`.
-- 3. Claiming: a mailer claims people whose queue may go now (`due_at` passed, no live claim),
--    with a fresh claim uuid and `claimed_until`.
-- 4. Recording: after the mail was handed to the relay, in one transaction and only while the
--    claim is still the mailer's: the items that were in the mail leave the queue, and the person
--    may be mailed again INBOX_MAIL_GATHER_SECONDS later. A temporary failure keeps the items and
--    waits (backoff); a permanent one, too many attempts, or no contact drops them and counts.
--
-- A mailer that dies between handing a mail over and recording it leaves the claim to run out:
-- another mailer then sends that mail again (the only way a mail goes twice).

CREATE TABLE mail_pending (
    outbox_id bigint PRIMARY KEY
);

CREATE OR REPLACE FUNCTION enqueue_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notification_outbox_pending (outbox_id) SELECT id FROM inserted;
    -- Shops' rows (audience 'shop') are for the people who work there: their digest comes later.
    INSERT INTO mail_pending (outbox_id) SELECT id FROM inserted WHERE audience = 'person';
    PERFORM pg_notify('inbox_outbox', '');
    RETURN NULL;
END;
$$;

-- What waits to be mailed, per person: one row per notification, deleted when the mail that held
-- it was sent (or dropped). The words are rendered at send time from `event` and `category`.
CREATE TABLE mail_queue (
    person_id   text        NOT NULL,
    outbox_id   bigint      NOT NULL,
    category    text        NOT NULL,
    event       text        NOT NULL,
    ids         jsonb       NOT NULL,
    -- When the notification happened (the outbox row's created_at).
    happened_at timestamptz NOT NULL,
    queued_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (person_id, outbox_id)
);

-- One row per person ever queued for mail.
CREATE TABLE mail_people (
    person_id       text        PRIMARY KEY,
    -- When the queued items may go: NULL while nothing is queued. Set by deciding to the later of
    -- next_allowed_at and now, by a temporary failure to the backoff's end.
    due_at          timestamptz,
    -- The earliest the next mail may go: the last mail sent + INBOX_MAIL_GATHER_SECONDS.
    next_allowed_at timestamptz NOT NULL,
    -- Failed tries of the mail now queued (reset by a sent or dropped mail).
    attempts        integer     NOT NULL DEFAULT 0,
    -- Kept across retries of one mail, so a relay that sees it twice can tell.
    message_id      text,
    -- Who holds the person: a new uuid at every claim, so a mailer whose claim ran out (and was
    -- taken over) cannot record over the new holder.
    claim           uuid,
    claimed_until   timestamptz,
    last_reason     text,
    mails_sent      bigint      NOT NULL DEFAULT 0,
    last_sent_at    timestamptz
);
CREATE INDEX mail_people_due ON mail_people (due_at) WHERE due_at IS NOT NULL;

-- What the mailers did, summed over every node (`inbox status`, /metrics): mails sent, retried,
-- dropped (permanent refusal or too many attempts), no_contact, and the notifications they held.
CREATE TABLE mail_counters (
    name  text   PRIMARY KEY,
    count bigint NOT NULL DEFAULT 0
);
