//! The business tables and the handlers that write them in the inbox's transaction: `shipments`,
//! one row per order moved to each event's version, and `shipment_log`, one row inserted per event.

use outbox_inbox::{HandlerError, InboxRequest};

/// The business table the handler writes.
pub(crate) const CREATE_SHIPMENTS: &str = "\
CREATE TABLE shipments (
    order_key   text PRIMARY KEY,
    order_id    bigint NOT NULL,
    version     bigint NOT NULL,
    applied     bigint NOT NULL,
    status      text NOT NULL,
    total_cents bigint NOT NULL,
    updated_at  timestamptz NOT NULL
)";
/// The insert-only business table: one row per event, none ever updated.
pub(crate) const CREATE_SHIPMENT_LOG: &str = "\
CREATE TABLE shipment_log (
    order_key  text NOT NULL,
    version    bigint NOT NULL,
    logged_at  timestamptz NOT NULL,
    PRIMARY KEY (order_key, version)
)";
/// The insert-only handler's write.
const LOG_SHIPMENT: &str = "INSERT INTO shipment_log (order_key, version, logged_at) VALUES ($1, $2, now())";

/// Which business write the consumer process's handler makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Handler {
    /// Moves the order's `shipments` row to the event's version: one row updated per event.
    #[default]
    Shipments,
    /// Inserts a `shipment_log` row per event: no business row is ever updated, so what the inbox
    /// itself costs is measured alone.
    Log,
}

impl Handler {
    /// The argument of `consumer-process --handler`.
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Self::Shipments => "shipments",
            Self::Log => "log",
        }
    }

    /// The table the handler writes.
    pub(crate) fn schema(self) -> &'static str {
        match self {
            Self::Shipments => CREATE_SHIPMENTS,
            Self::Log => CREATE_SHIPMENT_LOG,
        }
    }
}

/// Applies the event with `handler`'s write.
pub(super) async fn handle(handler: Handler, req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    match handler {
        Handler::Shipments => apply_shipment(req).await,
        Handler::Log => log_shipment(req).await,
    }
}

/// The insert-only write: a `shipment_log` row for the event, in the inbox's transaction.
async fn log_shipment(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let event = req.event();
    let entity = event.entity.as_ref().ok_or_else(|| HandlerError::permanent("event without entity"))?;
    let key = entity.key.clone();
    let version = i64::try_from(entity.seq).map_err(|_| HandlerError::permanent("sequence out of range"))?;
    sqlx::query(LOG_SHIPMENT).bind(&key).bind(version).execute(req.conn()).await?;
    Ok(req)
}

/// The handler's write: the entity's row at the event's version, only if it follows the stored one.
const UPSERT_SHIPMENT: &str = "\
INSERT INTO shipments (order_key, order_id, version, applied, status, total_cents, updated_at)
VALUES ($1, $2, $3, 1, $4, $5, now())
ON CONFLICT (order_key) DO UPDATE
SET version = EXCLUDED.version, applied = shipments.applied + 1, status = EXCLUDED.status,
    total_cents = EXCLUDED.total_cents, updated_at = now()
WHERE shipments.version = EXCLUDED.version - 1";

/// The business write: the order's shipment row at the event's version, in the inbox's
/// transaction. An event that does not follow the stored version fails permanently (and is
/// dead-lettered, which fails the benchmark).
async fn apply_shipment(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let event = req.event();
    let entity = event.entity.as_ref().ok_or_else(|| HandlerError::permanent("event without entity"))?;
    let key = entity.key.clone();
    let version = i64::try_from(entity.seq).map_err(|_| HandlerError::permanent("sequence out of range"))?;
    let order: serde_json::Value =
        event.payload.json().map_err(|_| HandlerError::permanent("payload is not a JSON order"))?;
    let field = |name: &str| order.get(name).cloned().ok_or_else(|| HandlerError::permanent(format!("no {name}")));
    let order_id = field("order_id")?.as_i64().ok_or_else(|| HandlerError::permanent("order_id is not a number"))?;
    let total = field("total_cents")?.as_i64().ok_or_else(|| HandlerError::permanent("total_cents is not a number"))?;
    let status = field("status")?.as_str().map(str::to_owned).ok_or_else(|| HandlerError::permanent("bad status"))?;
    let done = sqlx::query(UPSERT_SHIPMENT)
        .bind(&key)
        .bind(order_id)
        .bind(version)
        .bind(status)
        .bind(total)
        .execute(req.conn())
        .await?;
    if done.rows_affected() != 1 {
        return Err(HandlerError::permanent(format!("{key}: version {version} does not follow the stored one")));
    }
    Ok(req)
}
