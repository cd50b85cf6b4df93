-- The ID tokens of Apple and Google that signed somebody in, until they expire: one captured with
-- its nonce cannot sign in a second time (docs/identity.md, "Sign in with Apple or Google"). Their
-- SHA-256, never the token.
CREATE TABLE identity_used_id_tokens (
    digest     text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX identity_used_id_tokens_expiry ON identity_used_id_tokens (expires_at);
