//! [`InboxRequest`]: what a handler receives, the event and the consumer's open transaction.

use outbox_types::Event;
use sqlx::{PgConnection, Postgres, Transaction};

/// What a handler receives: the decoded event and the consumer's open transaction. The handler
/// writes its own tables through [`InboxRequest::conn`] and returns the request; the inbox then
/// records the event and commits both together.
///
/// ```
/// use outbox_inbox::{HandlerError, InboxRequest};
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
    /// The request for `event`, in the transaction `tx` the inbox opened for it.
    pub(super) fn new(event: Event, tx: Transaction<'static, Postgres>) -> Self {
        Self { event, tx }
    }

    /// The event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The consumer's transaction: the handler's writes commit with the inbox record, or not at all.
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    pub(super) fn into_parts(self) -> (Event, Transaction<'static, Postgres>) {
        (self.event, self.tx)
    }
}
