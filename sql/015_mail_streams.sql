-- The mail outbox's streams (docs/mail.md, "Streams"): besides the gathered notifications of
-- sql/014, a person now receives mails of three more kinds, each queued, timed and claimed on its
-- own, so that a daily saved-search mail never holds back the hourly notifications or the other
-- way round:
--
--   notifications         every category whose `email` is on, gathered: at most one mail per
--                         INBOX_MAIL_GATHER_SECONDS (the first at once)
--   search:<savedSearchId> a saved search's matches at its interval: instant, or a window of a
--                         day or a week opened by the first match (`never` queues nothing)
--   shop:<shopId>         for each person who works at the shop, the digest of what buyers wrote
--                         to it, a window of INBOX_SHOP_DIGEST_SECONDS opened by the first message
--   sold                  for each person who works at a shop, "your watch was sold" (paid), at once
--
-- A stream's mail goes at greatest(next_allowed_at, opened + window_ms): `next_allowed_at` spaces
-- mails out after one was sent (the gathering, notifications only), `window_ms` holds the first
-- item back so that what follows within the window joins it (digests, daily and weekly searches).

ALTER TABLE mail_people ADD COLUMN stream text NOT NULL DEFAULT 'notifications';
ALTER TABLE mail_people ADD COLUMN window_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE mail_people DROP CONSTRAINT mail_people_pkey;
ALTER TABLE mail_people ADD PRIMARY KEY (person_id, stream);
ALTER TABLE mail_people ALTER COLUMN stream DROP DEFAULT;

ALTER TABLE mail_queue ADD COLUMN stream text NOT NULL DEFAULT 'notifications';
ALTER TABLE mail_queue DROP CONSTRAINT mail_queue_pkey;
ALTER TABLE mail_queue ADD PRIMARY KEY (person_id, stream, outbox_id);
ALTER TABLE mail_queue ALTER COLUMN stream DROP DEFAULT;

-- Every outbox row is now decided for mail: a shop's rows (audience 'shop') go to the people who
-- work there, as the digest and the sold mail.
CREATE OR REPLACE FUNCTION enqueue_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notification_outbox_pending (outbox_id) SELECT id FROM inserted;
    INSERT INTO mail_pending (outbox_id) SELECT id FROM inserted;
    PERFORM pg_notify('inbox_outbox', '');
    RETURN NULL;
END;
$$;
