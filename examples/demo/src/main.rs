//! The whole product end to end, in one command: an orders service writes changes with their
//! events, the relay publishes them to RabbitMQ over 4 partitions, a shipping service applies them
//! through its inbox; then both sides are reconciled.
//!
//! Run: `cargo run -p demo -- [changes] [orders]` (defaults: 3000 changes over 300 orders)
//!
//! Environment (all optional):
//!
//! - `DATABASE_URL`: default `postgres://postgres@127.0.0.1:5432/postgres`, the server on which
//!   the demo (re)creates its two databases `<DEMO_NAME>_orders` and `<DEMO_NAME>_shipping`.
//! - `AMQP_URL`: default `amqp://guest:guest@127.0.0.1:5672/%2f`; the demo declares the exchange
//!   `<DEMO_NAME>.orders` and (re)creates the queues `<DEMO_NAME>.shipping.<n>` and
//!   `<DEMO_NAME>.shipping.dead`.
//! - `DEMO_NAME`: default `outbox_demo` (lowercase letters, digits and `_`), the prefix of the
//!   names above; give each demo running at once on one server a name of its own.
//! - `RUST_LOG`: default `warn`. A clean run logs nothing.
//!   Whatever it says, `outbox_types::REDACTING_LOG_TARGETS` filters after it, so lapin never
//!   logs message content (its returned messages off, lapin itself at most at `info`).
//!
//! Exits with status 1 if the reconciliation finds anything off: a change without its event, an
//! event not published, an event not applied or applied twice, or an order applied out of order.
//! On SIGTERM or Ctrl-C it stops the writers, the relay and the consumer gracefully and exits with
//! status 1 without reconciling.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, Relay, RelayHandle, Topology};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgPool};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::log::LevelFilter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const PARTITIONS: u32 = 4;
const WRITERS: usize = 4;

/// The settings read from the arguments and the environment.
struct Settings {
    changes: usize,
    orders: i64,
    server: PgConnectOptions,
    amqp_url: String,
    name: String,
}

/// A numeric argument, `default` if absent; the error names the argument.
fn arg_number<T: FromStr>(arg: Option<String>, what: &str, default: T) -> Result<T, BoxError> {
    match arg {
        Some(v) => v.parse().map_err(|_| format!("{what} must be a number, got {v:?}").into()),
        None => Ok(default),
    }
}

impl Settings {
    fn from_env() -> Result<Self, BoxError> {
        let mut args = std::env::args().skip(1);
        let changes = arg_number(args.next(), "changes", 3000)?;
        let orders: i64 = arg_number(args.next(), "orders", 300)?;
        if orders < 1 {
            return Err("orders must be at least 1".into());
        }
        let url =
            std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        // The error of a malformed URL is not shown: it could quote a password.
        let server = PgConnectOptions::from_str(&url).map_err(|_| "DATABASE_URL is not a valid PostgreSQL URL")?;
        let name = std::env::var("DEMO_NAME").unwrap_or_else(|_| "outbox_demo".into());
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
            return Err("DEMO_NAME must be lowercase letters, digits and _".into());
        }
        Ok(Self {
            changes,
            orders,
            server,
            amqp_url: std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into()),
            name,
        })
    }

    fn exchange(&self) -> String {
        format!("{}.orders", self.name)
    }

    fn queues(&self) -> String {
        format!("{}.shipping", self.name)
    }
}

/// Logs at `RUST_LOG` (default `warn`), never letting lapin log message content.
fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let redact: Targets = outbox_types::REDACTING_LOG_TARGETS.parse().expect("constant targets");
    tracing_subscriber::registry().with(filter).with(tracing_subscriber::fmt::layer().with_filter(redact)).init();
}

