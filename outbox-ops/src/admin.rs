//! The operator API over the outbox tables: counts by state ([`stats`]), the backlog as the
//! gauges show it ([`backlog`]), list quarantined events, retry one, skip one, re-check the events
//! held behind a quarantine.
//!
//! A retry keeps the same row and the same event id (nothing new is minted) and resets its
//! attempts. A skip records that an operator gave up on the event and lets its entity's later
//! events flow. Both wake the relays.
//!
//! ```no_run
//! use outbox_ops::admin;
//!
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_ops::Error> {
//! for q in admin::list_quarantined(&pool, 100).await? {
//!     println!("{} {} {:?} {:?}", q.id, q.event_type, q.last_error_kind, q.last_error);
//!     admin::retry(&pool, q.id).await?;
//! }
//! # Ok(()) }
//! ```

use chrono::{DateTime, Utc};
use outbox_types::{EventId, FailureKind};
use sqlx::PgPool;
use uuid::Uuid;

use crate::Result;
pub use crate::activity::{Activity, CLAIMS_SAMPLED, COUNTED_UP_TO, RelayClaims, activity};
pub use crate::backlog::{Backlog, EXACT_UP_TO, SAMPLED, backlog, backlog_from};
pub use crate::events::{EventRecord, entity_events, event, payload};
pub use crate::stats::{Stats, stats};

/// A quarantined event, as an operator sees it (no payload).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QuarantinedEvent {
    /// The event id.
    pub id: EventId,
    /// The event type.
    pub event_type: String,
    /// The entity key, for ordered events.
    pub entity_key: Option<String>,
    /// The entity sequence, for ordered events.
    pub seq: Option<i64>,
    /// Attempts made.
    pub attempts: i32,
    /// The classified reason.
    pub last_error_kind: Option<FailureKind>,
    /// The last error's description.
    pub last_error: Option<String>,
    /// When the event was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it was quarantined.
    pub quarantined_at: Option<DateTime<Utc>>,
}

type Row = (
    Uuid,
    String,
    Option<String>,
    Option<i64>,
    i32,
    Option<String>,
    Option<String>,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
);

/// Lists up to `limit` quarantined events, oldest quarantine first.
///
/// # Errors
/// A database error.
pub async fn list_quarantined(pool: &PgPool, limit: i64) -> Result<Vec<QuarantinedEvent>> {
    list_quarantined_of(pool, None, limit).await
}

/// Lists up to `limit` quarantined events of failure kind `kind` (every kind for `None`), oldest
/// quarantine first.
///
/// # Errors
/// A database error.
pub async fn list_quarantined_of(
    pool: &PgPool,
    kind: Option<FailureKind>,
    limit: i64,
) -> Result<Vec<QuarantinedEvent>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, event_type, entity_key, seq, attempts, last_error_kind, last_error, created_at, quarantined_at
         FROM outbox_events WHERE status = 'quarantined' AND ($2::text IS NULL OR last_error_kind = $2)
         ORDER BY quarantined_at, id LIMIT $1",
    )
    .bind(limit)
    .bind(kind.map(FailureKind::as_str))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, event_type, entity_key, seq, attempts, kind, last_error, created_at, quarantined_at)| {
            QuarantinedEvent {
                id: EventId::from_uuid(id),
                event_type,
                entity_key,
                seq,
                attempts,
                last_error_kind: kind.and_then(|k| k.parse().ok()),
                last_error,
                created_at,
                quarantined_at,
            }
        })
        .collect())
}

/// The channel the relays listen on (`outbox_producer::NOTIFY_CHANNEL`, which this crate does not
/// depend on).
const NOTIFY_CHANNEL: &str = "outbox_events";

/// The payload of a notification on the relays' channel that says events already passed in the
/// queue are due again (an operator retried or skipped a quarantined event): the relays look
/// below their low water at once.
pub const NOTIFY_REQUEUED: &str = "requeued";

/// Makes the entity's later events claimable again and wakes the relays, telling them that events
/// they passed in the queue are due again (`$3`, `$4`: the channel and that payload).
const WAKE_SUCCESSORS: &str = "\
WITH woken AS (
    UPDATE outbox_events SET next_attempt_at = now()
    WHERE entity_key = $1 AND seq > $2 AND status = 'pending' AND lease_owner IS NULL AND next_attempt_at > now()
    RETURNING 1
)
SELECT pg_notify($3, $4), (SELECT count(*) FROM woken)";

