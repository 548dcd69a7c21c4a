//! An enqueue-relay-consume round trip built from the packaged crates: 20 orders written with
//! their events in one transaction each, the relay publishing them, the inbox applying each once.
//! Exits 0 when every order was shipped exactly once, 1 otherwise.
//!
//! Environment: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`), `AMQP_URL`
//! (default `amqp://guest:guest@127.0.0.1:5672/%2f`). It creates and drops the database
//! `outbox_roundtrip_<pid>` and the exchange and queues named after it.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner};
use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, Relay};
use outbox_types::{ExchangeKind, NewEvent};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};
use tower::Layer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ORDERS: i64 = 20;

async fn ship(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let order: serde_json::Value = req.event().payload.json().map_err(|_| HandlerError::permanent("not JSON"))?;
    sqlx::query("INSERT INTO shipments (order_id) VALUES ($1)")
        .bind(order["order_id"].as_i64())
        .execute(req.conn())
        .await?;
    Ok(req)
}

async fn place_orders(pool: &PgPool) -> Result<(), BoxError> {
    let outbox = Outbox::new();
    for id in 1..=ORDERS {
        let mut tx = pool.begin().await?;
        sqlx::query("INSERT INTO orders (id) VALUES ($1)").bind(id).execute(&mut *tx).await?;
        let event =
            NewEvent::json("order.placed", &serde_json::json!({ "order_id": id }))?.entity(format!("order-{id}"));
        outbox.enqueue(&mut *tx, event).await?;
        tx.commit().await?;
    }
    Ok(())
}

async fn round_trip(pool: &PgPool, amqp: &str, name: &str) -> Result<bool, BoxError> {
    outbox_producer::migrate(pool).await?;
    outbox_inbox::migrate(pool).await?;
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY)").execute(pool).await?;
    sqlx::query("CREATE TABLE shipments (order_id bigint NOT NULL)").execute(pool).await?;

    let conn = outbox_amqp::connect(amqp, "roundtrip-setup", Duration::from_secs(5)).await?;
    let channel = conn.create_channel().await?;
    outbox_amqp::declare_exchange(&channel, name, ExchangeKind::Topic).await?;
    let topology = outbox_amqp::declare_queue(&channel, name, name, &["#"]).await?;

    let service = InboxLayer::new(pool.clone(), "shipping").layer(tower::service_fn(ship));
    let consumer = InboxRunner::builder(amqp, service).topology(&topology).build()?.spawn();
    let publisher = AmqpPublisher::builder(amqp).build()?;
    let relay = Relay::builder(pool, publisher).exchange(name).build()?.spawn();
    place_orders(pool).await?;

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut shipped = 0;
    while shipped < ORDERS && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        shipped = sqlx::query_scalar("SELECT count(*) FROM shipments").fetch_one(pool).await?;
    }
    relay.shutdown().await?;
    consumer.shutdown().await?;
    let distinct: i64 = sqlx::query_scalar("SELECT count(DISTINCT order_id) FROM shipments").fetch_one(pool).await?;
    println!("orders {ORDERS}, shipped {shipped}, distinct {distinct}");
    for queue in [name.to_owned(), format!("{name}.dead")] {
        channel.queue_delete(queue.as_str().into(), Default::default()).await?;
    }
    channel.exchange_delete(name.into(), Default::default()).await?;
    outbox_amqp::close(&conn, &[&channel], "done").await;
    Ok(shipped == ORDERS && distinct == ORDERS)
}

async fn run() -> Result<bool, BoxError> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let amqp = std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let server = PgConnectOptions::from_str(&url).map_err(|_| "DATABASE_URL is not a valid PostgreSQL URL")?;
    let name = format!("outbox_roundtrip_{}", std::process::id());
    let mut admin = server.connect().await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut admin).await?;
    let pool = PgPoolOptions::new().max_connections(8).connect_with(server.clone().database(&name)).await?;
    let outcome = round_trip(&pool, &amqp, &name).await;
    pool.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE \"{name}\" WITH (FORCE)"))).execute(&mut admin).await?;
    outcome
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("roundtrip: not every order was shipped exactly once");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("roundtrip: {e}");
            ExitCode::FAILURE
        }
    }
}
