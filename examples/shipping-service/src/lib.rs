//! The shipping service of the example: a consumer.
//!
//! It applies `order.changed` events through the inbox: each event inserts one row into
//! `shipments` in the inbox's transaction, so each change is applied exactly once and in order per
//! order, whatever RabbitMQ redelivers.

use std::time::Duration;

use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner, RunnerHandle, Topology};
use serde::Deserialize;
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase;
use tower::Layer;

pub mod endpoint;

/// Any error of the set-up.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The consumer name of this service in the inbox tables.
pub const CONSUMER: &str = "shipping";

/// The part of `order.changed` this service reads.
#[derive(Debug, Deserialize)]
struct OrderChanged {
    order_id: i64,
    version: i64,
    status: String,
}

/// The key of the advisory lock that serialises [`migrate`] across processes (ASCII "shipping").
const SETUP_LOCK: i64 = 0x7368_6970_7069_6e67;

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

/// Creates the `shipments` table and the inbox tables.
///
/// Safe when several processes start at once on one database: the set-up runs while holding a
/// session advisory lock, so one process creates the tables and the others find them done.
///
/// # Errors
/// A database or migration error.
pub async fn migrate(pool: &PgPool) -> Result<(), BoxError> {
    // A connection of its own, closed afterwards: the lock is released even if the set-up fails,
    // and a connection holding it never goes back to the pool.
    let mut lock = pool.acquire().await?.detach();
    sqlx::query("SELECT pg_advisory_lock($1)").bind(SETUP_LOCK).execute(&mut lock).await?;
    let result = migrate_locked(pool).await;
    let _ = sqlx::Connection::close(lock).await;
    result
}

async fn migrate_locked(pool: &PgPool) -> Result<(), BoxError> {
    outbox_inbox::migrate(pool).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS shipments (
             n bigserial PRIMARY KEY, order_id bigint NOT NULL, version bigint NOT NULL, status text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The handler: one shipment row per order change, in the inbox's transaction.
async fn apply(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let change: OrderChanged =
        req.event().payload.json().map_err(|_| HandlerError::permanent("order.changed payload does not match v1"))?;
    sqlx::query("INSERT INTO shipments (order_id, version, status) VALUES ($1, $2, $3)")
        .bind(change.order_id)
        .bind(change.version)
        .bind(&change.status)
        .execute(req.conn())
        .await?;
    Ok(req)
}

/// Declares the exchange and the partition queues `<queue_base>.<n>` bound to it (the topology the
/// orders service's relay declares too) and starts consuming them,
/// reading the inbox's backlog into its gauges every `gauge_interval` (`None`: never).
///
/// # Errors
/// A broker error while declaring the queues.
pub async fn start(
    pool: &PgPool,
    amqp_url: &str,
    exchange: &str,
    queue_base: &str,
    partitions: u32,
    gauge_interval: Option<Duration>,
) -> Result<(RunnerHandle, Topology), outbox_inbox::Error> {
    // Declared now, so the queues exist when this returns; the runner declares it again on every
    // connection, and so does the orders service's relay.
    let topology = Topology::partitioned(exchange, queue_base, partitions);
    let conn = outbox_amqp::connect(amqp_url, "shipping-service-setup", Duration::from_secs(5)).await?;
    let channel = conn.create_channel().await.map_err(outbox_amqp::Error::from)?;
    topology.declare(&channel).await?;
    outbox_amqp::close(&conn, &[&channel], "declared").await;
    let service = InboxLayer::new(pool.clone(), CONSUMER).layer(tower::service_fn(apply));
    let runner = InboxRunner::builder(amqp_url, service)
        .topology(&topology)
        .connection_name("shipping-service")
        .gauge_interval(gauge_interval)
        .build()?;
    Ok((runner.spawn(), topology))
}