async fn finish(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, entity: Option<(String, i64)>) -> Result<()> {
    match entity {
        Some((key, seq)) => {
            sqlx::query(WAKE_SUCCESSORS)
                .bind(key)
                .bind(seq)
                .bind(NOTIFY_CHANNEL)
                .bind(NOTIFY_REQUEUED)
                .execute(&mut **tx)
                .await?;
        }
        None => {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(NOTIFY_CHANNEL)
                .bind(NOTIFY_REQUEUED)
                .execute(&mut **tx)
                .await?;
        }
    }
    Ok(())
}

/// Applies `update` (which must return `entity_key, seq`) to a quarantined event, wakes its
/// entity's later events and the relays; `false` if no quarantined event has this id.
async fn resolve(pool: &PgPool, id: EventId, update: &'static str, action: &'static str) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let row: Option<(Option<String>, Option<i64>)> =
        sqlx::query_as(update).bind(id.as_uuid()).fetch_optional(&mut *tx).await?;
    let Some((key, seq)) = row else {
        return Ok(false);
    };
    finish(&mut tx, key.zip(seq)).await?;
    tx.commit().await?;
    tracing::info!(event_id = %id, action, "outbox.quarantine_resolved");
    Ok(true)
}

/// Makes rows held behind a quarantined event due again once no earlier event of their entity is
/// quarantined (a retry or skip by an operator wakes them itself; this closes the race with a claim
/// that deferred them at the same moment). A row held behind another held row of the same
/// quarantine stays held: releasing it would only have the next claim defer it again. The lookup
/// goes through the quarantined rows (few), not through the entity's history. Released rows may lie
/// below a relay's low water: the relays are told (`$1`, `$2`: the channel and
/// [`NOTIFY_REQUEUED`]).
const RELEASE_HELD: &str = "\
WITH blocked AS (
    SELECT entity_key, min(seq) AS seq FROM outbox_events
    WHERE status = 'quarantined' AND entity_key IS NOT NULL GROUP BY entity_key
), released AS (
    UPDATE outbox_events s SET next_attempt_at = now()
    WHERE s.status = 'pending' AND s.next_attempt_at = 'infinity'
      AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.entity_key = s.entity_key AND b.seq < s.seq)
    RETURNING 1
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM (SELECT pg_notify($1, $2) FROM released LIMIT 1) n)";

/// Makes events held behind a quarantined event due again where no earlier event of their entity
/// is quarantined any more (the relay does this every 30 polls; a retry or skip wakes the
/// successors at once). Returns how many were released.
///
/// # Errors
/// A database error.
pub async fn release_held(pool: &PgPool) -> Result<u64> {
    let (released, _notified): (i64, i64) =
        sqlx::query_as(RELEASE_HELD).bind(NOTIFY_CHANNEL).bind(NOTIFY_REQUEUED).fetch_one(pool).await?;
    Ok(u64::try_from(released).unwrap_or(0))
}

/// Sends a quarantined event again: the same row and event id, attempts reset to 0, due now.
/// Returns `false` if no quarantined event has this id.
///
/// # Errors
/// A database error.
pub async fn retry(pool: &PgPool, id: EventId) -> Result<bool> {
    resolve(
        pool,
        id,
        "UPDATE outbox_events SET status = 'pending', attempts = 0, next_attempt_at = now(), quarantined_at = NULL,
                lease_owner = NULL, claim_token = NULL, lease_until = NULL
         WHERE id = $1 AND status = 'quarantined' RETURNING entity_key, seq",
        "retry",
    )
    .await
}

/// Gives up on a quarantined event: it is recorded as skipped (never published) and its entity's
/// later events flow again. Returns `false` if no quarantined event has this id.
///
/// # Errors
/// A database error.
pub async fn skip(pool: &PgPool, id: EventId) -> Result<bool> {
    skip_because(pool, id, None).await
}

/// [`skip`], recording the operator's `reason` with the event's last error.
///
/// # Errors
/// A database error.
pub async fn skip_because(pool: &PgPool, id: EventId, reason: Option<&str>) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let row: Option<(Option<String>, Option<i64>)> = sqlx::query_as(
        "UPDATE outbox_events SET status = 'skipped', lease_owner = NULL, claim_token = NULL, lease_until = NULL,
                last_error = coalesce(last_error, '') || ' (skipped by an operator' || coalesce(': ' || $2, '') || ')'
         WHERE id = $1 AND status = 'quarantined' RETURNING entity_key, seq",
    )
    .bind(id.as_uuid())
    .bind(reason)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((key, seq)) = row else {
        return Ok(false);
    };
    finish(&mut tx, key.zip(seq)).await?;
    tx.commit().await?;
    tracing::info!(event_id = %id, action = "skip", "outbox.quarantine_resolved");
    Ok(true)
}
