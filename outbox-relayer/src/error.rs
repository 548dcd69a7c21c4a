use outbox_types::FailureKind;
use outbox_types::db_error::{DbMessage, RedactedSqlx, database_kind};

/// Errors of the relay.
///
/// Messages carry ids, field names and reasons, never payloads or credentials; a database error
/// shows the server's message and SQLSTATE, never PostgreSQL's detail (which can quote a row).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database refused or failed a statement.
    #[error("database error: {}", DbMessage(.0))]
    Database(#[from] sqlx::Error),
    /// The broker's side: a malformed URL, or the broker's refusal of a declaration.
    #[error("broker: {0}")]
    Broker(#[from] outbox_amqp::Error),
    /// A relay setting is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// A list of a fleet's databases that does not read (the line and why, never a URL).
    #[error("invalid list of databases: {0}")]
    InvalidList(String),
    /// A row read from the outbox does not hold what the schema promises.
    #[error("corrupt outbox row {id}: {what}")]
    CorruptRow {
        /// The event id of the row.
        id: uuid::Uuid,
        /// What is wrong.
        what: &'static str,
    },
    /// The operator side failed (a replay job's record).
    #[error("{0}")]
    Ops(#[from] outbox_ops::Error),
    /// No replay job has this id.
    #[error("no replay job {0}")]
    NoSuchJob(uuid::Uuid),
    /// Another process is running this replay job (it holds the job's lock).
    #[error("replay job {0} is being run by another process")]
    JobBusy(uuid::Uuid),
    /// The relay stopped at an armed crash point (failure tests only).
    #[error("the relay stopped at a crash point")]
    Crashed,
    /// The relay task panicked or was aborted.
    #[error("the relay task stopped abnormally")]
    Stopped,
}

impl Error {
    /// The class of failure: whether trying again can help.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::CorruptRow { .. } | Self::InvalidConfig(_) | Self::InvalidList(_) => FailureKind::Contract,
            Self::Crashed | Self::Stopped => FailureKind::Transient,
            Self::Database(e) => database_kind(e),
            Self::Broker(e) => e.kind(),
            Self::Ops(e) => e.kind(),
            Self::NoSuchJob(_) => FailureKind::Contract,
            Self::JobBusy(_) => FailureKind::Transient,
        }
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Database(e) => f.debug_tuple("Database").field(&RedactedSqlx(e)).finish(),
            Self::Broker(e) => f.debug_tuple("Broker").field(e).finish(),
            Self::InvalidConfig(what) => f.debug_tuple("InvalidConfig").field(what).finish(),
            Self::InvalidList(why) => f.debug_tuple("InvalidList").field(why).finish(),
            Self::CorruptRow { id, what } => f.debug_struct("CorruptRow").field("id", id).field("what", what).finish(),
            Self::Ops(e) => f.debug_tuple("Ops").field(e).finish(),
            Self::NoSuchJob(id) => f.debug_tuple("NoSuchJob").field(id).finish(),
            Self::JobBusy(id) => f.debug_tuple("JobBusy").field(id).finish(),
            Self::Crashed => f.write_str("Crashed"),
            Self::Stopped => f.write_str("Stopped"),
        }
    }
}

/// `Result` with the relay's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
