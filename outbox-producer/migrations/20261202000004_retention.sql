-- Retention of skipped rows.
--
-- Retention deletes published rows older than a given age by `published_at`, served by
-- `outbox_events_published`. Skipped rows (an operator gave up on them) have no `published_at`;
-- their age is the time they were quarantined, which the skip keeps. This index serves
-- `WHERE status = 'skipped' AND quarantined_at < $cutoff ORDER BY quarantined_at LIMIT $batch`,
-- so a retention batch never scans the table. Skipped rows are few: the index stays small.
CREATE INDEX outbox_events_skipped ON outbox_events (quarantined_at) WHERE status = 'skipped';
