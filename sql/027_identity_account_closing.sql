-- Closing an account (POST /v1/me/closure, docs/identity.md "Closing an account"): the account's
-- rows are deleted (sessions, links, second factor with them), and these remain.

-- The ids of closed accounts: never given to a new account (the log still names them).
CREATE TABLE identity_closed_accounts (
    person_id text        PRIMARY KEY,
    closed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Apple's refresh tokens of closed accounts, until Apple's revoke endpoint has taken them
-- (App Store Review Guideline 5.1.1(v)): written in the closing's transaction, revoked by the
-- identity role after it (`AppleRevocations`), retried with backoff while Apple cannot be reached.
CREATE TABLE identity_apple_revocations (
    id              bigserial   PRIMARY KEY,
    person_id       text        NOT NULL,
    client_id       text        NOT NULL CHECK (length(client_id) BETWEEN 1 AND 255),
    token           text        NOT NULL CHECK (length(token) BETWEEN 1 AND 2048),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX identity_apple_revocations_due ON identity_apple_revocations (next_attempt_at);

-- The client the authorization code was made for: Apple revokes a token only for its own client.
ALTER TABLE identity_social_links ADD COLUMN apple_client_id text CHECK (length(apple_client_id) BETWEEN 1 AND 255);
