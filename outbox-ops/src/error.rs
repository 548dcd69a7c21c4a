use outbox_types::FailureKind;
use outbox_types::db_error::{DbMessage, RedactedSqlx, database_kind};

/// Errors of the operator side.
///
/// Messages carry ids, field names and sizes, never payloads or credentials. The `Debug` form of a
/// database error keeps its SQLSTATE code and message but drops PostgreSQL's detail, which can quote
/// a whole row ("Failing row contains ...") and with it a payload.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database refused or failed a statement.
    #[error("database error: {}", DbMessage(.0))]
    Database(#[from] sqlx::Error),
    /// A retention setting is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// A row breaks the schema's promises (written by SQL rather than `enqueue`).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A query given to the reconciliation does not return the documented columns.
    #[error("the {query} query does not return the expected columns: {reason}")]
    InvalidQuery {
        /// Which query (`entity_versions`, `event_ids`, `effects`).
        query: &'static str,
        /// What does not fit (column types, never values).
        reason: String,
    },
}

impl Error {
    /// The class of failure: whether trying again can help.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::InvalidConfig(_) | Self::Corrupt(_) | Self::InvalidQuery { .. } => FailureKind::Contract,
            Self::Database(e) => database_kind(e),
        }
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Database(e) => f.debug_tuple("Database").field(&RedactedSqlx(e)).finish(),
            Self::InvalidConfig(what) => f.debug_tuple("InvalidConfig").field(what).finish(),
            Self::Corrupt(what) => f.debug_tuple("Corrupt").field(what).finish(),
            Self::InvalidQuery { query, reason } => {
                f.debug_struct("InvalidQuery").field("query", query).field("reason", reason).finish()
            }
        }
    }
}

/// `Result` with the operator side's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
