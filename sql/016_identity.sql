-- The identity role's state (docs/identity.md): accounts, their second factors and linked social
-- sign-ins, sign-in sessions with their refresh tokens, the challenges between a password and its
-- code, the handoffs of Apple's web flow, and the counters of the sign-in's rate limits.
--
-- State, never history: a password hash, a secret or an address must be changeable and deletable
-- on the spot, which the append-only log cannot do. What happens to an account (a sign-in, a
-- password changed, a block) is told to the rest of the tier as events in the log, in the same
-- transaction as the change here.
--
-- Every secret a client presents (refresh tokens, challenges, handoffs, recovery codes) is stored
-- as its SHA-256 digest only: a copy of this database signs nobody in. The TOTP secret cannot be
-- (a code is computed from it), and Apple's refresh token neither (it is presented to Apple).

CREATE TABLE identity_accounts (
    person_id       text        PRIMARY KEY CHECK (length(person_id) BETWEEN 1 AND 200),
    email           text        NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    email_verified  boolean     NOT NULL DEFAULT false,
    -- Argon2id in the PHC string format; NULL: no password (an account made by Apple or Google).
    password_hash   text        CHECK (length(password_hash) < 512),
    given_name      text        NOT NULL DEFAULT '' CHECK (length(given_name) <= 200),
    family_name     text        NOT NULL DEFAULT '' CHECK (length(family_name) <= 200),
    blocked_at      timestamptz,
    blocked_reason  text        CHECK (length(blocked_reason) <= 1000),
    -- Where the account was made: app:ios, app:android, web, api (the origin of X-Wristler-App).
    origin          text        NOT NULL DEFAULT 'api',
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One account per address, whatever its letter case.
CREATE UNIQUE INDEX identity_accounts_email ON identity_accounts (lower(email));

-- A TOTP authenticator (RFC 6238) of an account: at most one. `last_step` is the time step of the
-- last code accepted; a code of that step or an earlier one is never accepted again.
CREATE TABLE identity_totp (
    person_id   text        PRIMARY KEY REFERENCES identity_accounts ON DELETE CASCADE,
    secret      bytea       NOT NULL CHECK (length(secret) BETWEEN 10 AND 64),
    last_step   bigint      NOT NULL DEFAULT 0,
    enabled_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Recovery codes: each works once in place of a TOTP code.
CREATE TABLE identity_recovery_codes (
    person_id   text        NOT NULL REFERENCES identity_accounts ON DELETE CASCADE,
    digest      bytea       NOT NULL CHECK (length(digest) = 32),
    used_at     timestamptz,
    PRIMARY KEY (person_id, digest)
);

-- Apple and Google accounts linked to an account, by the provider's own subject (`sub`).
CREATE TABLE identity_social_links (
    provider            text        NOT NULL CHECK (provider IN ('apple', 'google')),
    subject             text        NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    person_id           text        NOT NULL REFERENCES identity_accounts ON DELETE CASCADE,
    -- Apple's refresh token from the authorization code, to revoke when the account is deleted.
    apple_refresh_token text        CHECK (length(apple_refresh_token) <= 2048),
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (provider, subject)
);
CREATE INDEX identity_social_links_person ON identity_social_links (person_id);

-- A sign-in: the family of refresh tokens that one sign-in started. Ended (`ended_at`) by a
-- refresh token presented twice (reuse), a block, a password change or a sign-out; over when
-- `expires_at` (90 days after its last refresh) has passed.
CREATE TABLE identity_sessions (
    id              uuid        PRIMARY KEY,
    person_id       text        NOT NULL REFERENCES identity_accounts ON DELETE CASCADE,
    client_id       text        NOT NULL,
    scopes          text        NOT NULL,
    platform        text        NOT NULL,
    device          text,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    refreshed_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at      timestamptz NOT NULL,
    ended_at        timestamptz,
    end_reason      text
);
CREATE INDEX identity_sessions_person ON identity_sessions (person_id) WHERE ended_at IS NULL;
CREATE INDEX identity_sessions_expiry ON identity_sessions (expires_at);
CREATE INDEX identity_sessions_ended ON identity_sessions (ended_at) WHERE ended_at IS NOT NULL;

-- Every refresh token a session handed out, by digest. Exactly one per live session has no
-- `used_at`; the used ones stay until the session is over, so that presenting one again is seen.
CREATE TABLE identity_refresh_tokens (
    digest      bytea       PRIMARY KEY CHECK (length(digest) = 32),
    session_id  uuid        NOT NULL REFERENCES identity_sessions ON DELETE CASCADE,
    generation  integer     NOT NULL,
    issued_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    used_at     timestamptz
);
CREATE INDEX identity_refresh_tokens_session ON identity_refresh_tokens (session_id);

-- The step between a right password and its second factor: what the password step asked for,
-- and how many codes may still be tried. Deleted when used, after its last attempt, or expired.
CREATE TABLE identity_challenges (
    digest          bytea       PRIMARY KEY CHECK (length(digest) = 32),
    person_id       text        NOT NULL REFERENCES identity_accounts ON DELETE CASCADE,
    client_id       text        NOT NULL,
    scopes          text        NOT NULL,
    attempts_left   integer     NOT NULL CHECK (attempts_left >= 0),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX identity_challenges_expiry ON identity_challenges (expires_at);

-- Apple's web flow: what Apple posted to /oauth/apple/return, its ID token already verified, until
-- the app exchanges the handoff (once, within five minutes) with the nonce it gave Apple.
CREATE TABLE identity_handoffs (
    digest              bytea       PRIMARY KEY CHECK (length(digest) = 32),
    subject             text        NOT NULL,
    email               text,
    email_verified      boolean     NOT NULL,
    nonce               text,
    audience            text        NOT NULL,
    given_name          text        NOT NULL DEFAULT '',
    family_name         text        NOT NULL DEFAULT '',
    authorization_code  text,
    expires_at          timestamptz NOT NULL
);
CREATE INDEX identity_handoffs_expiry ON identity_handoffs (expires_at);

-- Token buckets of the sign-in's rate limits, shared by every identity node: `tokens` is what was
-- left at `updated_at`, refilled by the rate of the limit since. Keys are digests of what they
-- count (an address, an account), never the address itself.
CREATE TABLE identity_rate_limits (
    key         text             PRIMARY KEY,
    tokens      double precision NOT NULL,
    updated_at  timestamptz      NOT NULL,
    -- Whether the last attempt was refused (the bucket held less than one).
    refused     boolean          NOT NULL DEFAULT false
);
CREATE INDEX identity_rate_limits_updated ON identity_rate_limits (updated_at);
