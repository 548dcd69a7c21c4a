-- Claims that do not touch an index.
--
-- A claim used to move `next_attempt_at` (a column of the queue index) to the lease expiry, so
-- every claim wrote a new row version plus an entry in each of the table's indexes, and the mark
-- did the same again. The lease now lives in a column of its own that no index covers: a claim
-- changes only unindexed columns and PostgreSQL can keep the new version on the same page
-- without touching any index (a HOT update), provided the page has room. The fill factor leaves
-- that room. Measured on the relay's claim-and-mark cycle over a 100,000-event backlog: about a
-- third less database time per claimed event.
--
-- A pending row is claimable when it is due (`next_attempt_at <= now()`) and not leased
-- (`lease_until` is NULL or past). Rows claimed before this migration keep their lease in
-- `next_attempt_at` and become due when it expires, as before.
ALTER TABLE outbox_events ADD COLUMN lease_until timestamptz NULL;
ALTER TABLE outbox_events SET (fillfactor = 70);
