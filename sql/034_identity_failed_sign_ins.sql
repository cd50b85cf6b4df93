-- Wrong passwords given for an account, per hour: at the fifth within an hour the person is told
-- (`sign_in_attempts_failed`, in the bell and pushed), at most once an hour (docs/identity.md,
-- "Rate limits"). Keyed by a digest of the address typed, whether or not it has an account, so a
-- wrong password costs the same work either way; the table holds no address.
CREATE TABLE identity_failed_sign_ins (
    key               text        PRIMARY KEY,
    window_started_at timestamptz NOT NULL,
    failures          integer     NOT NULL,
    notified_at       timestamptz
);
CREATE INDEX identity_failed_sign_ins_window ON identity_failed_sign_ins (window_started_at);
