-- Uploaded files (POST /v1/uploads): state, not history, like devices. The bytes are in the
-- uploads folder under their SHA-256 (docs/uploads.md); this table says who uploaded which bytes
-- under which handle. The same bytes uploaded twice are two rows and one file. A handle nobody
-- attaches expires at expires_at and is swept, with its file once no other row names it.
CREATE TABLE uploads (
    handle          text        PRIMARY KEY CHECK (handle ~ '^[A-Za-z0-9_-]{24}$'),
    person_id       text        NOT NULL,
    sha256          text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    content_type    text        NOT NULL,
    size_bytes      bigint      NOT NULL CHECK (size_bytes > 0),
    -- Where the request came from (X-Wristler-App), as event metadata records it: app:ios,
    -- app:android or api, and the app's version.
    origin          text        NOT NULL,
    app_version     text,
    -- 'file' (a multipart part) or 'url' (fetched from a sourceUrl).
    source          text        NOT NULL CHECK (source IN ('file', 'url')),
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    attached        boolean     NOT NULL DEFAULT false,
    -- The first conversation it was attached in (all of them: upload_attachments).
    conversation_id text,
    attached_at     timestamptz
);

CREATE INDEX uploads_unattached_expiry ON uploads (expires_at) WHERE NOT attached;
CREATE INDEX uploads_sha256 ON uploads (sha256);

-- The conversations a handle is attached in (a photo may be sent in more than one): who may read
-- a file is looked up through these, by index, rather than by scanning every message.
CREATE TABLE upload_attachments (
    handle          text        NOT NULL REFERENCES uploads (handle) ON DELETE CASCADE,
    conversation_id text        NOT NULL,
    message_id      text,
    attached_at     timestamptz NOT NULL,
    PRIMARY KEY (handle, conversation_id)
);
