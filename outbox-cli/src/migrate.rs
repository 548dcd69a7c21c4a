//! `outbox migrate`: the outbox and inbox migrations (of one database; `migrate_many.rs` for many).

use sqlx::PgPool;

use crate::error::CliError;

/// Applies the outbox migrations unless `inbox_only`, the inbox's unless `outbox_only`, and says
/// so in the log.
///
/// # Errors
/// The first migration that fails.
pub(crate) async fn run(pool: &PgPool, outbox_only: bool, inbox_only: bool) -> Result<(), CliError> {
    apply(pool, outbox_only, inbox_only).await?;
    if !inbox_only {
        tracing::info!("outbox tables are up to date");
    }
    if !outbox_only {
        tracing::info!("inbox tables are up to date");
    }
    Ok(())
}

/// [`run`] without the log lines (over many databases, each has a line of output instead).
///
/// # Errors
/// The first migration that fails.
pub(crate) async fn apply(pool: &PgPool, outbox_only: bool, inbox_only: bool) -> Result<(), CliError> {
    if !inbox_only {
        outbox_producer::migrate(pool).await?;
    }
    if !outbox_only {
        outbox_inbox::migrate(pool).await?;
    }
    Ok(())
}
