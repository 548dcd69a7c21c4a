use outbox_types::db_error::{DbMessage, MigrateMessage, RedactedSqlx, database_kind};
use outbox_types::{EventError, FailureKind};

/// Errors of the producer side.
///
/// Messages carry ids, field names and sizes, never payloads or credentials. The `Debug` form of a
/// database error keeps its SQLSTATE code and message but drops PostgreSQL's detail, which can quote
/// a whole row ("Failing row contains ...") and with it a payload.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The event was rejected by validation before any SQL ran; the caller's transaction is
    /// untouched and can still commit.
    #[error("invalid event: {0}")]
    InvalidEvent(#[from] EventError),
    /// The event at this index of an `enqueue_many` batch was rejected by validation; nothing of
    /// the batch was written.
    #[error("invalid event at index {index} of the batch: {source}")]
    InvalidBatchEvent {
        /// Position of the event in the batch.
        index: usize,
        /// Why it was rejected.
        source: EventError,
    },
    /// The event's idempotency key was taken by an earlier event of the same type within the
    /// window: nothing was written (of a batch: nothing of it), and the transaction can still
    /// commit or roll back. `event_id` is the earlier event's id.
    #[error("an event with this idempotency key was already enqueued: {event_id}")]
    AlreadyEnqueued {
        /// The id of the event that took the key.
        event_id: outbox_types::EventId,
        /// The refused event's position in an `enqueue_many` batch.
        index: Option<usize>,
    },
    /// The payload could not be sealed: the cipher's key provider has no key for its own current
    /// key id.
    #[error("payload encryption failed: {0}")]
    Encryption(#[from] outbox_types::CipherError),
    /// The database refused or failed a statement.
    #[error("database error: {}", DbMessage(.0))]
    Database(#[from] sqlx::Error),
    /// Applying the product's migrations failed.
    #[error("migration error: {}", MigrateMessage(.0))]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl Error {
    /// The class of failure: whether trying again can help.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::InvalidEvent(_)
            | Self::InvalidBatchEvent { .. }
            | Self::AlreadyEnqueued { .. }
            | Self::Encryption(_) => FailureKind::Contract,
            Self::Database(e) => database_kind(e),
            Self::Migrate(_) => FailureKind::Transient,
        }
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidEvent(e) => f.debug_tuple("InvalidEvent").field(e).finish(),
            Self::InvalidBatchEvent { index, source } => {
                f.debug_struct("InvalidBatchEvent").field("index", index).field("source", source).finish()
            }
            Self::AlreadyEnqueued { event_id, index } => {
                f.debug_struct("AlreadyEnqueued").field("event_id", event_id).field("index", index).finish()
            }
            Self::Encryption(e) => f.debug_tuple("Encryption").field(e).finish(),
            Self::Database(e) => f.debug_tuple("Database").field(&RedactedSqlx(e)).finish(),
            Self::Migrate(e) => f.debug_tuple("Migrate").field(&format_args!("{e}")).finish(),
        }
    }
}

/// `Result` with the producer's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
