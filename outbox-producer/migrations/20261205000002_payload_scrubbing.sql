-- Payload scrubbing: retention can clear the payload of published rows after one age
-- (`scrub_payload_after`) and keep the row, with its ids, type, entity, sequence and times, until
-- the later age of deletion. A scrubbed row holds an empty payload and the time it was cleared.
ALTER TABLE outbox_events ADD COLUMN payload_scrubbed_at timestamptz NULL;

-- The scrubbed rows by publication time. Scrubbing goes oldest first, so the newest scrubbed
-- row's `published_at` is where the next batch starts on `outbox_events_published`; a batch never
-- walks over the rows scrubbed before it. Only scrubbed rows are in this index: publishing writes
-- no entry here.
CREATE INDEX outbox_events_scrubbed ON outbox_events (published_at) WHERE payload_scrubbed_at IS NOT NULL;
