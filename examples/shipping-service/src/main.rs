//! The shipping service on its own: applies order events until SIGTERM or Ctrl-C.
//!
//! Run: `cargo run -p shipping-service`
//!
//! Environment (all optional):
//!
//! - `DATABASE_URL`: default `postgres://postgres@127.0.0.1:5432/outbox_example_shipping`; the
//!   database is created if missing, then the `shipments` table and the inbox tables.
//! - `AMQP_URL`: default `amqp://guest:guest@127.0.0.1:5672/%2f`.
//! - `EXCHANGE`: default `orders.events`, the topic exchange the orders service publishes to
//!   (declared if missing).
//! - `QUEUE_BASE`: default `shipping.orders`; the partition queues are `<QUEUE_BASE>.<n>`.
//! - `PARTITIONS`: default `4`, as many as the orders service's.
//! - `OUTBOX_METRICS_ADDR`: off unless given; an address such as `127.0.0.1:9188` on which to
//!   serve `/metrics` (Prometheus text: the inbox's counters and gauges), `/healthz` and `/readyz`.
//! - `GAUGE_INTERVAL_SECS`: default `10`, how often the inbox's backlog is read into its gauges.
//! - `RUST_LOG`: default `info,sqlx::postgres::notice=warn`.
//!   Whatever it says, `outbox_types::REDACTING_LOG_TARGETS` filters after it, so lapin never
//!   logs message content (its returned messages off, lapin itself at most at `info`).
//!
//! Start it before or after the orders service: both declare the same topology (exchange,
//! partition queues, dead letters), so the events wait in the queues for it.
//! Run several processes at once, as many as you like: they set up the database one after the
//! other, and each queue has one active consumer, the others standing by. Logs
//! `shipping-service ready` once it consumes. Stops on SIGTERM or Ctrl-C after finishing the
//! deliveries in hand.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shipping_service::BoxError;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// The settings read from the environment.
struct Settings {
    database_url: String,
    amqp_url: String,
    exchange: String,
    queue_base: String,
    partitions: u32,
    metrics_addr: Option<SocketAddr>,
    gauge_interval: Duration,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// An optional numeric setting; the error names the variable.
fn env_number<T: FromStr>(name: &str, default: T) -> Result<T, BoxError> {
    match std::env::var(name) {
        Ok(v) => v.parse().map_err(|_| format!("{name} must be a number, got {v:?}").into()),
        Err(_) => Ok(default),
    }
}

impl Settings {
    fn from_env() -> Result<Self, BoxError> {
        Ok(Self {
            database_url: env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/outbox_example_shipping"),
            amqp_url: env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
            exchange: env_or("EXCHANGE", "orders.events"),
            queue_base: env_or("QUEUE_BASE", "shipping.orders"),
            partitions: match env_number("PARTITIONS", 4)? {
                0 => return Err("PARTITIONS must be at least 1".into()),
                n => n,
            },
            metrics_addr: match std::env::var("OUTBOX_METRICS_ADDR") {
                Ok(a) => Some(a.parse().map_err(|_| {
                    format!("OUTBOX_METRICS_ADDR must be an address such as 127.0.0.1:9188, got {a:?}")
                })?),
                Err(_) => None,
            },
            gauge_interval: match env_number("GAUGE_INTERVAL_SECS", 10.0_f64)? {
                s if s.is_finite() && s > 0.0 && s <= 86_400.0 => Duration::from_secs_f64(s),
                _ => return Err("GAUGE_INTERVAL_SECS must be a number of seconds above 0, at most 86400".into()),
            },
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

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() -> Result<(), BoxError> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => Ok(()),
        r = tokio::signal::ctrl_c() => Ok(r?),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    // Errors are shown with their message only (`Display`): a database error's `Debug` form
    // carries PostgreSQL's DETAIL, which can quote a row.
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shipping-service: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let s = Settings::from_env()?;
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = s.metrics_addr {
        shipping_service::endpoint::serve(addr, ready.clone()).await?;
    }
    shipping_service::create_database_if_missing(&s.database_url).await?;
    let pool = sqlx::PgPool::connect(&s.database_url).await?;
    shipping_service::migrate(&pool).await?;
    let (runner, _) =
        shipping_service::start(&pool, &s.amqp_url, &s.exchange, &s.queue_base, s.partitions, Some(s.gauge_interval))
            .await?;
    ready.store(true, Ordering::Relaxed);
    tracing::info!(exchange = %s.exchange, queues = %format!("{}.0..{}", s.queue_base, s.partitions.saturating_sub(1)), "shipping-service ready");
    shutdown_signal().await?;
    ready.store(false, Ordering::Relaxed);
    tracing::info!("stopping: finishing the deliveries in hand");
    runner.shutdown().await?;
    pool.close().await;
    Ok(())
}
