//! The shipping service on its own: applies order events until Ctrl-C.
//!
//! Run: `cargo run -p shipping-service`
//!
//! Environment: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/outbox_example_shipping`,
//! created if missing), `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `EXCHANGE`
//! (default `orders.events`), `QUEUE_BASE` (default `shipping.orders`), `PARTITIONS` (default 4),
//! `RUST_LOG`. Consumes the partition queues `<QUEUE_BASE>.<n>` bound to the exchange; run several
//! processes and each queue has one active consumer, the others standing by. Stops on SIGTERM or
//! Ctrl-C after finishing the deliveries in hand.

use sqlx::migrate::MigrateDatabase;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt().with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into())).init();
    let db = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/outbox_example_shipping".into());
    let amqp = std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    if !sqlx::Postgres::database_exists(&db).await? {
        sqlx::Postgres::create_database(&db).await?;
    }
    let pool = sqlx::PgPool::connect(&db).await?;
    shipping_service::migrate(&pool).await?;
    let exchange = std::env::var("EXCHANGE").unwrap_or_else(|_| "orders.events".into());
    let queue_base = std::env::var("QUEUE_BASE").unwrap_or_else(|_| "shipping.orders".into());
    let partitions: u32 = std::env::var("PARTITIONS").ok().map(|p| p.parse()).transpose()?.unwrap_or(4);
    let (runner, _) = shipping_service::start(&pool, &amqp, &exchange, &queue_base, partitions).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    runner.shutdown().await?;
    Ok(())
}
