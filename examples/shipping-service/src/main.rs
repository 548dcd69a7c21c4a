//! The shipping service on its own: applies order events until Ctrl-C.
//!
//! Run: `cargo run -p shipping-service`
//!
//! Environment: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/outbox_example_shipping`,
//! created if missing), `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `RUST_LOG`.
//! Consumes the 4 partition queues `shipping.orders.<n>` bound to the exchange `orders.events`.

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
    let (runner, _) = shipping_service::start(&pool, &amqp, "orders.events", "shipping.orders", 4).await?;
    tokio::signal::ctrl_c().await?;
    runner.shutdown().await?;
    Ok(())
}
