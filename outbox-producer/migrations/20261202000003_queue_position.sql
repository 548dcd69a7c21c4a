-- The relay's scan order is the commit order of each entity, not the due time.
--
-- With rows scanned by `next_attempt_at`, a head that was claimed, retried, released at shutdown
-- or whose lease expired after a crash sorts behind its own successors (committed earlier than that
-- time), and a window full of blocked successors can hide every claimable head. A position drawn
-- at insert time is in commit order per entity (seq n + 1 is inserted only after n committed,
-- under the entity's counter lock), so a head always precedes its successors; due-ness is checked
-- on the index tuple, without visiting the table.
ALTER TABLE outbox_events ADD COLUMN position bigint GENERATED ALWAYS AS IDENTITY;

DROP INDEX outbox_events_due;
CREATE INDEX outbox_events_queue ON outbox_events (position, next_attempt_at) WHERE status = 'pending';

-- Successors of quarantined events, deferred until an operator acts: the relay re-checks these few
-- rows periodically, so that a retry or skip racing with a claim can never leave them behind.
CREATE INDEX outbox_events_held ON outbox_events (entity_key, seq)
    WHERE status = 'pending' AND next_attempt_at = 'infinity';
