//! The orders service of the example: a producer.
//!
//! Every change of an order (placed, paid, shipped, ...) updates the `orders` table and enqueues an
//! `order.changed` event with the entity key `order-<id>` in the same transaction. The relay
//! publishes the events to RabbitMQ, partitioned by order.

use outbox_core::NewEvent;
use outbox_producer::Outbox;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

/// The event every change publishes (the wire payload, version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderChanged {
    /// The order.
    pub order_id: i64,
    /// The order's version after the change: 1, 2, 3... per order.
    pub version: i64,
    /// The new status.
    pub status: String,
    /// The order total in cents.
    pub total_cents: i64,
}

/// Statuses an order goes through, in a loop.
const STATUSES: [&str; 4] = ["placed", "paid", "packed", "shipped"];

/// Creates the `orders` table and the outbox tables.
///
/// # Errors
/// A database or migration error.
pub async fn migrate(pool: &PgPool) -> Result<(), outbox_producer::Error> {
    outbox_producer::migrate(pool).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (
             id bigint PRIMARY KEY, status text NOT NULL, total_cents bigint NOT NULL, version bigint NOT NULL)",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Changes order `id` (creating it on its first change) and enqueues its event, in one transaction.
/// Returns the event.
///
/// # Errors
/// A database error; nothing is written then.
pub async fn change_order(pool: &PgPool, outbox: &Outbox, id: i64) -> Result<OrderChanged, outbox_producer::Error> {
    let mut tx = pool.begin().await?;
    let (version, total): (i64, i64) = sqlx::query_as(
        "INSERT INTO orders (id, status, total_cents, version) VALUES ($1, 'placed', 1000 + $1 % 997, 1)
         ON CONFLICT (id) DO UPDATE SET version = orders.version + 1
         RETURNING version, total_cents",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    let status = STATUSES[usize::try_from(version - 1).unwrap_or(0) % STATUSES.len()];
    sqlx::query("UPDATE orders SET status = $2 WHERE id = $1").bind(id).bind(status).execute(&mut *tx).await?;
    let change = OrderChanged { order_id: id, version, status: status.to_owned(), total_cents: total };
    let event = NewEvent::json("order.changed", &change)?
        .entity(format!("order-{id}"))
        .correlation_id(format!("order-{id}-v{version}"));
    outbox.enqueue(&mut *tx, event).await?;
    tx.commit().await?;
    Ok(change)
}
