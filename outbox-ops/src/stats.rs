//! The outbox at a glance: what waits, what is held, what needs an operator, what went out. One
//! query, used by the `outbox status` command, the demo, the benchmarks and the testkit.

use std::time::Duration;

use sqlx::PgExecutor;

use crate::Result;

/// Counts of the outbox rows by state.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Rows waiting to be published (being published under a claim included), held rows included.
    pub pending: i64,
    /// Of those, rows held behind a quarantined event of their entity.
    pub held: i64,
    /// How long the oldest waiting row has waited (zero when nothing waits).
    pub oldest_pending_age: Duration,
    /// Rows that wait for an operator.
    pub quarantined: i64,
    /// Rows confirmed by the broker.
    pub published: i64,
    /// Rows an operator gave up on.
    pub skipped: i64,
}

impl Stats {
    /// Every row of the outbox.
    pub fn total(&self) -> i64 {
        self.pending + self.quarantined + self.published + self.skipped
    }
}

/// The status names in the SQL below are those of [`outbox_types::Status`]: written out, so that
/// the partial indexes' predicates match (a test ties them to the type and the schema).
const STATS: &str = "\
SELECT count(*) FILTER (WHERE status = 'pending'),
       count(*) FILTER (WHERE status = 'pending' AND next_attempt_at = 'infinity'),
       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8, 0),
       count(*) FILTER (WHERE status = 'quarantined'),
       count(*) FILTER (WHERE status = 'published'),
       count(*) FILTER (WHERE status = 'skipped')
FROM outbox_events";

/// Counts the outbox rows by state.
///
/// Counts every row: on a very large table it takes as long as a scan of it.
///
/// # Errors
/// A database error (for example `outbox_events` does not exist: migrations not applied).
pub async fn stats(db: impl PgExecutor<'_>) -> Result<Stats> {
    let (pending, held, age, quarantined, published, skipped): (i64, i64, f64, i64, i64, i64) =
        sqlx::query_as(STATS).fetch_one(db).await?;
    let oldest_pending_age = Duration::try_from_secs_f64(age.max(0.0)).unwrap_or_default();
    Ok(Stats { pending, held, oldest_pending_age, quarantined, published, skipped })
}
