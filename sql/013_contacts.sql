-- Where a person's mail goes, and in which language (docs/mail.md, "Contacts").
--
-- Addresses are personal data the event log must not hold (it is append-only and replayed for
-- ever): other tiers set and delete them through the internal API (`PUT` and `DELETE
-- /internal/v1/contacts/{personId}`), as state of this table alone, like devices. Deleting a
-- contact (an account closed, an address withdrawn) takes effect on the spot: mail is addressed
-- when it is sent, from this table, so nothing queued for that person goes out afterwards.
CREATE TABLE contacts (
    person_id  text        PRIMARY KEY CHECK (length(person_id) BETWEEN 1 AND 200),
    address    text        NOT NULL CHECK (length(address) BETWEEN 3 AND 254),
    language   text        NOT NULL CHECK (language IN ('en', 'nl', 'de', 'fr')),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
