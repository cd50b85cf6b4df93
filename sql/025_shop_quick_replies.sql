-- A shop's quick replies: short texts its people answer buyers with (GET, POST, PATCH, DELETE
-- /v1/sellers/{sellerId}/quick-replies). State of the shop, not history: never in the event log.
CREATE TABLE shop_quick_replies (
    id          uuid        PRIMARY KEY,
    shop_id     text        NOT NULL CHECK (length(shop_id) BETWEEN 1 AND 200),
    body        text        NOT NULL CHECK (length(body) BETWEEN 1 AND 1000),
    created_by  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX shop_quick_replies_shop ON shop_quick_replies (shop_id, created_at, id);
