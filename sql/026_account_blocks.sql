-- The blocks people set themselves (GET, POST, DELETE /v1/me/blocks): a person blocks a person or a
-- shop. State of the API, read live by every check of who may write to whom; told to the rest of the
-- tier by `person_blocked` / `shop_blocked` (and their `..._unblocked`), appended in the same
-- transaction with the `conversation_closed_by_block` / `conversation_reopened` of their threads.
CREATE TABLE account_blocks (
    blocker_id   text        NOT NULL CHECK (length(blocker_id) BETWEEN 1 AND 200),
    blocked_type text        NOT NULL CHECK (blocked_type IN ('people', 'shops')),
    blocked_id   text        NOT NULL CHECK (length(blocked_id) BETWEEN 1 AND 200),
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Where it was set: app:ios, app:android, web or api (X-Wristler-App), and the app's version.
    origin       text        NOT NULL,
    app_version  text,
    PRIMARY KEY (blocker_id, blocked_type, blocked_id)
);
-- Who blocked a person (the other direction of the checks).
CREATE INDEX account_blocks_blocked ON account_blocks (blocked_type, blocked_id);
