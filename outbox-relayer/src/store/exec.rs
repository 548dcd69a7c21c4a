//! The functions that bind the relay's statements (`sql.rs`) and run them.

use std::time::Duration;

use outbox_types::{EventId, FailureKind};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::decode::{self, Sealed, Taken};
use super::sql;
use crate::Result;

/// What to record for a row that was not confirmed.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) id: EventId,
    pub(crate) quarantine: bool,
    pub(crate) delay: Duration,
    pub(crate) reason: String,
    pub(crate) kind: FailureKind,
}

/// What a claim asks for: up to `batch` due, ready rows, for each ready entity up to `run`
/// consecutive events, scanning from the queue position `low_water`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub(crate) batch: usize,
    pub(crate) run: usize,
    pub(crate) low_water: i64,
}

/// Claims what `ask` asks for under `token`, leased for `lease`.
pub(crate) async fn claim(
    pool: &PgPool,
    ask: Ask,
    owner: &str,
    token: Uuid,
    lease: Duration,
    sealed: Sealed<'_>,
) -> Result<Taken> {
    let batch = i64::try_from(ask.batch).unwrap_or(i64::MAX);
    let rows = sqlx::query(sql::CLAIM)
        .bind(batch.saturating_mul(4))
        .bind(batch)
        .bind(owner)
        .bind(token)
        .bind(lease.as_secs_f64())
        .bind(i64::try_from(ask.run.max(1)).unwrap_or(i64::MAX))
        .bind(ask.low_water)
        .fetch_all(pool)
        .await?;
    decode::taken(&rows, sealed)
}

/// The first position at or after `from` of a pending row that is not held, and the last position
/// handed out (`None`: none yet).
pub(crate) async fn first_pending(pool: &PgPool, from: i64) -> Result<(Option<i64>, Option<i64>)> {
    Ok(sqlx::query_as(sql::FIRST_PENDING).bind(from).fetch_one(pool).await?)
}

/// The virtual transaction ids of the transactions that may still commit rows into the outbox.
pub(crate) async fn writers(pool: &PgPool) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(sql::WRITERS).fetch_one(pool).await?)
}

/// The first position below `below` of a pending row that is not held.
pub(crate) async fn pending_below(pool: &PgPool, below: i64) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(sql::BELOW).bind(below).fetch_one(pool).await?)
}

/// How many positions the identity of `position` hands a session at once.
pub(crate) async fn position_cache(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(sql::POSITION_CACHE).fetch_one(pool).await?)
}

/// Marks confirmed rows (by their claimed tuple ids) published; returns how many this claim still
/// owned.
pub(crate) async fn mark_published(pool: &PgPool, tids: &[&str], token: Uuid) -> Result<u64> {
    if tids.is_empty() {
        return Ok(0);
    }
    Ok(sqlx::query(sql::MARK_PUBLISHED).bind(tids).bind(token).execute(pool).await?.rows_affected())
}

/// Records failures (retry later or quarantine); returns how many this claim still owned.
pub(crate) async fn mark_failed(db: impl sqlx::PgExecutor<'_>, failures: &[Failure], token: Uuid) -> Result<u64> {
    if failures.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = failures.iter().map(|f| *f.id.as_uuid()).collect();
    let quarantine: Vec<bool> = failures.iter().map(|f| f.quarantine).collect();
    let delays: Vec<f64> = failures.iter().map(|f| f.delay.as_secs_f64()).collect();
    let reasons: Vec<&str> = failures.iter().map(|f| f.reason.as_str()).collect();
    let kinds: Vec<&str> = failures.iter().map(|f| f.kind.as_str()).collect();
    Ok(sqlx::query(sql::MARK_FAILED)
        .persistent(false)
        .bind(&ids)
        .bind(&quarantine)
        .bind(&delays)
        .bind(&reasons)
        .bind(&kinds)
        .bind(token)
        .execute(db)
        .await?
        .rows_affected())
}

/// Gives rows back without recording an attempt outcome, so another relay takes them at once;
/// `unsent`: they were never sent (an earlier event of their entity was not confirmed), so the
/// claim's attempt is taken back.
pub(crate) async fn release(db: impl sqlx::PgExecutor<'_>, ids: &[Uuid], token: Uuid, unsent: bool) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(sqlx::query(sql::RELEASE)
        .persistent(false)
        .bind(ids)
        .bind(token)
        .bind(unsent)
        .execute(db)
        .await?
        .rows_affected())
}

/// Releases the rows of a claim whose answer never arrived (at or above `low_water`); returns how
/// many it had taken.
pub(crate) async fn release_claim(pool: &PgPool, token: Uuid, low_water: i64) -> Result<u64> {
    Ok(sqlx::query(sql::RELEASE_CLAIM).bind(token).bind(low_water).execute(pool).await?.rows_affected())
}

/// Makes `relay_id` present on the session `conn` (see `PRESENT`); false if another session runs
/// under the same id.
pub(crate) async fn present(conn: &mut PgConnection, relay_id: &str) -> Result<bool> {
    Ok(sqlx::query_scalar(sql::PRESENT).bind(relay_id).fetch_one(conn).await?)
}

/// Moves the wait hint `ahead` and takes the waiting lock of `relay_id` on `conn`; false while a
/// commit is at its end.
pub(crate) async fn wait(conn: &mut PgConnection, relay_id: &str, ahead: Duration) -> Result<bool> {
    Ok(sqlx::query_scalar(sql::WAIT).bind(relay_id).bind(millis(ahead)).fetch_one(conn).await?)
}

/// Moves the wait hint `ahead` again (a round trip that also shows the session still stands).
pub(crate) async fn still(conn: &mut PgConnection, ahead: Duration) -> Result<()> {
    sqlx::query(sql::STILL).bind(millis(ahead)).execute(conn).await?;
    Ok(())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Releases the waiting lock of `relay_id` on `conn`.
pub(crate) async fn busy(conn: &mut PgConnection, relay_id: &str) -> Result<()> {
    sqlx::query(sql::BUSY).bind(relay_id).execute(conn).await?;
    Ok(())
}

/// Deletes the row of `relay_id` and releases the locks of `conn`.
pub(crate) async fn leave(conn: &mut PgConnection, relay_id: &str) -> Result<()> {
    sqlx::query(sql::LEAVE).bind(relay_id).execute(conn).await?;
    Ok(())
}

/// The transaction id holding back the vacuum horizon, if anything holds it (see `HORIZON`).
pub(crate) async fn horizon(pool: &PgPool) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(sql::HORIZON).fetch_optional(pool).await?.flatten())
}

/// Vacuums the outbox table (see `VACUUM`). Sent as a simple query, as `VACUUM` cannot run in the
/// implicit transaction of a prepared statement.
pub(crate) async fn vacuum(pool: &PgPool) -> Result<()> {
    sqlx::raw_sql(sql::VACUUM).execute(pool).await?;
    Ok(())
}
