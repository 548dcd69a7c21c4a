//! The orders service of the example: a producer.
//!
//! Every change of an order (placed, paid, shipped, ...) updates the `orders` table and enqueues an
//! `order.changed` event with the entity key `order-<id>` in the same transaction. The relay
//! publishes the events to RabbitMQ, partitioned by order.

use outbox_producer::Outbox;
use outbox_types::NewEvent;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase;

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

/// The key of the advisory lock that serialises [`migrate`] across processes (ASCII "orders..").
const SETUP_LOCK: i64 = 0x6f72_6465_7273_2e2e;

/// Creates the database of `url` unless it exists. Safe when several processes start at once: a
/// database created meanwhile by another one is fine.
///
/// # Errors
/// The server cannot be reached or refuses to create the database.
pub async fn create_database_if_missing(url: &str) -> Result<(), sqlx::Error> {
    if sqlx::Postgres::database_exists(url).await? {
        return Ok(());
    }
    match sqlx::Postgres::create_database(url).await {
        // 42P04 duplicate_database; 23505 when the other CREATE DATABASE had not committed yet.
        Err(sqlx::Error::Database(e)) if matches!(e.code().as_deref(), Some("42P04" | "23505")) => Ok(()),
        other => other,
    }
}

/// Creates the `orders` table and the outbox tables.
///
/// Safe when several processes start at once on one database: the set-up runs while holding a
/// session advisory lock, so one process creates the tables and the others find them done.
///
/// # Errors
/// A database or migration error.
pub async fn migrate(pool: &PgPool) -> Result<(), outbox_producer::Error> {
    // A connection of its own, closed afterwards: the lock is released even if the set-up fails,
    // and a connection holding it never goes back to the pool.
    let mut lock = pool.acquire().await?.detach();
    sqlx::query("SELECT pg_advisory_lock($1)").bind(SETUP_LOCK).execute(&mut lock).await?;
    let result = migrate_locked(pool).await;
    let _ = sqlx::Connection::close(lock).await;
    result
}

async fn migrate_locked(pool: &PgPool) -> Result<(), outbox_producer::Error> {
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
