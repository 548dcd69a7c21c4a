/// Errors of the test environments.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// PostgreSQL failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying migrations failed.
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The producer side failed.
    #[error("producer error: {0}")]
    Producer(#[from] outbox_producer::Error),
    /// The operator side failed (the outbox's counts, the reconciliation).
    #[error("operator side error: {0}")]
    Ops(#[from] outbox_ops::Error),
    /// The relay failed.
    #[error("relay error: {0}")]
    Relay(#[from] outbox_relayer::Error),
    /// The consumer side failed.
    #[error("consumer error: {0}")]
    Consumer(#[from] outbox_inbox::Error),
    /// RabbitMQ failed (a raw operation of the test broker).
    #[error("broker error: {0}")]
    Amqp(#[from] lapin::Error),
    /// RabbitMQ failed or refused (the product's AMQP layer).
    #[error("broker error: {0}")]
    Broker(#[from] outbox_amqp::Error),
    /// A local command or file failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A node of a test cluster did not start, join, stop or start again (RabbitMQ's words).
    #[error("test cluster: {0}")]
    Cluster(String),
    /// The broker did not confirm a published message.
    #[error("the broker did not confirm event {0}")]
    NotConfirmed(outbox_types::EventId),
    /// A query given to the reconciliation does not return the documented columns.
    #[error("the {query} query does not return the expected columns: {reason}")]
    InvalidQuery {
        /// Which query (`entity_versions`, `event_ids`, `effects`).
        query: &'static str,
        /// What does not fit (column types, never values).
        reason: String,
    },
    /// A condition was not met before its deadline.
    #[error("timed out after {after:?} waiting for {what}; saw {seen}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The deadline.
        after: std::time::Duration,
        /// What the check saw last.
        seen: String,
    },
}

/// `Result` with the testkit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
