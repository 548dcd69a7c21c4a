use outbox_core::{EventError, FailureKind};

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
    /// The database refused or failed a statement.
    #[error("database error: {}", DbMessage(.0))]
    Database(#[from] sqlx::Error),
    /// Applying the product's migrations failed.
    #[error("migration error: {}", MigrateMessage(.0))]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A retention setting is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
}

impl Error {
    /// The class of failure: whether trying again can help.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::InvalidEvent(_) | Self::InvalidBatchEvent { .. } | Self::InvalidConfig(_) => FailureKind::Contract,
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
            Self::Database(e) => f.debug_tuple("Database").field(&RedactedSqlx(e)).finish(),
            Self::Migrate(e) => f.debug_tuple("Migrate").field(&format_args!("{e}")).finish(),
            Self::InvalidConfig(what) => f.debug_tuple("InvalidConfig").field(what).finish(),
        }
    }
}

/// A sqlx error for people: a server error's message and SQLSTATE, without the source position
/// sqlx appends (`at line 1392` of PostgreSQL's C file) and without its detail; other errors as
/// sqlx words them (connection refused, pool timed out, ...).
pub struct DbMessage<'a>(pub &'a sqlx::Error);

impl std::fmt::Display for DbMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_database_error() {
            Some(db) => match db.code() {
                Some(code) => write!(f, "{} (SQLSTATE {code})", db.message()),
                None => f.write_str(db.message()),
            },
            None => write!(f, "{}", self.0),
        }
    }
}

/// A migration error for people: a failed statement as [`DbMessage`] shows it.
struct MigrateMessage<'a>(&'a sqlx::migrate::MigrateError);

impl std::fmt::Display for MigrateMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            sqlx::migrate::MigrateError::Execute(e) => write!(f, "{}", DbMessage(e)),
            sqlx::migrate::MigrateError::ExecuteMigration(e, version) => {
                write!(f, "migration {version} failed: {}", DbMessage(e))
            }
            other => write!(f, "{other}"),
        }
    }
}

/// `Debug` of a sqlx error without the server's detail and hint (which can quote a row).
pub struct RedactedSqlx<'a>(pub &'a sqlx::Error);

impl std::fmt::Debug for RedactedSqlx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_database_error() {
            Some(db) => f
                .debug_struct("DatabaseError")
                .field("code", &db.code())
                .field("message", &db.message())
                .field("constraint", &db.constraint())
                .finish_non_exhaustive(),
            None => write!(f, "{}", self.0),
        }
    }
}

/// Classifies a database error: authentication and permission problems are operational (`auth`);
/// everything else on a connection is passing (`transient`).
pub fn database_kind(e: &sqlx::Error) -> FailureKind {
    if let Some(db) = e.as_database_error() {
        // 28xxx: invalid authorization; 42501: insufficient privilege.
        if let Some(code) = db.code()
            && (code.starts_with("28") || code == "42501")
        {
            return FailureKind::Auth;
        }
    }
    FailureKind::Transient
}

/// `Result` with the producer's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
