//! The whole product end to end, in one command: an orders service writes changes with their
//! events, the relay publishes them to RabbitMQ over 4 partitions, a shipping service applies them
//! through its inbox; then both sides are reconciled.
//!
//! Run: `cargo run -p demo -- [changes] [orders]` (defaults: 3000 changes over 300 orders)
//!
//! Environment: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`: the server
//! on which the demo (re)creates its two databases `outbox_demo_orders` and `outbox_demo_shipping`),
//! `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`; the demo (re)creates the exchange
//! `outbox_demo.orders` and the queues `outbox_demo.shipping.<n>`), `RUST_LOG` (default `warn`).
//!
//! Exits with status 1 if the reconciliation finds anything off: a change without its event, an
//! event not published, an event not applied or applied twice, or an order applied out of order.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

use outbox_producer::{AmqpPublisher, Outbox, Partitioned, Relay};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgPool};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const EXCHANGE: &str = "outbox_demo.orders";
const QUEUES: &str = "outbox_demo.shipping";
const PARTITIONS: u32 = 4;
const WRITERS: usize = 4;

async fn fresh_database(server: &PgConnectOptions, name: &str) -> Result<PgPool, BoxError> {
    let mut admin = server.connect().await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
        .execute(&mut admin)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut admin).await?;
    Ok(sqlx::postgres::PgPoolOptions::new().max_connections(12).connect_with(server.clone().database(name)).await?)
}

/// Deletes what an earlier run left on the broker, so that this run starts empty.
async fn fresh_broker(amqp: &str) -> Result<(), BoxError> {
    let conn = lapin::Connection::connect(amqp, lapin::ConnectionProperties::default()).await?;
    for n in 0..PARTITIONS {
        let ch = conn.create_channel().await?;
        let _ = ch.queue_delete(format!("{QUEUES}.{n}").as_str().into(), Default::default()).await;
    }
    for q in [format!("{QUEUES}.dead")] {
        let ch = conn.create_channel().await?;
        let _ = ch.queue_delete(q.as_str().into(), Default::default()).await;
    }
    let _ = conn.close(200, "reset".into()).await;
    Ok(())
}

async fn scalar(pool: &PgPool, sql: &'static str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql).fetch_one(pool).await
}

#[tokio::main]
async fn main() -> Result<ExitCode, BoxError> {
    tracing_subscriber::fmt().with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())).init();
    let mut args = std::env::args().skip(1);
    let changes: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3000);
    let orders: i64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    let server = PgConnectOptions::from_str(
        &std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
    )?;
    let amqp = std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());

    println!("setting up: databases outbox_demo_orders and outbox_demo_shipping, exchange {EXCHANGE}");
    let orders_db = fresh_database(&server, "outbox_demo_orders").await?;
    let shipping_db = fresh_database(&server, "outbox_demo_shipping").await?;
    orders_service::migrate(&orders_db).await?;
    shipping_service::migrate(&shipping_db).await?;
    fresh_broker(&amqp).await?;

    let (consumer, _) = shipping_service::start(&shipping_db, &amqp, EXCHANGE, QUEUES, PARTITIONS).await?;
    let relay = Relay::builder(orders_db.clone(), AmqpPublisher::builder(&amqp).connection_name("demo-relay").build())
        .exchange(EXCHANGE)
        .routing(Partitioned::new(PARTITIONS))
        .app_id("orders-service")
        .build()?
        .spawn();

    println!("writing {changes} changes over {orders} orders with {WRITERS} writers");
    let started = Instant::now();
    let outbox = Outbox::new();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (pool, outbox) = (orders_db.clone(), outbox.clone());
            let share = changes / WRITERS + usize::from(w < changes % WRITERS);
            tokio::spawn(async move {
                for i in 0..share {
                    // Spread the writers over the orders; every order gets several changes.
                    let id = ((i * WRITERS + w) as i64 * 7919) % orders + 1;
                    orders_service::change_order(&pool, &outbox, id).await?;
                }
                Ok::<(), outbox_producer::Error>(())
            })
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let written = scalar(&orders_db, "SELECT count(*) FROM outbox_events").await?;
        let published = scalar(&orders_db, "SELECT count(*) FROM outbox_events WHERE status = 'published'").await?;
        let applied = scalar(&shipping_db, "SELECT count(*) FROM shipments").await?;
        println!(
            "  {:>5.1}s  written {written:>6}  published {published:>6}  applied {applied:>6}",
            started.elapsed().as_secs_f64()
        );
        if applied as usize >= changes || Instant::now() > deadline {
            break;
        }
    }
    for w in writers {
        w.await??;
    }
    let stats = consumer.stats();
    relay.shutdown().await?;
    consumer.shutdown().await?;

    // Reconciliation.
    let changes_made = scalar(&orders_db, "SELECT coalesce(sum(version), 0)::bigint FROM orders").await?;
    let events = scalar(&orders_db, "SELECT count(*) FROM outbox_events").await?;
    let published = scalar(&orders_db, "SELECT count(*) FROM outbox_events WHERE status = 'published'").await?;
    let quarantined = scalar(&orders_db, "SELECT count(*) FROM outbox_events WHERE status = 'quarantined'").await?;
    let applied = scalar(&shipping_db, "SELECT count(*) FROM shipments").await?;
    let applied_twice = scalar(
        &shipping_db,
        "SELECT count(*) FROM (SELECT 1 FROM shipments GROUP BY order_id, version HAVING count(*) > 1) d",
    )
    .await?;
    let out_of_order = scalar(
        &shipping_db,
        "SELECT count(*) FROM (SELECT version, lag(version) OVER (PARTITION BY order_id ORDER BY n) AS prev FROM shipments) s
         WHERE version <> coalesce(prev, 0) + 1",
    )
    .await?;
    let versions: Vec<(i64, i64)> =
        sqlx::query_as("SELECT id, version FROM orders ORDER BY id").fetch_all(&orders_db).await?;
    let shipped: Vec<(i64, i64)> =
        sqlx::query_as("SELECT order_id, max(version) FROM shipments GROUP BY order_id ORDER BY order_id")
            .fetch_all(&shipping_db)
            .await?;
    let orders_differing = versions.iter().filter(|v| !shipped.contains(v)).count();

    println!();
    println!("reconciliation after {:.1}s", started.elapsed().as_secs_f64());
    println!("  changes written                {changes_made:>7}");
    println!("  events in the outbox           {events:>7}");
    println!("  events published (confirmed)   {published:>7}");
    println!("  events quarantined             {quarantined:>7}");
    println!("  effects applied by shipping    {applied:>7}");
    println!("  duplicates dropped by inbox    {:>7}", stats.duplicates);
    println!("  effects applied twice          {applied_twice:>7}");
    println!("  order violations               {out_of_order:>7}");
    println!("  orders whose state differs     {orders_differing:>7}");
    let clean = changes_made == changes as i64
        && events == changes_made
        && published == events
        && applied == published
        && applied_twice == 0
        && out_of_order == 0
        && orders_differing == 0;
    if clean {
        println!("clean: every change has its event, every event was published and applied once, in order");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("NOT CLEAN: see the figures above");
        Ok(ExitCode::FAILURE)
    }
}
