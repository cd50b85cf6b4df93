-- Where an account was signed in to before: from an app installation (the password grant's
-- installation_id) or from an address. An attempt on the account from one of them counts against
-- a budget of its own instead of the account's, so a guesser elsewhere cannot lock the owner out
-- (docs/identity.md, "Rate limits"). Keyed by a digest of the account's e-mail address and the
-- installation or address, as identity_rate_limits is: no address nor installation id is stored.
CREATE TABLE identity_trusted_sign_ins (
    key       text        PRIMARY KEY,
    last_used timestamptz NOT NULL
);
CREATE INDEX identity_trusted_sign_ins_last_used ON identity_trusted_sign_ins (last_used);
