-- Outbox side of the transactional outbox.
--
-- The product tracks these migrations in its own table, `_outbox_migrations`, never in the host
-- application's `_sqlx_migrations` (see migrations/README.md).

-- One row per event. Written by `Outbox::enqueue` inside the caller's transaction (G1), read and
-- updated by the relay.
CREATE TABLE outbox_events (
    -- Event id, UUID v7. The same id is used for every publish attempt (G3).
    id               uuid        PRIMARY KEY,
    event_type       text        NOT NULL CHECK (length(event_type) BETWEEN 1 AND 255),
    event_version    bigint      NOT NULL CHECK (event_version BETWEEN 1 AND 4294967295),
    -- Ordering key. NULL for unordered events, which carry no sequence.
    entity_key       text        NULL CHECK (octet_length(entity_key) BETWEEN 1 AND 255),
    -- Gapless per-entity sequence 1, 2, 3... in commit order (G4); NULL iff entity_key is NULL.
    seq              bigint      NULL CHECK (seq >= 1),
    payload          bytea       NOT NULL,
    content_type     text        NOT NULL,
    -- Extra AMQP headers of the event: a JSON object of string, integer or boolean values.
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    correlation_id   text        NULL,
    causation_id     text        NULL,
    traceparent      text        NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),

    -- Lifecycle: pending -> published | quarantined; quarantined -> pending (operator retry)
    -- | skipped (operator skip). Published and skipped rows are final.
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'published', 'quarantined', 'skipped')),
    -- Publish attempts started (counted when the relay claims the row).
    attempts         integer     NOT NULL DEFAULT 0,
    -- A pending row is due when next_attempt_at <= now(). A claim moves it to the lease expiry,
    -- a transient failure to the backoff time; so one index serves "what can be claimed now".
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- The relay instance holding the claim, and the claim's fencing token: every outcome the relay
    -- records is conditional on the token it claimed with, so a relay whose lease expired and was
    -- taken over cannot overwrite the new owner's outcome.
    lease_owner      text        NULL,
    claim_token      uuid        NULL,
    last_error       text        NULL,
    last_error_kind  text        NULL
                     CHECK (last_error_kind IN ('transient', 'contract', 'auth', 'rejected', 'contended')),
    published_at     timestamptz NULL,
    quarantined_at   timestamptz NULL,

    CONSTRAINT outbox_events_seq_iff_entity CHECK ((entity_key IS NULL) = (seq IS NULL))
);

-- Hot query of the relay: pending rows that are due, oldest first. Partial, so published rows
-- leave it and a backlog of millions of published rows costs nothing here.
CREATE INDEX outbox_events_due ON outbox_events (next_attempt_at, id) WHERE status = 'pending';

-- Per-entity order: the relay checks the predecessor (entity_key, seq - 1) of a candidate, and
-- the uniqueness backs the gapless-sequence guarantee.
CREATE UNIQUE INDEX outbox_events_entity_seq ON outbox_events (entity_key, seq) WHERE entity_key IS NOT NULL;

-- Operators list quarantined rows; retention deletes old published rows in batches.
CREATE INDEX outbox_events_quarantined ON outbox_events (quarantined_at) WHERE status = 'quarantined';
CREATE INDEX outbox_events_published ON outbox_events (published_at) WHERE status IN ('published', 'skipped');

-- Per-entity counter. `enqueue` upserts it with `last_seq + 1 ... RETURNING last_seq`; the row
-- lock is held until the enqueuing transaction ends, so sequence order equals commit order and a
-- rolled-back transaction consumes no number.
CREATE TABLE outbox_entity_sequences (
    entity_key  text   PRIMARY KEY,
    last_seq    bigint NOT NULL CHECK (last_seq >= 1)
);

-- Wake-up of the relay. A statement-level trigger so that `pg_notify` runs inside the enqueuing
-- transaction and is delivered only if it commits; PostgreSQL folds identical notifications of
-- one transaction into one.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_events', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
