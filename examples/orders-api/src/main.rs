//! The orders API: an HTTP service that changes an order and announces it in one transaction,
//! with the relay running in the same process.
//!
//! Run: `cargo run -p orders-api`, then for example
//!
//! ```sh
//! curl -si -X POST localhost:8080/orders -H 'content-type: application/json' \
//!      -H 'Idempotency-Key: 7f3a' -d '{"total_cents": 1999}'
//! curl -si -X PATCH localhost:8080/orders/1 -H 'content-type: application/json' -d '{"status": "paid"}'
//! ```
//!
//! - `POST /orders` (`{"total_cents": n}`) creates an order; `PATCH /orders/{id}` (`{"status": s}`)
//!   changes its status. Each writes the order, its history row and the event `order.changed`
//!   (`{order_id, version, status}`, entity `order-<id>`) in one transaction: the event exists if
//!   and only if the change committed.
//! - An `Idempotency-Key` request header becomes the event's idempotency key: a client's retry
//!   with the same key gets the first answer again (`Idempotent-Replayed: true`) and writes no
//!   second order and no second event.
//! - `/healthz` answers 200 while the relay task is alive, `/readyz` 200 while it publishes (the
//!   database and the broker answer it), 503 with the reason otherwise.
//! - On SIGTERM or Ctrl-C it stops accepting connections, finishes the requests in progress, then
//!   stops the relay (confirms in flight awaited, the rest released for the next start).
//!
//! Environment (all optional): `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/outbox_example_orders`, created if missing), `AMQP_URL`
//! (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `LISTEN_ADDR` (default `127.0.0.1:8080`),
//! `EXCHANGE` (default `orders.events`), `QUEUE_BASE` (default `shipping.orders`) and `PARTITIONS`
//! (default `4`): the topology the shipping service consumes, declared here too, so either service
//! may start first. `RUST_LOG` as the other examples.

mod app;
mod orders;
mod state;

use std::net::SocketAddr;
use std::process::ExitCode;

use outbox_relayer::{AmqpPublisher, Relay, RelayHandle, Topology};
use sqlx::PgPool;
use sqlx::migrate::MigrateDatabase;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The settings read from the environment.
struct Settings {
    database_url: String,
    amqp_url: String,
    listen: SocketAddr,
    topology: Topology,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

impl Settings {
    fn from_env() -> Result<Self, BoxError> {
        let listen = env_or("LISTEN_ADDR", "127.0.0.1:8080");
        let partitions = env_or("PARTITIONS", "4");
        let partitions: u32 =
            partitions.parse().map_err(|_| format!("PARTITIONS must be a number, got {partitions:?}"))?;
        let topology = Topology::partitioned(
            env_or("EXCHANGE", "orders.events"),
            &env_or("QUEUE_BASE", "shipping.orders"),
            partitions,
        );
        Ok(Self {
            database_url: env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/outbox_example_orders"),
            amqp_url: env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
            listen: listen
                .parse()
                .map_err(|_| format!("LISTEN_ADDR must be an address such as 127.0.0.1:8080, got {listen:?}"))?,
            topology,
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    // Errors are shown with their message only: a database error's `Debug` form carries
    // PostgreSQL's DETAIL, which can quote a row.
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "orders-api failed");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let s = Settings::from_env()?;
    let pool = open_database(&s.database_url).await?;
    // Caught from here on: a signal during the start-up stops the service cleanly too.
    let stop = signalled()?;
    let relay = start_relay(&pool, &s)?;
    let listener =
        tokio::net::TcpListener::bind(s.listen).await.map_err(|e| format!("cannot listen on {}: {e}", s.listen))?;
    tracing::info!(addr = %s.listen, "orders-api listening");
    let app = app::router(pool, relay.probe());
    axum::serve(listener, app).with_graceful_shutdown(stop).await?;
    tracing::info!("requests drained; stopping the relay");
    relay.shutdown().await?;
    tracing::info!("orders-api stopped");
    Ok(())
}

/// Creates the database if missing, then the outbox's tables and the orders' own.
async fn open_database(url: &str) -> Result<PgPool, BoxError> {
    if !sqlx::Postgres::database_exists(url).await? {
        sqlx::Postgres::create_database(url).await?;
    }
    let pool = PgPool::connect(url).await?;
    outbox_producer::migrate(&pool).await?;
    orders::migrate(&pool).await?;
    Ok(pool)
}

fn start_relay(pool: &PgPool, s: &Settings) -> Result<RelayHandle, outbox_relayer::Error> {
    let publisher = AmqpPublisher::builder(&s.amqp_url).connection_name("orders-api").build()?;
    let relay = Relay::builder(pool, publisher).topology(&s.topology).app_id("orders-api").build()?;
    Ok(relay.spawn())
}

/// A future that resolves on SIGTERM or Ctrl-C; both are caught from this call on.
fn signalled() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received; draining requests"),
            _ = int.recv() => tracing::info!("Ctrl-C received; draining requests"),
        }
    })
}

fn init_tracing() {
    let default = || EnvFilter::new("info,sqlx::postgres::notice=warn");
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default());
    let redact: Targets = outbox_types::REDACTING_LOG_TARGETS.parse().expect("constant targets");
    tracing_subscriber::registry().with(filter).with(tracing_subscriber::fmt::layer().with_filter(redact)).init();
}
