-- TOTP secrets sealed under the key-encryption key (INBOX_SECRETS_KEY_FILE, docs/identity.md):
-- with the setting, a secret is written sealed (AES-256-GCM, the person id bound as associated
-- data) and marked `sealed`; an identity node that starts with the setting seals the rows written
-- before it. A sealed secret of 20 bytes is 49: the bound on its length is widened to hold one of 64.
ALTER TABLE identity_totp ADD COLUMN sealed boolean NOT NULL DEFAULT false;
ALTER TABLE identity_totp DROP CONSTRAINT identity_totp_secret_check;
ALTER TABLE identity_totp ADD CONSTRAINT identity_totp_secret_check CHECK (length(secret) BETWEEN 10 AND 128);
