//! Inbox retention: a consumer's processed (and skipped) event ids are its deduplication record,
//! kept for its dedup window and deleted after, in bounded batches. Parked and failed rows are
//! never touched, and the entities' last sequences are kept (a batch raises each entity's floor in
//! `inbox_entities` to the highest processed sequence it deletes, in the same statement): an ordered event delivered again after its id
//! was deleted is still dropped, as stale, by its sequence; only unordered events lose their
//! duplicate check once their ids are gone, so the window is the time in which a duplicate of an
//! unordered event is caught.

use std::time::Duration;

use sqlx::PgPool;

use crate::Result;

/// Deletes up to `$3` of `$1`'s processed or skipped rows older than `$2` seconds, oldest first,
/// through the index of processed rows by time, each locked with `SKIP LOCKED` so that several
/// runners of one consumer share the work; keeps each entity's last applied sequence as its floor
/// (in key order, so two batches never wait for each other in a circle); returns how many rows
/// were deleted.
const PRUNE: &str = "\
WITH doomed AS (
    SELECT event_id FROM inbox_events
    WHERE consumer = $1 AND status IN ('processed', 'skipped') AND processed_at < now() - make_interval(secs => $2)
    ORDER BY processed_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM inbox_events i USING doomed
    WHERE i.consumer = $1 AND i.event_id = doomed.event_id AND i.status IN ('processed', 'skipped')
    RETURNING i.entity_key, i.seq, i.status
), floors AS (
    INSERT INTO inbox_entities AS e (consumer, entity_key, last_seq)
    SELECT $1, entity_key, max(seq) FROM gone WHERE entity_key IS NOT NULL AND status = 'processed'
    GROUP BY entity_key ORDER BY entity_key COLLATE \"C\"
    ON CONFLICT (consumer, entity_key) DO UPDATE SET last_seq = greatest(e.last_seq, EXCLUDED.last_seq)
)
SELECT count(*) FROM gone";

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
    // Unnamed, in a transaction of its own: run by the runner through the service's pool, which
    // may go through a pooler in transaction mode (see `admin::in_transaction`).
    let query =
        sqlx::query_as(PRUNE).persistent(false).bind(consumer).bind(older_than.as_secs_f64()).bind(batch.max(1));
    let (deleted,): (i64,) = crate::admin::in_transaction(pool, query).await?;
    let deleted = u64::try_from(deleted).unwrap_or(0);
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
    let query = sqlx::query_as(COUNT).persistent(false).bind(consumer).bind(older_than.as_secs_f64());
    let (count,): (i64,) = crate::admin::in_transaction(pool, query).await?;
    Ok(count)
}
