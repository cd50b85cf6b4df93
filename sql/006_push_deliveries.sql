-- The push fan-out (docs/fanout.md). Two steps, each in one transaction, so that nothing is sent
-- twice by a replay, a catch-up or a second node, and nothing is lost by a crash:
--
-- 1. Deciding: a fan-out claims pending outbox entries (FOR UPDATE SKIP LOCKED), works out who
--    gets a push on which registered device from the live preference, people and device tables,
--    writes one delivery per device (claimed by itself, to send at once), and deletes the entries
--    from the pending queue, all in one transaction. The outbox rows stay, so a projector catching
--    up from an old checkpoint meets them (ON CONFLICT DO NOTHING) and enqueues nothing again.
-- 2. Sending: a fan-out claims due deliveries for a while (claimed_until), sends them, and records
--    each answer: delivered and given-up rows are deleted and counted, retried ones rescheduled. A
--    fan-out that dies leaves its claims to the others when claimed_until passes; what it had in
--    flight may then be sent twice, and nothing more.

-- The outbox entries not decided yet, by id: a queue beside the outbox, so that deciding deletes a
-- narrow row instead of updating the outbox's own (an update there rewrites the row and its three
-- index entries: 1,000 of them took 29 to 36 ms, where deleting 1,000 narrow rows took 2 ms). Filled by a trigger
-- with exactly the rows an insert into the outbox wrote (a conflict writes none), in the same
-- transaction; the committed insert also wakes the fan-outs (they also poll).
CREATE TABLE notification_outbox_pending (
    outbox_id bigint PRIMARY KEY REFERENCES notification_outbox (id) ON DELETE CASCADE
);

CREATE FUNCTION enqueue_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notification_outbox_pending (outbox_id) SELECT id FROM inserted;
    PERFORM pg_notify('inbox_outbox', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER notification_outbox_enqueue AFTER INSERT ON notification_outbox
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION enqueue_outbox();

-- One push to one registered device. The device is read again when the push is sent: one deleted
-- meanwhile (or taken over by somebody else) gets nothing.
CREATE TABLE push_deliveries (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id     bigint      NOT NULL REFERENCES notification_outbox (id) ON DELETE CASCADE,
    device_id     uuid        NOT NULL,
    person_id     text        NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    not_before    timestamptz NOT NULL DEFAULT clock_timestamp(),
    claimed_until timestamptz,
    -- Set by a claim that found an earlier claim never recorded (its fan-out died): the push may
    -- already be on the phone, and is counted as possibly sent twice.
    reclaimed     boolean     NOT NULL DEFAULT false,
    deadline      timestamptz NOT NULL,
    last_reason   text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (outbox_id, device_id)
);
CREATE INDEX push_deliveries_due ON push_deliveries (not_before, id);

-- What the fan-outs did, summed over every node: pushes sent per platform, given up per reason,
-- registrations deleted per reason, and the ones skipped (device gone, another app's on a server
-- that is not production). `inbox status` and /metrics read it.
CREATE TABLE push_counters (
    name  text   PRIMARY KEY,
    count bigint NOT NULL DEFAULT 0
);

-- When each node last made its provider token (the APNs JWT, the FCM access token), for
-- `inbox status` and /metrics: a token that is too old means the node cannot renew it.
CREATE TABLE push_provider_tokens (
    node      text        NOT NULL,
    provider  text        NOT NULL CHECK (provider IN ('apns', 'fcm')),
    issued_at timestamptz NOT NULL,
    PRIMARY KEY (node, provider)
);

-- Nothing was ever pushed before this release: what the outbox holds already is history, not news
-- to send on the day of the upgrade, so none of it is pending.
