//! The business table `shipments` and the handler that writes it in the inbox's transaction.

use outbox_consumer::{HandlerError, InboxRequest};

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
pub(super) async fn apply_shipment(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
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
