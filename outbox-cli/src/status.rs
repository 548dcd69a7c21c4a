//! `outbox status`: counts of the outbox rows by state.

use sqlx::PgConnection;

use crate::error::CliError;

/// Prints pending, the oldest pending row's age, quarantined and published.
///
/// # Errors
/// The outbox tables are missing or the query fails.
pub(crate) async fn run(conn: &mut PgConnection) -> Result<(), CliError> {
    crate::schema::check_outbox(conn).await?;
    let (pending, oldest, quarantined, published): (i64, Option<f64>, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'pending'),
                EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8,
                count(*) FILTER (WHERE status = 'quarantined'),
                count(*) FILTER (WHERE status = 'published')
         FROM outbox_events",
    )
    .fetch_one(&mut *conn)
    .await?;
    println!("pending: {pending}");
    println!("oldest_pending_age_s: {:.3}", oldest.unwrap_or(0.0));
    println!("quarantined: {quarantined}");
    println!("published: {published}");
    Ok(())
}
