//! [`InboxLayer`]: wraps a handler in the inbox.

use std::sync::Arc;

use sqlx::PgPool;
use tower::Layer;

use super::service::InboxService;
use super::start_policy::StartPolicy;
use super::tenants::{Databases, Tenants};

/// Wraps a handler (`Service<InboxRequest, Response = InboxRequest>`) in the inbox.
///
/// ```no_run
/// use outbox_inbox::{HandlerError, InboxLayer, InboxRequest};
/// use tower::{Layer, ServiceBuilder};
///
/// # fn demo(pool: sqlx::PgPool) {
/// let handler = tower::service_fn(|req: InboxRequest| async move { Ok::<_, HandlerError>(req) });
/// let service = ServiceBuilder::new()
///     .timeout(std::time::Duration::from_secs(5)) // tower's own layers compose around it
///     .layer(InboxLayer::new(pool, "shipping"))
///     .service(handler);
/// # let _ = service;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct InboxLayer {
    databases: Databases,
    consumer: Arc<str>,
    start: StartPolicy,
    cipher: Option<outbox_types::PayloadCipher>,
    persistent: bool,
}

impl InboxLayer {
    /// An inbox in `pool` for the consumer named `consumer` (its rows are scoped by this name).
    pub fn new(pool: PgPool, consumer: impl Into<String>) -> Self {
        Self::in_databases(Databases::One(pool), consumer.into())
    }

    /// A multi-tenant inbox for the consumer named `consumer`: each event is applied in its
    /// tenant's database, where its dedup and sequence records are kept beside the handler's
    /// writes (see [`Tenants`]).
    pub fn for_tenants(tenants: Tenants, consumer: impl Into<String>) -> Self {
        Self::in_databases(Databases::Tenants(tenants), consumer.into())
    }

    fn in_databases(databases: Databases, consumer: String) -> Self {
        crate::metrics::describe();
        let consumer = Arc::from(consumer);
        Self { databases, consumer, start: StartPolicy::default(), cipher: None, persistent: true }
    }

    /// Sets where an entity's numbering starts for this consumer. Defaults to
    /// [`StartPolicy::FromFirst`].
    #[must_use]
    pub fn start_policy(mut self, policy: StartPolicy) -> Self {
        self.start = policy;
        self
    }

    /// Seals the payloads the inbox keeps (events parked ahead of a gap, events that failed) with
    /// `cipher`, and opens them when they are handled. A kept payload that does not open is a
    /// corrupt row: it stays where it is and the error says so. Defaults to none (kept in plain).
    #[must_use]
    pub fn cipher(mut self, cipher: outbox_types::PayloadCipher) -> Self {
        self.cipher = Some(cipher);
        self
    }

    /// Sets whether the inbox's statements are prepared once per connection under a name (sqlx's
    /// persistent statements) or sent unnamed, parsed on every use. Set `false` when `pool` goes
    /// through a pooler in transaction mode (PgBouncer, most managed poolers): it gives each
    /// transaction another server connection, where a named statement is unknown or already
    /// taken. Defaults to `true`: faster on a direct connection.
    #[must_use]
    pub fn persistent_statements(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }
}

impl<S> Layer<S> for InboxLayer {
    type Service = InboxService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        InboxService {
            inner,
            databases: self.databases.clone(),
            consumer: self.consumer.clone(),
            start: self.start,
            cipher: self.cipher.clone(),
            persistent: self.persistent,
        }
    }
}
