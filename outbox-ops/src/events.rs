//! One event's record as an operator looks at it (`outbox events show`), and an entity's events in
//! sequence order (`outbox events list --entity`): state, attempts, last error, lease, place in its
//! entity. The payload only when asked for. Read by primary key and by the entity's sequence index.

use chrono::{DateTime, Utc};
use outbox_types::{EventId, FailureKind, Status};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{Error, Result};

/// The row behind an [`EventRecord`]; `next_attempt` is NULL for `infinity` (held).
#[derive(sqlx::FromRow)]
struct RecordRow {
    id: Uuid,
    event_type: String,
    event_version: i64,
    entity_key: Option<String>,
    seq: Option<i64>,
    status: String,
    attempts: i32,
    last_error_kind: Option<String>,
    last_error: Option<String>,
    created_at: DateTime<Utc>,
    published_at: Option<DateTime<Utc>>,
    quarantined_at: Option<DateTime<Utc>>,
    next_attempt: Option<DateTime<Utc>>,
    lease_owner: Option<String>,
    lease_until: Option<DateTime<Utc>>,
    correlation_id: Option<String>,
    causation_id: Option<String>,
    payload_scrubbed_at: Option<DateTime<Utc>>,
    payload_key_id: Option<String>,
    last_seq: Option<i64>,
}

/// The select of a [`RecordRow`], for the statements below.
macro_rules! select {
    () => {
        "\
SELECT e.id, e.event_type, e.event_version, e.entity_key, e.seq, e.status, e.attempts, e.last_error_kind,
       e.last_error, e.created_at, e.published_at, e.quarantined_at,
       CASE WHEN e.next_attempt_at = 'infinity' THEN NULL ELSE e.next_attempt_at END AS next_attempt,
       e.lease_owner, e.lease_until, e.correlation_id, e.causation_id, e.payload_scrubbed_at,
       e.payload_key_id,
       greatest((SELECT max(q.seq) FROM outbox_events q WHERE q.entity_key = e.entity_key), s.last_seq) AS last_seq
FROM outbox_events e LEFT JOIN outbox_entity_sequences s ON s.entity_key = e.entity_key "
    };
}

const BY_ID: &str = concat!(select!(), "WHERE e.id = $1");

/// The entity's last `$2` rows, returned in sequence order.
const BY_ENTITY: &str =
    concat!("SELECT * FROM (", select!(), "WHERE e.entity_key = $1 ORDER BY e.seq DESC LIMIT $2) last ORDER BY seq");

/// An outbox row's record, without its payload.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventRecord {
    /// The event id.
    pub id: EventId,
    /// The event type.
    pub event_type: String,
    /// The version of the event type.
    pub event_version: i64,
    /// The entity key and the event's sequence in it, for ordered events.
    pub entity: Option<(String, i64)>,
    /// The last sequence written for its entity: how far the entity has gone.
    pub entity_last_seq: Option<i64>,
    /// Where the row is in its lifecycle.
    pub status: Status,
    /// Publish attempts so far.
    pub attempts: i32,
    /// The classified kind (if it reads) and the description of the last failure.
    pub last_error: Option<(Option<FailureKind>, String)>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When the broker confirmed it.
    pub published_at: Option<DateTime<Utc>>,
    /// When it was quarantined.
    pub quarantined_at: Option<DateTime<Utc>>,
    /// When a pending row is due; `None` for a row held behind a quarantined event (until an
    /// operator acts) and for final rows.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The relay holding it now, and its lease expiry.
    pub lease: Option<(String, Option<DateTime<Utc>>)>,
    /// The correlation id.
    pub correlation_id: Option<String>,
    /// The causation id.
    pub causation_id: Option<String>,
    /// When retention cleared the payload (the row stays until it is deleted).
    pub payload_scrubbed_at: Option<DateTime<Utc>>,
    /// The id of the key the payload is sealed with (encryption at rest), if it is.
    pub payload_key_id: Option<String>,
}

impl TryFrom<RecordRow> for EventRecord {
    type Error = Error;

    fn try_from(r: RecordRow) -> Result<Self> {
        let status: Status =
            r.status.parse().map_err(|_| Error::Corrupt(format!("event {} has an unknown status", r.id)))?;
        Ok(Self {
            id: EventId::from_uuid(r.id),
            event_type: r.event_type,
            event_version: r.event_version,
            entity: r.entity_key.zip(r.seq),
            entity_last_seq: r.last_seq,
            status,
            attempts: r.attempts,
            last_error: r.last_error.map(|e| (r.last_error_kind.and_then(|k| k.parse().ok()), e)),
            created_at: r.created_at,
            published_at: r.published_at,
            quarantined_at: r.quarantined_at,
            next_attempt_at: r.next_attempt.filter(|_| status == Status::Pending),
            lease: r.lease_owner.map(|owner| (owner, r.lease_until)),
            correlation_id: r.correlation_id,
            causation_id: r.causation_id,
            payload_scrubbed_at: r.payload_scrubbed_at,
            payload_key_id: r.payload_key_id,
        })
    }
}

/// The record of event `id`, or `None` if the outbox has no such event (never written, or deleted
/// by retention).
///
/// # Errors
/// A database error.
pub async fn event(pool: &PgPool, id: EventId) -> Result<Option<EventRecord>> {
    let row: Option<RecordRow> = sqlx::query_as(BY_ID).bind(id.as_uuid()).fetch_optional(pool).await?;
    row.map(EventRecord::try_from).transpose()
}

/// The payload of event `id` and its content type, or `None` if there is no such event.
///
/// # Errors
/// A database error.
pub async fn payload(pool: &PgPool, id: EventId) -> Result<Option<(Vec<u8>, String)>> {
    Ok(sqlx::query_as("SELECT payload, content_type FROM outbox_events WHERE id = $1")
        .bind(id.as_uuid())
        .fetch_optional(pool)
        .await?)
}

/// The last `limit` events of entity `key` still in the outbox, in sequence order.
///
/// # Errors
/// A database error.
pub async fn entity_events(pool: &PgPool, key: &str, limit: i64) -> Result<Vec<EventRecord>> {
    let rows: Vec<RecordRow> = sqlx::query_as(BY_ENTITY).bind(key).bind(limit).fetch_all(pool).await?;
    rows.into_iter().map(EventRecord::try_from).collect()
}
