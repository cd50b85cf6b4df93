-- The mailers' counters in shards (docs/mail.md, "Tables"). Every recorded mail adds to `sent` and
-- `notifications_sent` in the transaction that records it, so with several mailing loops
-- (INBOX_MAIL_WORKERS) each waited on those two rows for the others' commits: the record's
-- statement averaged 240 us, most of it that wait. A session now adds to the shard of its
-- backend's pid, one of 16; a counter is the sum of its name's shards.
ALTER TABLE mail_counters ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE mail_counters DROP CONSTRAINT mail_counters_pkey;
ALTER TABLE mail_counters ADD PRIMARY KEY (name, shard);
