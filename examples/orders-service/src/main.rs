//! The orders service on its own: writes order changes, each with its event in one transaction,
//! and relays the events to RabbitMQ until SIGTERM or Ctrl-C.
//!
//! Run: `cargo run -p orders-service -- [changes] [orders]`
//!
//! Arguments and environment (all optional):
//!
//! - `changes` (first argument) or `CHANGES`: default `1000` changes, each to a random order.
//! - `orders` (second argument) or `ORDERS`: default `100` orders (`order-1` ... `order-100`).
//! - `DATABASE_URL`: default `postgres://postgres@127.0.0.1:5432/outbox_example_orders`; the
//!   database is created if missing, then the `orders` table and the outbox tables.
//! - `AMQP_URL`: default `amqp://guest:guest@127.0.0.1:5672/%2f`.
//! - `EXCHANGE`: default `orders.events`, the topic exchange the events are published to (declared
//!   if missing).
//! - `QUEUE_BASE`: default `shipping.orders`; the shipping service's partition queues are
//!   `<QUEUE_BASE>.<n>`, declared here too. Empty: no queue is declared here (an event that finds
//!   no queue comes back unroutable and is quarantined).
//! - `PARTITIONS`: default `4`; the routing key is `partition.<n>`, `n` a stable hash of the order.
//! - `RELAY_SECS`: unset by default (relay until SIGTERM or Ctrl-C); a number of seconds to relay
//!   after the changes are written, then stop by itself.
//! - `RUST_LOG`: default `info,sqlx::postgres::notice=warn`.
//!   Whatever it says, `outbox_types::REDACTING_LOG_TARGETS` filters after it, so lapin never
//!   logs message content (its returned messages off, lapin itself at most at `info`).
//!
//! Start it before or after the shipping service (`cargo run -p shipping-service`, same
//! `EXCHANGE`, `QUEUE_BASE` and `PARTITIONS`): both declare the same topology (exchange, partition
//! queues, dead letters) on every connection, so the events wait in the queues until the shipping
//! service takes them. Several processes may run at once on one database. On SIGTERM or Ctrl-C it stops writing
//! (finishing the change in progress), lets the relay finish the confirms in flight, and exits.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, Partitioned, Relay, RelayHandle, Topology};
use rand::Rng;
use sqlx::PgPool;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The settings read from the arguments and the environment.
struct Settings {
    changes: usize,
    orders: i64,
    database_url: String,
    amqp_url: String,
    exchange: String,
    queue_base: String,
    partitions: u32,
    relay_for: Option<Duration>,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// A numeric setting: `arg` if given, else the variable `name`, else `default`.
fn number<T: FromStr>(arg: Option<String>, name: &str, default: T) -> Result<T, BoxError> {
    match arg.or_else(|| std::env::var(name).ok()) {
        Some(v) => v.parse().map_err(|_| format!("{name} must be a number, got {v:?}").into()),
        None => Ok(default),
    }
}

fn at_least_one<T: PartialOrd + From<u8>>(value: T, name: &str) -> Result<T, BoxError> {
    if value < T::from(1) { Err(format!("{name} must be at least 1").into()) } else { Ok(value) }
}

impl Settings {
    fn from_env() -> Result<Self, BoxError> {
        let mut args = std::env::args().skip(1);
        let changes = number(args.next(), "CHANGES", 1000)?;
        let orders: i64 = number(args.next(), "ORDERS", 100)?;
        let orders = at_least_one(orders, "ORDERS")?;
        let relay_secs = std::env::var("RELAY_SECS").ok().map(|v| number(Some(v), "RELAY_SECS", 0)).transpose()?;
        Ok(Self {
            changes,
            orders,
            database_url: env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/outbox_example_orders"),
            amqp_url: env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
            exchange: env_or("EXCHANGE", "orders.events"),
            queue_base: env_or("QUEUE_BASE", "shipping.orders"),
            partitions: at_least_one(number(None, "PARTITIONS", 4)?, "PARTITIONS")?,
            relay_for: relay_secs.map(Duration::from_secs),
        })
    }
}

/// Logs at `RUST_LOG` (see the header), never letting lapin log message content.
fn init_tracing() {
    // Without RUST_LOG: info, but not PostgreSQL's notices ("relation ... already exists, skipping").
    let default = || EnvFilter::new("info,sqlx::postgres::notice=warn");
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default());
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
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("Ctrl-C received"),
        }
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// Resolves once `stop` turned `true` (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn start_relay(pool: &PgPool, s: &Settings) -> Result<RelayHandle, outbox_relayer::Error> {
    let publisher = AmqpPublisher::builder(&s.amqp_url).connection_name("orders-service").build()?;
    let relay = Relay::builder(pool, publisher).app_id("orders-service");
    let relay = if s.queue_base.is_empty() {
        relay.exchange(&s.exchange).routing(Partitioned::new(s.partitions))
    } else {
        relay.topology(&Topology::partitioned(s.exchange.clone(), &s.queue_base, s.partitions))
    };
    Ok(relay.build()?.spawn())
}

/// Writes the changes, each in a transaction of its own, until done or `stop`; a change in
/// progress is always finished (committed), never cut short. Returns how many were written.
async fn write_changes(
    pool: &PgPool,
    changes: usize,
    orders: i64,
    stop: &watch::Receiver<bool>,
) -> Result<usize, BoxError> {
    let outbox = Outbox::new();
    for written in 0..changes {
        if *stop.borrow() {
            return Ok(written);
        }
        let id = rand::rng().random_range(1..=orders);
        orders_service::change_order(pool, &outbox, id).await?;
    }
    Ok(changes)
}

/// Writes the changes, then relays until `stop` (or for `RELAY_SECS`); `stop` ends the writing too.
async fn write_then_relay(pool: &PgPool, s: &Settings, mut stop: watch::Receiver<bool>) -> Result<(), BoxError> {
    let written = write_changes(pool, s.changes, s.orders, &stop).await?;
    if written < s.changes {
        tracing::info!(written, "stopping before every change was written");
        return Ok(());
    }
    match s.relay_for {
        Some(d) => {
            tracing::info!(changes = s.changes, relay_secs = d.as_secs(), "changes written; relaying, then stopping");
            let _ = tokio::time::timeout(d, stopped(&mut stop)).await;
        }
        None => {
            tracing::info!(changes = s.changes, "changes written; relaying until SIGTERM or Ctrl-C");
            stopped(&mut stop).await;
        }
    }
    Ok(())
}

async fn run() -> Result<(), BoxError> {
    let s = Settings::from_env()?;
    let stop = stop_on_signal()?;
    orders_service::create_database_if_missing(&s.database_url).await?;
    let pool = PgPool::connect(&s.database_url).await?;
    orders_service::migrate(&pool).await?;
    let relay = start_relay(&pool, &s)?;
    let result = write_then_relay(&pool, &s, stop).await;
    tracing::info!("stopping the relay: awaiting the confirms in flight");
    let stopped = relay.shutdown().await;
    pool.close().await;
    result?;
    Ok(stopped?)
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    // Errors are shown with their message only (`Display`): a database error's `Debug` form
    // carries PostgreSQL's DETAIL, which can quote a row.
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("orders-service: {e}");
            ExitCode::FAILURE
        }
    }
}
