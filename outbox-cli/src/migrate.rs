//! `outbox migrate`: the outbox and inbox migrations (of one database; `migrate_many.rs` for many).

use sqlx::PgPool;

use crate::error::CliError;

/// Applies the outbox migrations unless `inbox_only`, the inbox's unless `outbox_only`, and says
/// so in the log.
///
/// # Errors
/// The first migration that fails.
pub(crate) async fn run(
    options: sqlx::postgres::PgConnectOptions,
    timeout: std::time::Duration,
    outbox_only: bool,
    inbox_only: bool,
) -> Result<(), CliError> {
    database(options, timeout, outbox_only, inbox_only).await?;
    if !inbox_only {
        tracing::info!("outbox tables are up to date");
    }
    if !outbox_only {
        tracing::info!("inbox tables are up to date");
    }
    Ok(())
}

/// Migrates the database of `options` as [`run`] does, without the log lines (over many
/// databases, each has a line of output instead): a plain connection first, so that a database
/// that cannot be reached says why, then a pool closed at the end.
///
/// # Errors
/// The connection's failure, or the first migration that fails.
pub(crate) async fn database(
    options: sqlx::postgres::PgConnectOptions,
    timeout: std::time::Duration,
    outbox_only: bool,
    inbox_only: bool,
) -> Result<(), CliError> {
    drop(crate::connect::within(&options, timeout).await?);
    let pool = crate::connect::pool(options, timeout);
    let outcome = apply(&pool, outbox_only, inbox_only).await;
    pool.close().await;
    outcome
}

/// Applies the migrations [`run`] applies, without the log lines.
async fn apply(pool: &PgPool, outbox_only: bool, inbox_only: bool) -> Result<(), CliError> {
    if !inbox_only {
        outbox_producer::migrate(pool).await?;
    }
    if !outbox_only {
        outbox_inbox::migrate(pool).await?;
    }
    Ok(())
}
