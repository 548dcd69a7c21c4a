use outbox_types::FailureKind;
use outbox_types::db_error::{DbMessage, RedactedSqlx};

/// Whether a handler failure can pass by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandlerErrorKind {
    /// Retrying later may succeed (a lock timeout, a downstream service that is down): the
    /// transaction rolls back and the delivery comes back after a backoff.
    Transient,
    /// Retrying cannot succeed (the event is invalid for this consumer): the delivery is
    /// dead-lettered with the reason, and the entity's later events park behind it until an
    /// operator retries or skips it.
    Permanent,
}

/// The error a handler returns. Its message is shown to operators and stored with the event:
/// keep payload contents out of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?} handler failure: {message}")]
pub struct HandlerError {
    kind: HandlerErrorKind,
    message: String,
}

impl HandlerError {
    /// A failure that may pass: roll back and redeliver after a backoff.
    pub fn transient(message: impl Into<String>) -> Self {
        Self { kind: HandlerErrorKind::Transient, message: message.into() }
    }

    /// A failure that cannot pass: dead-letter the delivery.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self { kind: HandlerErrorKind::Permanent, message: message.into() }
    }

    /// The kind.
    pub fn kind(&self) -> HandlerErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<sqlx::Error> for HandlerError {
    fn from(e: sqlx::Error) -> Self {
        // The handler's own statement failed; the database may well accept it later.
        Self::transient(format!("database error: {e}"))
    }
}

/// Errors of the consumer side. Messages carry ids and reasons, never payloads or credentials; a
/// database error shows the server's message and SQLSTATE, never PostgreSQL's detail (which can
/// quote a parked payload), in `Display` and in `Debug`.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The handler failed.
    #[error("handler failed: {0}")]
    Handler(HandlerError),
    /// The handler panicked; treated as a transient failure.
    #[error("handler panicked")]
    Panicked,
    /// The inbox's own SQL failed.
    #[error("inbox database error: {}", DbMessage(.0))]
    Database(#[from] sqlx::Error),
    /// A service layer in front of the handler failed (for example a tower timeout).
    #[error("handler layer failed: {0}")]
    Layer(tower::BoxError),
    /// The broker failed or refused; the runner reconnects.
    #[error("broker error: {0}")]
    Broker(#[from] outbox_amqp::Error),
    /// A setting is missing or out of range.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
    /// The runner stopped at an armed crash point (failure tests only).
    #[error("the runner stopped at a crash point")]
    Crashed,
    /// The runner task panicked or was aborted.
    #[error("the runner task stopped abnormally")]
    Stopped,
    /// A stored (parked) event does not hold what the schema promises.
    #[error("corrupt inbox row {0}: {1}")]
    CorruptRow(uuid::Uuid, &'static str),
    /// [`InboxService::call_batch`](crate::InboxService::call_batch) was given two events with
    /// one id or one entity; nothing was written.
    #[error("a batch must not hold two events with one {0}")]
    InvalidBatch(&'static str),
    /// A multi-tenant inbox could not tell the event's tenant, or the tenant is not listed
    /// ([`Tenants`](crate::Tenants)); permanent: the runner dead-letters the delivery with the
    /// reason `unknown_tenant`.
    #[error("unknown tenant: {0}")]
    UnknownTenant(String),
    /// The inbox's migrations failed in a tenant's database ([`Tenants::migrate`](crate::Tenants::migrate)).
    #[error("the inbox's migrations failed in tenant `{0}`'s database: {1}")]
    TenantMigration(String, String),
    /// A repair of a multi-tenant inbox was asked without its tenant: take the tenant's inbox
    /// with [`InboxService::tenant`](crate::InboxService::tenant) first.
    #[error("a multi-tenant inbox repairs one tenant at a time: choose it with InboxService::tenant")]
    TenantNotChosen,
}

impl Error {
    /// How this failure is treated: `Contract` (permanent) or `Transient`.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::Handler(h) => match h.kind() {
                HandlerErrorKind::Permanent => FailureKind::Contract,
                HandlerErrorKind::Transient => FailureKind::Transient,
            },
            Self::CorruptRow(..)
            | Self::InvalidBatch(_)
            | Self::Config(_)
            | Self::UnknownTenant(_)
            | Self::TenantNotChosen => FailureKind::Contract,
            Self::Broker(e) => e.kind(),
            Self::Panicked
            | Self::Database(_)
            | Self::Layer(_)
            | Self::Crashed
            | Self::Stopped
            | Self::TenantMigration(..) => FailureKind::Transient,
        }
    }

    /// Whether redelivering the same event may succeed.
    pub fn is_retryable(&self) -> bool {
        !self.kind().is_permanent()
    }
}

/// `Result` with the consumer's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Handler(e) => f.debug_tuple("Handler").field(e).finish(),
            Self::Panicked => f.write_str("Panicked"),
            Self::Database(e) => f.debug_tuple("Database").field(&RedactedSqlx(e)).finish(),
            Self::Layer(e) => f.debug_tuple("Layer").field(&format_args!("{e}")).finish(),
            Self::Broker(e) => f.debug_tuple("Broker").field(e).finish(),
            Self::Config(what) => f.debug_tuple("Config").field(what).finish(),
            Self::CorruptRow(id, what) => f.debug_tuple("CorruptRow").field(id).field(what).finish(),
            Self::InvalidBatch(what) => f.debug_tuple("InvalidBatch").field(what).finish(),
            Self::UnknownTenant(why) => f.debug_tuple("UnknownTenant").field(why).finish(),
            Self::TenantMigration(tenant, why) => f.debug_tuple("TenantMigration").field(tenant).field(why).finish(),
            Self::TenantNotChosen => f.write_str("TenantNotChosen"),
            Self::Crashed => f.write_str("Crashed"),
            Self::Stopped => f.write_str("Stopped"),
        }
    }
}
