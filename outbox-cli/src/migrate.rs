//! `outbox migrate`: the outbox and inbox migrations.

use sqlx::PgPool;

use crate::error::CliError;

/// Applies the outbox migrations unless `inbox_only`, the inbox's unless `outbox_only`.
///
/// # Errors
/// The first migration that fails.
pub(crate) async fn run(pool: &PgPool, outbox_only: bool, inbox_only: bool) -> Result<(), CliError> {
    if !inbox_only {
        outbox_producer::migrate(pool).await?;
        tracing::info!("outbox tables are up to date");
    }
    if !outbox_only {
        outbox_inbox::migrate(pool).await?;
        tracing::info!("inbox tables are up to date");
    }
    Ok(())
}