/// A receiver that turns `true` on SIGTERM or Ctrl-C (SIGINT). Both are caught from this call on.
fn stop_on_signal() -> std::io::Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// Drops and creates the database `name`, and opens a pool on it.
async fn fresh_database(server: &PgConnectOptions, name: &str) -> Result<PgPool, BoxError> {
    // DROP DATABASE waits for a checkpoint: seconds on a busy disk, and no sign of trouble. sqlx
    // would log it as a slow statement at WARN; at INFO it stays visible with RUST_LOG=info.
    let admin_options = server.clone().log_slow_statements(LevelFilter::Info, Duration::from_secs(1));
    let mut admin = admin_options.connect().await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
        .execute(&mut admin)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut admin).await?;
    Ok(sqlx::postgres::PgPoolOptions::new().max_connections(12).connect_with(server.clone().database(name)).await?)
}

/// Deletes the queues an earlier run left on the broker, so that this run starts empty.
async fn fresh_broker(amqp: &str, queues: &str) -> Result<(), BoxError> {
    let conn = outbox_amqp::connect(amqp, "demo-reset", std::time::Duration::from_secs(5)).await?;
    let channel = conn.create_channel().await?;
    let names = (0..PARTITIONS).map(|n| n.to_string()).chain(["dead".to_owned()]);
    for name in names.map(|n| format!("{queues}.{n}")) {
        // Deleting a queue that does not exist succeeds.
        channel.queue_delete(name.as_str().into(), outbox_amqp::lapin::options::QueueDeleteOptions::default()).await?;
    }
    outbox_amqp::close(&conn, &[&channel], "reset").await;
    Ok(())
}

async fn scalar(pool: &PgPool, sql: &'static str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql).fetch_one(pool).await
}

/// Starts `WRITERS` tasks that write `changes` changes over `orders` orders between them, each
/// change in a transaction of its own; on `stop` they finish the change in progress and end.
fn spawn_writers(
    pool: &PgPool,
    changes: usize,
    orders: i64,
    stop: &watch::Receiver<bool>,
) -> Vec<JoinHandle<Result<(), outbox_producer::Error>>> {
    let outbox = Outbox::new();
    (0..WRITERS)
        .map(|w| {
            let (pool, outbox, stop) = (pool.clone(), outbox.clone(), stop.clone());
            let share = changes / WRITERS + usize::from(w < changes % WRITERS);
            tokio::spawn(async move {
                for i in 0..share {
                    if *stop.borrow() {
                        break;
                    }
                    // Spread the writers over the orders; every order gets several changes.
                    let id = ((i * WRITERS + w) as i64 * 7919) % orders + 1;
                    orders_service::change_order(&pool, &outbox, id).await?;
                }
                Ok(())
            })
        })
        .collect()
}

/// Prints progress every half second until every change is applied or five minutes passed;
/// returns `false` if `stop` came first.
async fn watch_progress(
    orders_db: &PgPool,
    shipping_db: &PgPool,
    changes: usize,
    started: Instant,
    stop: &mut watch::Receiver<bool>,
) -> Result<bool, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.wait_for(|s| *s) => return Ok(false),
        }
        let outbox = outbox_ops::admin::stats(orders_db).await?;
        let (written, published) = (outbox.total(), outbox.published);
        let applied = scalar(shipping_db, "SELECT count(*) FROM shipments").await?;
        println!(
            "  {:>5.1}s  written {written:>6}  published {published:>6}  applied {applied:>6}",
            started.elapsed().as_secs_f64()
        );
        if applied as usize >= changes || Instant::now() > deadline {
            return Ok(true);
        }
    }
}

