//! The orders service on its own: writes order changes and relays their events until Ctrl-C.
//!
//! Run: `cargo run -p orders-service -- [changes] [orders]` (defaults 1000 changes over 100 orders)
//!
//! Environment: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/outbox_example`, created
//! if missing), `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `RUST_LOG`.
//! Events go to the topic exchange `orders.events`, routing key `partition.<n>` over 4 partitions.

use std::time::Duration;

use outbox_producer::{AmqpPublisher, Outbox, Partitioned, Relay};
use rand::Rng;
use sqlx::migrate::MigrateDatabase;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt().with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into())).init();
    let mut args = std::env::args().skip(1);
    let changes: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let orders: i64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let db =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/outbox_example".into());
    let amqp = std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    if !sqlx::Postgres::database_exists(&db).await? {
        sqlx::Postgres::create_database(&db).await?;
    }
    let pool = sqlx::PgPool::connect(&db).await?;
    orders_service::migrate(&pool).await?;
    let relay = Relay::builder(pool.clone(), AmqpPublisher::builder(amqp).build())
        .exchange("orders.events")
        .routing(Partitioned::new(4))
        .app_id("orders-service")
        .build()?
        .spawn();
    let outbox = Outbox::new();
    for _ in 0..changes {
        let id = rand::rng().random_range(1..=orders);
        orders_service::change_order(&pool, &outbox, id).await?;
    }
    tracing::info!(changes, "changes written; relaying until Ctrl-C");
    tokio::signal::ctrl_c().await?;
    relay.shutdown().await?;
    tokio::time::sleep(Duration::ZERO).await;
    Ok(())
}
