//! `outbox status`: counts of the outbox rows by state.

use sqlx::PgConnection;

use crate::error::CliError;

/// Prints the outbox's counts by state ([`outbox_producer::admin::stats`]).
///
/// # Errors
/// The outbox tables are missing or the query fails.
pub(crate) async fn run(conn: &mut PgConnection) -> Result<(), CliError> {
    crate::schema::check_outbox(conn).await?;
    let stats = outbox_producer::admin::stats(&mut *conn).await?;
    println!("pending: {}", stats.pending);
    println!("held: {}", stats.held);
    println!("oldest_pending_age_s: {:.3}", stats.oldest_pending_age.as_secs_f64());
    println!("quarantined: {}", stats.quarantined);
    println!("published: {}", stats.published);
    println!("skipped: {}", stats.skipped);
    Ok(())
}
