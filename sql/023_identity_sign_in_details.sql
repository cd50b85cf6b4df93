-- The person's own account over the API (GET /v1/me, GET /v1/me/sessions): how each sign-in was
-- made (password, Apple, Google) and with which app version, and the app version that made the
-- account. Earlier rows have none: they are shown without.
ALTER TABLE identity_sessions
    ADD COLUMN app_version text CHECK (length(app_version) <= 50),
    ADD COLUMN method text CHECK (method IN ('password', 'apple', 'google'));
ALTER TABLE identity_accounts ADD COLUMN app_version text CHECK (length(app_version) <= 50);
