//! `outbox`: the operator command of the transactional outbox.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/app outbox migrate
//! DATABASE_URL=postgres://postgres@127.0.0.1/app outbox status
//! ```
//!
//! Reads `DATABASE_URL` (flags override). Logs through `tracing` (`RUST_LOG` sets the level).

use std::process::ExitCode;

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
