//! `outbox`: the operator command of the transactional outbox.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/app outbox migrate
//! DATABASE_URL=postgres://postgres@127.0.0.1/app outbox status
//! DATABASE_URL=... AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f outbox relay --exchange orders
//! ```
//!
//! Reads `DATABASE_URL` and `AMQP_URL` (flags override). Logs through `tracing` (`RUST_LOG` sets
//! the level). `outbox relay` exits cleanly on SIGTERM or SIGINT: it stops claiming, awaits the
//! confirms in flight up to the shutdown deadline, records them and releases the rest.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sqlx::PgPool;

#[derive(Debug, Parser)]
#[command(name = "outbox", version, about = "Operate the transactional outbox")]
struct Cli {
    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or upgrade the outbox and inbox tables (tracked in `_outbox_migrations` and
    /// `_inbox_migrations`, apart from the application's own `_sqlx_migrations`).
    Migrate {
        /// Only the outbox (producer) tables.
        #[arg(long, conflicts_with = "inbox_only")]
        outbox_only: bool,
        /// Only the inbox (consumer) tables.
        #[arg(long)]
        inbox_only: bool,
    },
    /// Print the state of the outbox: pending, oldest pending age, quarantined, published.
    Status,
    /// Publish committed outbox rows to RabbitMQ until SIGTERM or SIGINT.
    Relay(RelayArgs),
}

#[derive(Debug, clap::Args)]
struct RelayArgs {
    /// RabbitMQ URL (`amqp://` or `amqps://`).
    #[arg(long, env = "AMQP_URL", hide_env_values = true)]
    amqp_url: String,
    /// Exchange to publish to.
    #[arg(long, default_value = "outbox.events")]
    exchange: String,
    /// Exchange type used when declaring it: topic, direct, fanout or headers.
    #[arg(long, default_value = "topic")]
    exchange_kind: String,
    /// Assume the exchange exists instead of declaring it.
    #[arg(long)]
    no_declare_exchange: bool,
    /// Route by a stable hash of the entity key into this many partitions
    /// (routing key `partition.<n>`) instead of by event type.
    #[arg(long)]
    partitions: Option<u32>,
    /// Rows per claim.
    #[arg(long, default_value_t = 500)]
    batch_size: usize,
    /// Messages awaiting confirms at once.
    #[arg(long, default_value_t = 1000)]
    confirm_window: usize,
    /// Claim lease in seconds (a crashed relay's rows are taken over after it).
    #[arg(long, default_value_t = 30.0)]
    lease_secs: f64,
    /// Polling interval in milliseconds (safety net behind LISTEN/NOTIFY).
    #[arg(long, default_value_t = 1000)]
    poll_interval_ms: u64,
    /// Seconds to wait for a batch's confirms.
    #[arg(long, default_value_t = 10.0)]
    confirm_timeout_secs: f64,
    /// Seconds a graceful shutdown may take.
    #[arg(long, default_value_t = 10.0)]
    shutdown_deadline_secs: f64,
    /// Vacuum the outbox table after this many rows published by this relay (0: leave it to
    /// autovacuum).
    #[arg(long, default_value_t = 100_000)]
    vacuum_after_rows: u64,
    /// AMQP `app_id` on every message.
    #[arg(long)]
    app_id: Option<String>,
    /// Name recorded as the owner of this relay's claims.
    #[arg(long)]
    relay_id: Option<String>,
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("DATABASE_URL is not set (or pass --database-url)")]
    NoDatabaseUrl,
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("{0}")]
    Producer(#[from] outbox_producer::Error),
    #[error("inbox migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unknown exchange kind {0:?} (topic, direct, fanout, headers)")]
    ExchangeKind(String),
    #[error("signal handler: {0}")]
    Signal(#[from] std::io::Error),
}

async fn shutdown_signal() -> Result<(), CliError> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
        r = tokio::signal::ctrl_c() => { r?; tracing::info!("SIGINT received; shutting down") }
    }
    Ok(())
}

async fn relay(pool: PgPool, args: RelayArgs) -> Result<(), CliError> {
    use outbox_core::ExchangeKind;
    let kind = match args.exchange_kind.as_str() {
        "topic" => ExchangeKind::Topic,
        "direct" => ExchangeKind::Direct,
        "fanout" => ExchangeKind::Fanout,
        "headers" => ExchangeKind::Headers,
        other => return Err(CliError::ExchangeKind(other.to_owned())),
    };
    let publisher = outbox_producer::AmqpPublisher::builder(args.amqp_url).build();
    let mut builder = outbox_producer::Relay::builder(pool, publisher.clone())
        .exchange(args.exchange)
        .exchange_kind(kind)
        .declare_exchange(!args.no_declare_exchange)
        .batch_size(args.batch_size)
        .confirm_window(args.confirm_window)
        .lease(Duration::from_secs_f64(args.lease_secs))
        .poll_interval(Duration::from_millis(args.poll_interval_ms))
        .confirm_timeout(Duration::from_secs_f64(args.confirm_timeout_secs))
        .shutdown_deadline(Duration::from_secs_f64(args.shutdown_deadline_secs))
        .vacuum_after(Some(args.vacuum_after_rows));
    if let Some(n) = args.partitions {
        builder = builder.routing(outbox_producer::Partitioned::new(n));
    }
    if let Some(app_id) = args.app_id {
        builder = builder.app_id(app_id);
    }
    if let Some(id) = args.relay_id {
        builder = builder.relay_id(id);
    }
    let relay = builder.build()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let signals = tokio::spawn(async move {
        let r = shutdown_signal().await;
        let _ = tx.send(());
        r
    });
    relay
        .run(async move {
            let _ = rx.await;
        })
        .await?;
    signals.abort();
    publisher.close().await;
    Ok(())
}

async fn connect(url: Option<&str>) -> Result<PgPool, CliError> {
    let url = url.ok_or(CliError::NoDatabaseUrl)?;
    Ok(sqlx::postgres::PgPoolOptions::new().max_connections(4).connect(url).await?)
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let pool = connect(cli.database_url.as_deref()).await?;
    match cli.command {
        Command::Migrate { outbox_only, inbox_only } => {
            if !inbox_only {
                outbox_producer::migrate(&pool).await?;
                tracing::info!("outbox tables are up to date");
            }
            if !outbox_only {
                outbox_consumer::migrate(&pool).await?;
                tracing::info!("inbox tables are up to date");
            }
        }
        Command::Status => {
            let (pending, oldest, quarantined, published): (i64, Option<f64>, i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE status = 'pending'),
                        EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8,
                        count(*) FILTER (WHERE status = 'quarantined'),
                        count(*) FILTER (WHERE status = 'published')
                 FROM outbox_events",
            )
            .fetch_one(&pool)
            .await?;
            println!("pending: {pending}");
            println!("oldest_pending_age_s: {:.3}", oldest.unwrap_or(0.0));
            println!("quarantined: {quarantined}");
            println!("published: {published}");
        }
        Command::Relay(args) => relay(pool.clone(), args).await?,
    }
    pool.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "outbox failed");
            ExitCode::FAILURE
        }
    }
}
