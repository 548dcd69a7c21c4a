-- Replay: published events sent again (to a consumer that joined late, lost its database or had
-- a bug), as recorded jobs. A job says what was asked, where the events go and how far it got, so
-- it survives the process running it (another run resumes after the last confirmed event), can be
-- paused or cancelled, and is listed by `outbox status`. The events themselves are not copied: a
-- job walks `outbox_events` in its own order, from its cursor.
CREATE TABLE outbox_replay_jobs (
    id              uuid        PRIMARY KEY,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Who asked (the operator's name as the command was given it, or the database role).
    created_by      text        NOT NULL,
    -- What was asked: {"entities": [...], "types": [...], "since": ..., "until": ..., "ids": [...]}.
    selection       jsonb       NOT NULL,
    -- Where the events go: {"exchange": "...", "routing": {...}} (see `ReplayTarget`).
    target          jsonb       NOT NULL,
    -- Events per second at most; NULL: as fast as the broker confirms.
    rate            integer     NULL CHECK (rate > 0),
    -- Rows positioned after the job was created are not part of it, nor rows published after it
    -- was created (`created_at`): they are live traffic, which the relay publishes to every
    -- bound queue.
    up_to_position  bigint      NOT NULL,
    state           text        NOT NULL DEFAULT 'running'
                    CHECK (state IN ('running', 'paused', 'cancelled', 'failed', 'done')),
    -- The last event sent and confirmed, in the job's order: events of an entity by
    -- (entity_key, seq) first, then events of no entity by id (cursor_id set once the first part
    -- is done: the nil uuid when it starts).
    cursor_entity   text        NULL,
    cursor_seq      bigint      NULL,
    cursor_id       uuid        NULL,
    -- Events selected when the job was created (published, payload kept), and what it did since.
    total           bigint      NOT NULL,
    sent            bigint      NOT NULL DEFAULT 0,
    -- Rows met while sending that could not go: payload scrubbed since, or sealed with a key the
    -- process running the job does not have.
    scrubbed        bigint      NOT NULL DEFAULT 0,
    unopenable      bigint      NOT NULL DEFAULT 0,
    -- The process that ran it last, and when it last recorded progress.
    runner          text        NULL,
    heartbeat_at    timestamptz NULL,
    finished_at     timestamptz NULL,
    -- Why a failed job stopped (a failure kind and reason; never a payload).
    last_error      text        NULL
);

-- `outbox status` lists the jobs that are not finished; `outbox replay list` the latest ones.
CREATE INDEX outbox_replay_jobs_created ON outbox_replay_jobs (created_at);
