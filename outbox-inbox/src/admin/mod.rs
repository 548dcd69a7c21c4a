//! The operator's view of an inbox: gaps (events parked behind a missing predecessor) and failed
//! events, and repairs without the handler ([`request_retry`], [`skip_failed`], [`skip_gap`]): they
//! move the inbox's state, and the running consumer's sweep applies what they made ready. A
//! service with its handler at hand can apply at once with [`crate::InboxService`]'s `retry_failed`,
//! `skip_failed` and `skip_gap`.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
//! for gap in outbox_inbox::admin::list_gaps(&pool, "shipping").await? {
//!     println!("{}: applied up to {}, {} parked from {}, oldest parked {:.0}s ago",
//!         gap.entity_key, gap.last_seq, gap.parked, gap.first_parked_seq, gap.age_seconds);
//! }
//! # Ok(()) }
//! ```

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::Result;

mod requests;
pub use requests::{Requested, request_retry, skip_failed, skip_gap};

/// An entity whose next event has not arrived while later ones wait, parked.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Gap {
    /// The entity.
    pub entity_key: String,
    /// The last sequence applied.
    pub last_seq: i64,
    /// The lowest parked sequence (the missing ones are `last_seq + 1 .. first_parked_seq`).
    pub first_parked_seq: i64,
    /// How many events are parked.
    pub parked: i64,
    /// Seconds since the oldest parked event arrived: the alarm, more than the count.
    pub age_seconds: f64,
}

/// An event whose handler failed for good; its entity's later events wait behind it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FailedEvent {
    /// The event id.
    pub event_id: uuid::Uuid,
    /// The entity, for ordered events.
    pub entity_key: Option<String>,
    /// The sequence, for ordered events.
    pub seq: Option<i64>,
    /// The event type.
    pub event_type: Option<String>,
    /// The handler's error.
    pub last_error: Option<String>,
    /// When it arrived.
    pub received_at: DateTime<Utc>,
}

/// Entities of `consumer` with parked events, oldest gap first.
///
/// # Errors
/// A database error.
pub async fn list_gaps(pool: &PgPool, consumer: &str) -> Result<Vec<Gap>> {
    let rows: Vec<(String, i64, i64, i64, f64)> = sqlx::query_as(
        "SELECT p.entity_key,
                coalesce(greatest(e.last_seq, (SELECT max(a.seq) FROM inbox_events a
                                               WHERE a.consumer = p.consumer AND a.entity_key = p.entity_key
                                                 AND (a.status || '') = 'processed')), 0),
                min(p.seq), count(*), EXTRACT(EPOCH FROM now() - min(p.received_at))::float8
         FROM inbox_events p
         LEFT JOIN inbox_entities e ON e.consumer = p.consumer AND e.entity_key = p.entity_key
         WHERE p.consumer = $1 AND p.status = 'parked'
         GROUP BY p.consumer, p.entity_key, e.last_seq
         ORDER BY min(p.received_at)",
    )
    .bind(consumer)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(entity_key, last_seq, first_parked_seq, parked, age_seconds)| Gap {
            entity_key,
            last_seq,
            first_parked_seq,
            parked,
            age_seconds,
        })
        .collect())
}

/// Events of `consumer` that failed for good, oldest first.
///
/// # Errors
/// A database error.
pub async fn list_failed(pool: &PgPool, consumer: &str) -> Result<Vec<FailedEvent>> {
    type Row = (uuid::Uuid, Option<String>, Option<i64>, Option<String>, Option<String>, DateTime<Utc>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT event_id, entity_key, seq, event_type, last_error, received_at FROM inbox_events
         WHERE consumer = $1 AND status = 'failed' ORDER BY received_at",
    )
    .bind(consumer)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(event_id, entity_key, seq, event_type, last_error, received_at)| FailedEvent {
            event_id,
            entity_key,
            seq,
            event_type,
            last_error,
            received_at,
        })
        .collect())
}

/// An inbox at a glance: what waits for a missing predecessor or for an operator.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct InboxBacklog {
    /// Entities with at least one parked event (a gap: their next event has not arrived or not
    /// applied).
    pub entities_with_gap: i64,
    /// Events parked.
    pub parked: i64,
    /// Seconds since the oldest parked event arrived (zero when none is parked).
    pub oldest_parked_age_seconds: f64,
    /// Events that failed for good and wait for an operator.
    pub failed: i64,
}

/// Served by the index of parked and failed rows: its cost follows what is parked, not what was
/// processed.
const BACKLOG: &str = "\
SELECT count(DISTINCT entity_key) FILTER (WHERE status = 'parked'),
       count(*) FILTER (WHERE status = 'parked'),
       COALESCE(EXTRACT(EPOCH FROM now() - min(received_at) FILTER (WHERE status = 'parked'))::float8, 0),
       count(*) FILTER (WHERE status = 'failed')
FROM inbox_events WHERE consumer = $1 AND status IN ('parked', 'failed')";

/// Runs `query` unnamed in a transaction of its own: the runner reads through the service's pool,
/// which may go through a pooler in transaction mode. There an unnamed statement outside a
/// transaction can be parsed on one server connection and run on another; inside one it cannot. A
/// parse and two more round trips every few seconds cost nothing.
pub(crate) async fn in_transaction<'q, O>(
    pool: &PgPool,
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
) -> Result<O>
where
    O: Send + Unpin + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
{
    let mut tx = pool.begin().await?;
    let row = query.fetch_one(&mut *tx).await?;
    tx.commit().await?;
    Ok(row)
}

/// The backlog of `consumer`'s inbox.
///
/// # Errors
/// A database error.
pub async fn backlog(pool: &PgPool, consumer: &str) -> Result<InboxBacklog> {
    let (entities_with_gap, parked, oldest_parked_age_seconds, failed) =
        in_transaction(pool, sqlx::query_as(BACKLOG).persistent(false).bind(consumer)).await?;
    Ok(InboxBacklog {
        entities_with_gap,
        parked,
        oldest_parked_age_seconds: f64::max(oldest_parked_age_seconds, 0.0),
        failed,
    })
}

/// The consumers with an inbox in this database, in name order: one index descent per consumer
/// (a skip scan of the primary key of its events), whatever the number of events.
const CONSUMERS: &str = "\
WITH RECURSIVE c AS (
    (SELECT consumer FROM inbox_events ORDER BY consumer LIMIT 1)
    UNION ALL
    SELECT (SELECT e.consumer FROM inbox_events e WHERE e.consumer > c.consumer ORDER BY e.consumer LIMIT 1)
    FROM c WHERE c.consumer IS NOT NULL
)
SELECT consumer FROM c WHERE consumer IS NOT NULL";

/// The consumers that have applied or parked an event in this database's inbox tables.
///
/// # Errors
/// A database error (for example the inbox tables do not exist).
pub async fn consumers(pool: &PgPool) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(CONSUMERS).fetch_all(pool).await?)
}
