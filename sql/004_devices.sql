-- Push registrations: state, not history. A push token is a credential that must be deletable on
-- the spot, so it never enters the event log. One row per token: registering the same token again
-- updates its row; a token registered by another person moves to them.
CREATE TABLE devices (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    person_id        text        NOT NULL,
    platform         text        NOT NULL CHECK (platform IN ('ios', 'android')),
    push_token       text        NOT NULL UNIQUE CHECK (push_token <> '' AND length(push_token) <= 4096),
    app_id           text,
    app_version      text,
    name             text,
    locale           text,
    apns_environment text        CHECK (apns_environment IN ('development', 'production')),
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX devices_person ON devices (person_id, created_at, id);
