//! Inbox retention: a consumer's processed (and skipped) event ids are its deduplication record,
//! kept for its dedup window and deleted after, in bounded batches. Parked and failed rows are
//! never touched, nor the entities' last sequences: an ordered event delivered again after its id
//! was deleted is still dropped, as stale, by its sequence; only unordered events lose their
//! duplicate check once their ids are gone, so the window is the time in which a duplicate of an
//! unordered event is caught.

use std::time::Duration;

use sqlx::PgPool;

use crate::Result;

/// Deletes up to `$3` of `$1`'s processed or skipped rows older than `$2` seconds, oldest first,
/// through the index of processed rows by time, each locked with `SKIP LOCKED` so that several
/// runners of one consumer share the work.
const PRUNE: &str = "\
WITH doomed AS (
    SELECT event_id FROM inbox_events
    WHERE consumer = $1 AND status IN ('processed', 'skipped') AND processed_at < now() - make_interval(secs => $2)
    ORDER BY processed_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
DELETE FROM inbox_events i USING doomed
WHERE i.consumer = $1 AND i.event_id = doomed.event_id AND i.status IN ('processed', 'skipped')";

/// Counts what [`prune`] would delete (for a dry run).
const COUNT: &str = "\
SELECT count(*) FROM inbox_events
WHERE consumer = $1 AND status IN ('processed', 'skipped') AND processed_at < now() - make_interval(secs => $2)";

/// Deletes one batch of at most `batch` of `consumer`'s processed or skipped event ids older than
/// `older_than`; returns how many were deleted.
///
/// # Errors
/// A database error.
pub async fn prune(pool: &PgPool, consumer: &str, older_than: Duration, batch: i64) -> Result<u64> {
    let deleted = sqlx::query(PRUNE)
        .bind(consumer)
        .bind(older_than.as_secs_f64())
        .bind(batch.max(1))
        .execute(pool)
        .await?
        .rows_affected();
    if deleted > 0 {
        metrics::counter!(crate::metrics::PRUNED, "consumer" => consumer.to_owned()).increment(deleted);
    }
    Ok(deleted)
}

/// How many of `consumer`'s event ids [`prune`] would delete for `older_than`.
///
/// # Errors
/// A database error.
pub async fn prunable(pool: &PgPool, consumer: &str, older_than: Duration) -> Result<i64> {
    Ok(sqlx::query_scalar(COUNT).bind(consumer).bind(older_than.as_secs_f64()).fetch_one(pool).await?)
}
