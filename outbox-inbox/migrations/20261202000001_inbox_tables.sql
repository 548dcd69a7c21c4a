-- Inbox side (idempotent consumer). Every table is scoped by `consumer`, the consumer's name, so
-- several consumers can share one database.
--
-- The product tracks these migrations in its own table, `_inbox_migrations`, never in the host
-- application's `_sqlx_migrations` (see migrations/README.md).

-- One row per event a consumer has seen. The primary key is the deduplication: inserting an
-- event id that is already there means the delivery is a duplicate.
CREATE TABLE inbox_events (
    consumer         text        NOT NULL,
    event_id         uuid        NOT NULL,
    entity_key       text        NULL,
    seq              bigint      NULL CHECK (seq >= 1),
    -- processed: the handler's effect committed with this row.
    -- parked: arrived ahead of its predecessor; kept with its content until the gap fills.
    -- failed: the handler failed permanently; later events of the entity park behind it.
    -- skipped: an operator skipped it.
    status           text        NOT NULL
                     CHECK (status IN ('processed', 'parked', 'failed', 'skipped')),
    received_at      timestamptz NOT NULL DEFAULT now(),
    processed_at     timestamptz NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    last_error       text        NULL,
    -- The event's content, kept only while the row is parked or failed (so it can be handled
    -- without another delivery) and cleared once it is processed.
    event_type       text        NULL,
    event_version    bigint      NULL,
    content_type     text        NULL,
    payload          bytea       NULL,
    headers          jsonb       NULL,
    correlation_id   text        NULL,
    causation_id     text        NULL,
    created_at       timestamptz NULL,
    PRIMARY KEY (consumer, event_id),
    CONSTRAINT inbox_events_seq_iff_entity CHECK ((entity_key IS NULL) = (seq IS NULL))
);

-- Parked successors of an entity, looked up in sequence order when the gap fills; also serves
-- the age of the oldest gap.
CREATE INDEX inbox_events_parked ON inbox_events (consumer, entity_key, seq)
    WHERE status IN ('parked', 'failed');

-- Retention deletes old processed rows in batches.
CREATE INDEX inbox_events_processed ON inbox_events (consumer, processed_at)
    WHERE status IN ('processed', 'skipped');

-- Last applied sequence of each entity, per consumer. Updated in the handler's transaction.
CREATE TABLE inbox_entities (
    consumer    text        NOT NULL,
    entity_key  text        NOT NULL,
    last_seq    bigint      NOT NULL CHECK (last_seq >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, entity_key)
);
