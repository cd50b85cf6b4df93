-- The oldest release of each app platform the API serves; older ones get 426 app_update_required
-- with the store URL. Operators change it with SQL; servers re-read it every few seconds.
--   INSERT INTO app_minimum_versions (platform, minimum_version, store_url)
--   VALUES ('ios', '2.4.1', 'https://apps.apple.com/...')
--   ON CONFLICT (platform) DO UPDATE SET minimum_version = excluded.minimum_version, store_url = excluded.store_url;
CREATE TABLE app_minimum_versions (
    platform        text        PRIMARY KEY CHECK (platform IN ('ios', 'android')),
    minimum_version text        NOT NULL CHECK (minimum_version ~ '^[0-9]{1,6}(\.[0-9]{1,6}){0,3}$'),
    store_url       text        NOT NULL CHECK (store_url ~ '^https://'),
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
