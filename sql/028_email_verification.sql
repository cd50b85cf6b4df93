-- Verifying an address (docs/identity.md, "Changing the address"): a change of address waiting for
-- the link of its verification mail (PATCH /v1/me with email), or the account's own unverified
-- address (POST /v1/me/email-verification). One per account: a newer one replaces it, and the
-- older link dies. The link's token is kept as its SHA-256 only.
CREATE TABLE identity_email_verifications (
    person_id  text        PRIMARY KEY REFERENCES identity_accounts ON DELETE CASCADE,
    email      text        NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    digest     bytea       NOT NULL UNIQUE,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Mails that are not notifications (the verification mail): written by an API node, rendered by
-- the mailer in `language` and deleted once the relay took them (or refused them for good, or they
-- expired). `link` holds the verification's secret, so the row lives only until then, and goes
-- with the account when it is closed.
CREATE TABLE mail_transactional (
    id              bigserial   PRIMARY KEY,
    person_id       text        NOT NULL REFERENCES identity_accounts ON DELETE CASCADE,
    kind            text        NOT NULL CHECK (kind IN ('email_verification')),
    recipient       text        NOT NULL CHECK (length(recipient) BETWEEN 3 AND 254),
    language        text        NOT NULL,
    link            text        NOT NULL CHECK (length(link) <= 2000),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX mail_transactional_due ON mail_transactional (next_attempt_at);
CREATE INDEX mail_transactional_person ON mail_transactional (person_id);