/// Reconciles both databases, prints the figures, and tells whether everything is clean.
async fn reconcile(
    orders_db: &PgPool,
    shipping_db: &PgPool,
    changes: usize,
    duplicates: u64,
    started: Instant,
) -> Result<bool, BoxError> {
    let changes_made = scalar(orders_db, "SELECT coalesce(sum(version), 0)::bigint FROM orders").await?;
    let outbox = outbox_ops::admin::stats(orders_db).await?;
    let (events, published, quarantined) = (outbox.total(), outbox.published, outbox.quarantined);
    let applied = scalar(shipping_db, "SELECT count(*) FROM shipments").await?;
    let applied_twice = scalar(
        shipping_db,
        "SELECT count(*) FROM (SELECT 1 FROM shipments GROUP BY order_id, version HAVING count(*) > 1) d",
    )
    .await?;
    let out_of_order = scalar(
        shipping_db,
        "SELECT count(*) FROM (SELECT version, lag(version) OVER (PARTITION BY order_id ORDER BY n) AS prev FROM shipments) s
         WHERE version <> coalesce(prev, 0) + 1",
    )
    .await?;
    let versions: Vec<(i64, i64)> =
        sqlx::query_as("SELECT id, version FROM orders ORDER BY id").fetch_all(orders_db).await?;
    let shipped: Vec<(i64, i64)> =
        sqlx::query_as("SELECT order_id, max(version) FROM shipments GROUP BY order_id ORDER BY order_id")
            .fetch_all(shipping_db)
            .await?;
    let orders_differing = versions.iter().filter(|v| !shipped.contains(v)).count();

    println!();
    println!("reconciliation after {:.1}s", started.elapsed().as_secs_f64());
    println!("  changes written                {changes_made:>7}");
    println!("  events in the outbox           {events:>7}");
    println!("  events published (confirmed)   {published:>7}");
    println!("  events quarantined             {quarantined:>7}");
    println!("  effects applied by shipping    {applied:>7}");
    println!("  duplicates dropped by inbox    {duplicates:>7}");
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
    } else {
        println!("NOT CLEAN: see the figures above");
    }
    Ok(clean)
}

async fn run() -> Result<ExitCode, BoxError> {
    let s = Settings::from_env()?;
    let mut stop = stop_on_signal()?;
    let (exchange, queues) = (s.exchange(), s.queues());
    let (orders_name, shipping_name) = (format!("{}_orders", s.name), format!("{}_shipping", s.name));

    println!("setting up: databases {orders_name} and {shipping_name}, exchange {exchange}");
    let orders_db = fresh_database(&s.server, &orders_name).await?;
    let shipping_db = fresh_database(&s.server, &shipping_name).await?;
    orders_service::migrate(&orders_db).await?;
    shipping_service::migrate(&shipping_db).await?;
    fresh_broker(&s.amqp_url, &queues).await?;

    let (consumer, topology) =
        shipping_service::start(&shipping_db, &s.amqp_url, &exchange, &queues, PARTITIONS, None).await?;
    let relay = start_relay(&orders_db, &s.amqp_url, &topology)?;

    println!("writing {} changes over {} orders with {WRITERS} writers", s.changes, s.orders);
    let started = Instant::now();
    let writers = spawn_writers(&orders_db, s.changes, s.orders, &stop);
    let finished = watch_progress(&orders_db, &shipping_db, s.changes, started, &mut stop).await?;
    if !finished {
        println!("interrupted: stopping the writers, the relay and the consumer");
    }
    for w in writers {
        w.await??;
    }
    let duplicates = consumer.stats().duplicates;
    relay.shutdown().await?;
    consumer.shutdown().await?;
    if !finished {
        return Ok(ExitCode::FAILURE);
    }

    let clean = reconcile(&orders_db, &shipping_db, s.changes, duplicates, started).await?;
    orders_db.close().await;
    shipping_db.close().await;
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The relay of the orders service, publishing to the shipping service's topology (the same value
/// both sides declare).
fn start_relay(pool: &PgPool, amqp_url: &str, topology: &Topology) -> Result<RelayHandle, outbox_relayer::Error> {
    let publisher = AmqpPublisher::builder(amqp_url).connection_name("demo-relay").build()?;
    let relay = Relay::builder(pool, publisher).topology(topology).app_id("orders-service").build()?;
    Ok(relay.spawn())
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    // Errors are shown with their message only (`Display`): a database error's `Debug` form
    // carries PostgreSQL's DETAIL, which can quote a row.
    match run().await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}
