//! The inbox: a tower middleware that applies each event's effect once and in per-entity order.

mod layer;
mod parked;
mod repair;
mod service;
pub(crate) mod store;

pub use layer::InboxLayer;
pub use service::InboxService;

use outbox_core::Event;
use sqlx::{PgConnection, Postgres, Transaction};

/// What a handler receives: the decoded event and the consumer's open transaction. The handler
/// writes its own tables through [`InboxRequest::conn`] and returns the request; the inbox then
/// records the event and commits both together.
///
/// ```
/// use outbox_consumer::{HandlerError, InboxRequest};
///
/// async fn apply(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
///     let order: serde_json::Value = req.event().payload.json().map_err(|_| HandlerError::permanent("not JSON"))?;
///     sqlx::query("INSERT INTO shipments (order_id) VALUES ($1)")
///         .bind(order["order_id"].as_i64())
///         .execute(req.conn())
///         .await?;
///     Ok(req)
/// }
/// let handler = tower::service_fn(apply);
/// # let _ = handler;
/// ```
#[derive(Debug)]
pub struct InboxRequest {
    event: Event,
    tx: Transaction<'static, Postgres>,
}

impl InboxRequest {
    /// The event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The consumer's transaction: the handler's writes commit with the inbox record, or not at all.
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    fn into_parts(self) -> (Event, Transaction<'static, Postgres>) {
        (self.event, self.tx)
    }
}

/// What the inbox did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler applied it; `successors` parked events of the same entity were applied after it.
    Applied {
        /// Parked successors applied right after.
        successors: usize,
    },
    /// The consumer had already seen this event id: not handed to the handler.
    Duplicate,
    /// Its sequence is not above the entity's last applied one: not handed to the handler.
    Stale,
    /// It arrived ahead of a missing predecessor: stored until the gap fills.
    Parked,
}

impl Outcome {
    /// A label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Applied { .. } => "applied",
            Self::Duplicate => "duplicate",
            Self::Stale => "stale",
            Self::Parked => "parked",
        }
    }
}

/// Where an entity's numbering starts for this consumer when it first sees the entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StartPolicy {
    /// Expect sequence 1: a consumer that joins late parks every event of an entity whose first
    /// events it never saw, until an operator skips the gap. Safe and strict. The default.
    #[default]
    FromFirst,
    /// Accept whatever sequence arrives first for an entity the consumer has never seen, and be
    /// strict from there on. For consumers that join a running system (for example a new read
    /// model fed only with new events). Out-of-order first deliveries can then drop an earlier event
    /// as stale.
    FromFirstSeen,
}
