-- The projector runtime: where each projection stands, what it could not apply, and what it asked
-- to be sent. The read models' own tables are created by the projections themselves (Swift, see
-- docs/projections.md), because a replay builds a new version of them beside the live one.

-- One row per projection: the version of its live tables and the checkpoint they reflect. A
-- projector's batch locks this row and compares it with what it expects, so a batch applied by a
-- node that lost its lease, or after a replay swapped the tables, is refused rather than doubled.
CREATE TABLE projection_checkpoints (
    projection      text        PRIMARY KEY,
    version         integer     NOT NULL CHECK (version >= 1),
    transaction_id  xid8        NOT NULL DEFAULT '0',
    position        bigint      NOT NULL DEFAULT 0,
    events_applied  bigint      NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Events a projection could not apply (or, from a newer release, could not read). The projector
-- parks them and goes on; `inbox status` and /metrics count them. Nothing here is ever retried on
-- its own: fix the cause, then `inbox replay`.
CREATE TABLE projection_dead_letters (
    projection      text        NOT NULL,
    position        bigint      NOT NULL,
    transaction_id  xid8        NOT NULL,
    type            text        NOT NULL,
    schema_version  integer     NOT NULL,
    error           text        NOT NULL,
    parked_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (projection, position)
);

-- A replay in progress: the schema its new tables are built in, and how far it has come.
CREATE TABLE projection_replays (
    projection      text        PRIMARY KEY,
    version         integer     NOT NULL,
    schema_name     text        NOT NULL,
    transaction_id  xid8        NOT NULL DEFAULT '0',
    position        bigint      NOT NULL DEFAULT 0,
    events_applied  bigint      NOT NULL DEFAULT 0,
    started_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Notifications decided by the live bell projection, for the fan-out to send. Written in the same
-- transaction as the bell entries and the checkpoint, so each is enqueued exactly once; a replay
-- never writes here.
CREATE TABLE notification_outbox (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id text        NOT NULL,
    audience        text        NOT NULL CHECK (audience IN ('person', 'shop')),
    recipient_id    text        NOT NULL,
    category        text        NOT NULL,
    event           text        NOT NULL,
    ids             jsonb       NOT NULL,
    source_position bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    enqueued_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (notification_id, audience, recipient_id)
);
