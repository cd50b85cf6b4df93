-- A second factor being enrolled by the person (POST /v1/me/second-factor): its secret until a
-- code from the authenticator confirms it, then it moves to identity_totp. Sealed under
-- INBOX_SECRETS_KEY_FILE where that is set, as identity_totp's.
CREATE TABLE identity_totp_pending (
    person_id     text        PRIMARY KEY REFERENCES identity_accounts ON DELETE CASCADE,
    secret        bytea       NOT NULL CHECK (length(secret) BETWEEN 10 AND 128),
    sealed        boolean     NOT NULL,
    attempts_left integer     NOT NULL CHECK (attempts_left >= 0),
    expires_at    timestamptz NOT NULL
);
