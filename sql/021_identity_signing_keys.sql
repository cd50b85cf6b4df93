-- The identity role's signing keys, when its nodes share them (INBOX_SECRETS_KEY_FILE, docs/identity.md):
-- every node reads every key here, publishes the same JWKS, verifies every node's tokens and signs
-- with the same key. The private key is stored sealed with AES-256-GCM under the key-encryption key
-- every node reads from its file (format byte, nonce, ciphertext of the PEM, tag; the row's kid is
-- bound as associated data), so the table, a dump or a backup hold no key in the clear.
--
-- A key signs from `signs_from` until a newer key's `signs_from` (`inbox keys rotate` adds one an
-- overlap ahead, so that every node publishes it before it signs); a retired key is no longer
-- published nor verifies.
CREATE TABLE identity_signing_keys (
    kid            text        PRIMARY KEY,
    sealed_private bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    signs_from     timestamptz NOT NULL,
    retired_at     timestamptz
);
