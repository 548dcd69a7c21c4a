-- Idempotent enqueue: the keys of events enqueued with `NewEvent::idempotency_key`.
--
-- A key is scoped by event type and kept until `expires_at` (the enqueue's window, 24 hours by
-- default). Enqueue inserts the key and the event in one statement; a key already here and not
-- expired makes the statement write nothing (ON CONFLICT ... WHERE expires_at <= now()), and the
-- enqueue answers with the first event's id. A second transaction with the same key waits on the
-- first one's uncommitted key and sees it once the first commits, so two racing requests make one
-- event and no unique violation. The key outlives its event's row if retention deletes the row
-- first: the answer is still the first event's id.
CREATE TABLE outbox_idempotency_keys (
    event_type      text        NOT NULL,
    idempotency_key text        NOT NULL,
    event_id        uuid        NOT NULL,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (event_type, idempotency_key)
);

-- Retention deletes expired keys oldest first in bounded batches.
CREATE INDEX outbox_idempotency_keys_expiry ON outbox_idempotency_keys (expires_at);
