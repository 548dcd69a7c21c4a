//! Idempotent enqueue: an event's key goes into `outbox_idempotency_keys` in the statement that
//! writes the event, and a key already there (same event type, not expired) makes the statement
//! write nothing. Why in one statement: a key taken and an event not written (or the other way
//! round) cannot happen, and the keyed enqueue keeps its single round trip.

use std::collections::HashSet;
use std::time::Duration;

use outbox_types::{EventError, EventId, NewEvent};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{Error, Result};

/// Takes the key (`$2` the type, `$1` the event id; the key and the window in seconds follow the
/// event's own parameters): inserted, or an expired key taken over; a live key returns no row.
macro_rules! take_key {
    ($key:literal, $window:literal) => {
        concat!(
            "WITH key AS (
    INSERT INTO outbox_idempotency_keys AS k (event_type, idempotency_key, event_id, expires_at)
    VALUES ($2, ",
            $key,
            ", $1, now() + make_interval(secs => ",
            $window,
            "))
    ON CONFLICT (event_type, idempotency_key) DO UPDATE
        SET event_id = EXCLUDED.event_id, expires_at = EXCLUDED.expires_at
        WHERE k.expires_at <= now()
    RETURNING 1
)"
        )
    };
}

/// An unordered event with a key (`$10`), a window (`$11`) and its payload's key id (`$12`):
/// written only if the key was taken.
pub(crate) const KEYED_UNORDERED: &str = concat!(
    take_key!("$10", "$11"),
    "
INSERT INTO outbox_events
    (id, event_type, event_version, payload, content_type, headers, correlation_id, causation_id, traceparent,
     payload_key_id)
SELECT $1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $12 FROM key"
);

/// An ordered event (entity `$10`) with a key (`$11`), a window (`$12`) and its payload's key id
/// (`$13`): the entity's next sequence is taken, and the event written, only if the key was taken,
/// so a refused key leaves no gap.
pub(crate) const KEYED_ORDERED: &str = concat!(
    take_key!("$11", "$12"),
    "
INSERT INTO outbox_events
    (id, event_type, event_version, payload, content_type, headers, correlation_id, causation_id, traceparent,
     entity_key, seq, payload_key_id)
SELECT $1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, outbox_next_seq($10), $13 FROM key"
);

/// The event that holds a live key.
const EXISTING: &str = "\
SELECT event_id FROM outbox_idempotency_keys WHERE event_type = $1 AND idempotency_key = $2";

/// A batch's keys, taken in key order (two batches never wait on each other in a cycle); returns
/// the events whose keys were taken.
const TAKE_MANY: &str = "\
INSERT INTO outbox_idempotency_keys AS k (event_type, idempotency_key, event_id, expires_at)
SELECT t, key, id, now() + make_interval(secs => $4)
FROM UNNEST($1::text[], $2::text[], $3::uuid[]) AS u(t, key, id)
ORDER BY t, key
ON CONFLICT (event_type, idempotency_key) DO UPDATE
    SET event_id = EXCLUDED.event_id, expires_at = EXCLUDED.expires_at
    WHERE k.expires_at <= now()
RETURNING event_id";

/// Gives back the keys a refused batch took, through the primary key: of the batch's keys, those
/// naming its own fresh event ids (this transaction's uncommitted rows, held by no one else).
const GIVE_BACK: &str = "\
DELETE FROM outbox_idempotency_keys k
USING UNNEST($1::text[], $2::text[], $3::uuid[]) AS u(t, key, id)
WHERE k.event_type = u.t AND k.idempotency_key = u.key AND k.event_id = u.id";

/// The id of the event that holds the live key `key` of `event_type`.
pub(crate) async fn existing(
    conn: &mut PgConnection,
    event_type: &str,
    key: &str,
    persistent: bool,
) -> Result<EventId> {
    let id: Uuid =
        sqlx::query_scalar(EXISTING).persistent(persistent).bind(event_type).bind(key).fetch_one(conn).await?;
    Ok(EventId::from_uuid(id))
}

/// Refuses a batch in which two events share a type and a key.
pub(crate) fn check_batch(events: &[NewEvent]) -> Result<()> {
    let mut seen = HashSet::new();
    for (index, event) in events.iter().enumerate() {
        if let Some(key) = event.event_idempotency_key()
            && !seen.insert((event.event_type(), key))
        {
            return Err(Error::InvalidBatchEvent { index, source: EventError::RepeatedIdempotencyKey });
        }
    }
    Ok(())
}

/// Takes the keys of a batch's keyed events. If any is live, gives back those taken and answers
/// with the first refused event. `persistent`: whether the statements are named (see
/// `OutboxBuilder::persistent_statements`).
pub(crate) async fn take_batch_keys(
    conn: &mut PgConnection,
    events: &[NewEvent],
    window: Duration,
    persistent: bool,
) -> Result<()> {
    let keyed: Vec<(usize, &NewEvent)> =
        events.iter().enumerate().filter(|(_, e)| e.event_idempotency_key().is_some()).collect();
    if keyed.is_empty() {
        return Ok(());
    }
    let types: Vec<&str> = keyed.iter().map(|(_, e)| e.event_type()).collect();
    let keys: Vec<&str> = keyed.iter().map(|(_, e)| e.event_idempotency_key().unwrap_or_default()).collect();
    let ids: Vec<Uuid> = keyed.iter().map(|(_, e)| *e.event_id().as_uuid()).collect();
    let taken: Vec<Uuid> = sqlx::query_scalar(TAKE_MANY)
        .persistent(persistent)
        .bind(&types)
        .bind(&keys)
        .bind(&ids)
        .bind(window.as_secs_f64())
        .fetch_all(&mut *conn)
        .await?;
    if taken.len() == keyed.len() {
        return Ok(());
    }
    sqlx::query(GIVE_BACK).persistent(persistent).bind(&types).bind(&keys).bind(&ids).execute(&mut *conn).await?;
    let taken: HashSet<Uuid> = taken.into_iter().collect();
    let (index, refused) =
        keyed.iter().find(|(_, e)| !taken.contains(e.event_id().as_uuid())).copied().unwrap_or(keyed[0]);
    let key = refused.event_idempotency_key().unwrap_or_default();
    let event_id = existing(conn, refused.event_type(), key, persistent).await?;
    Err(Error::AlreadyEnqueued { event_id, index: Some(index) })
}
