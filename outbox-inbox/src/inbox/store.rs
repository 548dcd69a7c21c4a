//! The inbox's SQL. Every statement is served by a primary key, `inbox_events_parked` or
//! `inbox_events_entity_seq`.
//!
//! An entity's last applied sequence is the greater of its row in `inbox_entities` (a floor: where
//! it started, where an operator moved it past a gap, what retention deleted) and its last
//! processed event. Applying an event writes only the event's row: a row of `inbox_entities`
//! updated per event would grow a chain of versions that vacuum cannot remove while another
//! session holds an old snapshot.

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use outbox_types::{Entity, Event, EventId, Headers, Payload, PayloadCipher};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::{Error, Result};

/// Whose rows a statement touches, and how it is sent: named and prepared once per connection
/// (`persistent`), or unnamed, as a pooler in transaction mode needs (see
/// `InboxLayer::persistent_statements`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub(crate) consumer: &'a str,
    pub(crate) persistent: bool,
}

impl<'a> Scope<'a> {
    /// `consumer`'s rows, with named statements: for the operator's requests, which connect
    /// directly.
    pub(crate) fn direct(consumer: &'a str) -> Self {
        Self { consumer, persistent: true }
    }
}

/// Locks the entity for this consumer (creating it at `initial`) and returns its last applied
/// sequence (`inbox_lock_entity`: an advisory lock, then a read with a fresh snapshot). Held until
/// the transaction ends, so deliveries of one entity are handled one at a time, across every
/// process of the consumer.
pub(crate) async fn lock_entity(conn: &mut PgConnection, scope: Scope<'_>, key: &str, initial: i64) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT inbox_lock_entity($1, $2, $3)")
        .persistent(scope.persistent)
        .bind(scope.consumer)
        .bind(key)
        .bind(initial)
        .fetch_one(conn)
        .await?)
}

/// Moves the entity (locked by [`lock_entity`]) to `seq`; returns whether its next event is
/// parked, waiting to be applied. Nothing can park for the entity while its row is locked, and
/// anything parked before was committed before the lock was taken, so `false` is final: the caller
/// need not look for parked successors (the sweeper covers a crash in between).
pub(crate) async fn advance(conn: &mut PgConnection, scope: Scope<'_>, key: &str, seq: i64) -> Result<bool> {
    Ok(!advance_batch(conn, scope, &[key], &[seq]).await?.is_empty())
}

fn seq_of(event: &Event) -> Option<i64> {
    event.entity.as_ref().map(|e| i64::try_from(e.seq).unwrap_or(i64::MAX))
}

/// Admits a delivery in one statement: locks its entity's row as [`lock_entity`] does (creating
/// it at `initial`), and records the event as processed unless the consumer has seen its id.
/// Returns the entity's last applied sequence and whether the event id is new.
pub(crate) async fn admit(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    event: &Event,
    initial: i64,
) -> Result<(Option<i64>, bool)> {
    let admitted = admit_batch(conn, scope, std::slice::from_ref(event), &[initial]).await?;
    admitted.into_iter().next().ok_or(Error::Database(sqlx::Error::RowNotFound))
}

/// [`admit`] for a batch of events with distinct ids and distinct entities, in one statement:
/// for each event, in order, its entity's last applied sequence (`None` for an unordered event)
/// and whether its id is new. The entities are locked first, in the order of their lock keys (the
/// hash `inbox_lock_entity` locks, then the key), so that two batches (or a batch and a single
/// delivery) never wait for each other in a cycle, even where two keys share a hash; only then are
/// the ids recorded.
pub(crate) async fn admit_batch(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    events: &[Event],
    initial: &[i64],
) -> Result<Vec<(Option<i64>, bool)>> {
    let ids: Vec<Uuid> = events.iter().map(|e| *e.id.as_uuid()).collect();
    let keys: Vec<Option<&str>> = events.iter().map(|e| e.entity.as_ref().map(|e| e.key.as_str())).collect();
    let seqs: Vec<Option<i64>> = events.iter().map(seq_of).collect();
    let rows = sqlx::query(
        "WITH input AS (
             SELECT * FROM unnest($2::uuid[], $3::text[], $4::int8[], $5::int8[]) WITH ORDINALITY
                 AS i(event_id, entity_key, seq, initial, n)
         ), entity AS (
             SELECT i.entity_key, inbox_lock_entity($1, i.entity_key, i.initial) AS last_seq
             FROM input i WHERE i.entity_key IS NOT NULL
             ORDER BY hashtext($1 || '/' || i.entity_key), i.entity_key COLLATE \"C\"
         ), seen AS (
             INSERT INTO inbox_events (consumer, event_id, entity_key, seq, status, attempts, processed_at)
             SELECT $1, i.event_id, i.entity_key, i.seq, 'processed', 1, now() FROM input i
             WHERE (SELECT count(*) FROM entity) >= 0
             ON CONFLICT (consumer, event_id) DO NOTHING RETURNING event_id
         )
         SELECT e.last_seq, s.event_id IS NOT NULL AS fresh
         FROM input i
         LEFT JOIN entity e ON e.entity_key = i.entity_key
         LEFT JOIN seen s ON s.event_id = i.event_id
         ORDER BY i.n",
    )
    .persistent(scope.persistent)
    .bind(scope.consumer)
    .bind(&ids)
    .bind(&keys)
    .bind(&seqs)
    .bind(initial)
    .fetch_all(conn)
    .await?;
    rows.iter().map(|r| Ok((r.try_get("last_seq")?, r.try_get("fresh")?))).collect()
}

/// [`advance`] for several entities (each once) in one statement; returns the keys of those whose
/// next event is parked (read under the entities' locks, as in [`advance`]).
///
/// An entity whose event at `seq` is processed is there already, and its row is not written (the
/// usual case: the event just applied; looked up per entity through `inbox_events_entity_seq`, as a
/// scalar subquery that no plan turns into a join over every row of the consumer). Only a move
/// past events that were not applied (an
/// operator skipping a gap or a failed event) raises the entity's floor. The entities are locked,
/// so each row exists: the update is written as an upsert because `ON CONFLICT` always finds its
/// row through the primary key. An `UPDATE` joined with the array gets its plan from the table's
/// statistics, and the generic plan a prepared statement keeps may be one made while the table
/// was nearly empty, which reads every entity of the consumer per batch.
pub(crate) async fn advance_batch(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    keys: &[&str],
    seqs: &[i64],
) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "WITH input AS (
             SELECT * FROM unnest($2::text[], $3::int8[]) AS i(entity_key, seq)
         ), moved AS (
             INSERT INTO inbox_entities AS e (consumer, entity_key, last_seq)
             SELECT $1, i.entity_key, i.seq FROM input i
             WHERE (SELECT a.seq FROM inbox_events a
                    WHERE a.consumer = $1 AND a.entity_key = i.entity_key AND a.seq = i.seq
                      AND (a.status || '') = 'processed' LIMIT 1) IS NULL
             ON CONFLICT (consumer, entity_key) DO UPDATE SET last_seq = greatest(e.last_seq, EXCLUDED.last_seq),
                                                             updated_at = now()
         )
         SELECT m.entity_key FROM input m
         WHERE (SELECT EXISTS (SELECT 1 FROM inbox_events p
                               WHERE p.consumer = $1 AND p.entity_key = m.entity_key AND p.seq = m.seq + 1
                                 AND p.status = 'parked'))",
    )
    .persistent(scope.persistent)
    .bind(scope.consumer)
    .bind(keys)
    .bind(seqs)
    .fetch_all(conn)
    .await?)
}

pub(crate) async fn mark_stale(conn: &mut PgConnection, scope: Scope<'_>, id: EventId, last: i64) -> Result<()> {
    sqlx::query("UPDATE inbox_events SET status = 'skipped', last_error = $3 WHERE consumer = $1 AND event_id = $2")
        .persistent(scope.persistent)
        .bind(scope.consumer)
        .bind(id.as_uuid())
        .bind(format!("stale: the entity was already at sequence {last}"))
        .execute(conn)
        .await?;
    Ok(())
}

fn headers_json(event: &Event) -> serde_json::Value {
    let mut headers = event.headers.clone();
    if let Some(tp) = &event.traceparent {
        headers
            .insert(outbox_types::wire::HEADER_TRACEPARENT.to_owned(), outbox_types::HeaderValue::String(tp.clone()));
    }
    serde_json::to_value(&headers).unwrap_or(serde_json::Value::Null)
}

/// Stores the event's content with `status` (`parked` or `failed`), inserting or updating its row.
/// A `failed` write replaces only a parked or failed row: an event whose transaction committed
/// (`processed`, or `skipped`) keeps its row, which is its entity's position, whatever a caller
/// that lost the answer of that commit believes. A `parked` write replaces the `processed` row
/// the admission inserted in the same transaction.
pub(crate) async fn store_content(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    event: &Event,
    status: &str,
    error: Option<&str>,
    cipher: Option<&PayloadCipher>,
) -> Result<()> {
    let (payload, key_id) = match cipher {
        Some(cipher) => {
            let (key_id, sealed) = cipher
                .seal(event.id, event.payload.bytes())
                .map_err(|_| Error::Config("the payload cipher has no key for its current key id"))?;
            (std::borrow::Cow::Owned(sealed), Some(key_id))
        }
        None => (std::borrow::Cow::Borrowed(event.payload.bytes()), None),
    };
    sqlx::query(
        "INSERT INTO inbox_events (consumer, event_id, entity_key, seq, status, attempts, last_error, event_type,
                                   event_version, content_type, payload, headers, correlation_id, causation_id, created_at,
                                   payload_key_id)
         VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
         ON CONFLICT (consumer, event_id) DO UPDATE SET
             status = EXCLUDED.status, last_error = EXCLUDED.last_error, processed_at = NULL,
             attempts = inbox_events.attempts + 1, event_type = EXCLUDED.event_type,
             event_version = EXCLUDED.event_version, content_type = EXCLUDED.content_type,
             payload = EXCLUDED.payload, headers = EXCLUDED.headers, correlation_id = EXCLUDED.correlation_id,
             causation_id = EXCLUDED.causation_id, created_at = EXCLUDED.created_at,
             payload_key_id = EXCLUDED.payload_key_id
         WHERE EXCLUDED.status = 'parked' OR inbox_events.status IN ('parked', 'failed')",
    )
    .persistent(scope.persistent).bind(scope.consumer)
    .bind(event.id.as_uuid())
    .bind(event.entity.as_ref().map(|e| e.key.as_str()))
    .bind(seq_of(event))
    .bind(status)
    .bind(error)
    .bind(&event.event_type)
    .bind(i64::from(event.event_version))
    .bind(event.payload.content_type())
    .bind(payload.as_ref())
    .bind(headers_json(event))
    .bind(event.correlation_id.as_deref())
    .bind(event.causation_id.as_deref())
    .bind(DateTime::<Utc>::from(event.created_at))
    .bind(key_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks a stored event processed and drops its content (payloads are kept only while needed).
pub(crate) async fn mark_processed(conn: &mut PgConnection, scope: Scope<'_>, id: EventId) -> Result<()> {
    sqlx::query(
        "UPDATE inbox_events SET status = 'processed', processed_at = now(), last_error = NULL, payload = NULL,
                headers = NULL, event_type = NULL, event_version = NULL, content_type = NULL,
                correlation_id = NULL, causation_id = NULL, created_at = NULL, payload_key_id = NULL
         WHERE consumer = $1 AND event_id = $2",
    )
    .persistent(scope.persistent)
    .bind(scope.consumer)
    .bind(id.as_uuid())
    .execute(conn)
    .await?;
    Ok(())
}

/// What reading a stored event does with a sealed payload.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Opening<'a> {
    /// Opens it for the handler with this cipher; without one (or if it does not open) the row
    /// is corrupt.
    With(Option<&'a PayloadCipher>),
    /// Leaves it sealed: the reader (an operator's request) never hands the payload on.
    Keep,
}

/// The stored payload, opened as `opening` says.
fn stored_payload(row: &sqlx::postgres::PgRow, id: Uuid, opening: Opening<'_>) -> Result<Vec<u8>> {
    let stored = row.try_get::<Option<Vec<u8>>, _>("payload")?.ok_or(Error::CorruptRow(id, "no payload"))?;
    let key_id: Option<String> = row.try_get("payload_key_id")?;
    match (key_id, opening) {
        (None, _) | (Some(_), Opening::Keep) => Ok(stored),
        (Some(_), Opening::With(None)) => Err(Error::CorruptRow(id, "a sealed payload and no payload keys")),
        (Some(key_id), Opening::With(Some(cipher))) => cipher
            .open(EventId::from_uuid(id), &key_id, &stored)
            .map_err(|_| Error::CorruptRow(id, "a sealed payload that does not open with the payload keys")),
    }
}

fn event_from_row(row: &sqlx::postgres::PgRow, opening: Opening<'_>) -> Result<Event> {
    let id: Uuid = row.try_get("event_id")?;
    let corrupt = |what| Error::CorruptRow(id, what);
    let key: Option<String> = row.try_get("entity_key")?;
    let seq: Option<i64> = row.try_get("seq")?;
    let headers: Option<serde_json::Value> = row.try_get("headers")?;
    let mut headers: Headers = match headers {
        Some(v) => serde_json::from_value(v).map_err(|_| corrupt("headers"))?,
        None => Headers::new(),
    };
    let traceparent = match headers.remove(outbox_types::wire::HEADER_TRACEPARENT) {
        Some(outbox_types::HeaderValue::String(s)) => Some(s),
        _ => None,
    };
    let version: Option<i64> = row.try_get("event_version")?;
    let created: Option<DateTime<Utc>> = row.try_get("created_at")?;
    let event_type = row.try_get::<Option<String>, _>("event_type")?.ok_or_else(|| corrupt("no event type"))?;
    let payload = Payload::new(
        stored_payload(row, id, opening)?,
        row.try_get::<Option<String>, _>("content_type")?.ok_or_else(|| corrupt("no content type"))?,
    );
    let created_at = created.map(SystemTime::from).ok_or_else(|| corrupt("no creation time"))?;
    let mut event = Event::new(EventId::from_uuid(id), event_type, payload, created_at);
    event.event_version = version.and_then(|v| u32::try_from(v).ok()).ok_or_else(|| corrupt("event version"))?;
    event.entity = match (key, seq) {
        (Some(key), Some(seq)) => Some(Entity { key, seq: u64::try_from(seq).map_err(|_| corrupt("sequence"))? }),
        _ => None,
    };
    event.correlation_id = row.try_get("correlation_id")?;
    event.causation_id = row.try_get("causation_id")?;
    event.traceparent = traceparent;
    event.headers = headers;
    Ok(event)
}

const STORED_COLUMNS: &str = "event_id, entity_key, seq, event_type, event_version, content_type, payload, headers, \
                              correlation_id, causation_id, created_at, payload_key_id";

/// The parked event that is next for the entity, locked.
pub(crate) async fn parked_at(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    key: &str,
    seq: i64,
    cipher: Option<&PayloadCipher>,
) -> Result<Option<Event>> {
    let sql = format!(
        "SELECT {STORED_COLUMNS} FROM inbox_events
         WHERE consumer = $1 AND entity_key = $2 AND seq = $3 AND status = 'parked' FOR UPDATE"
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .persistent(scope.persistent)
        .bind(scope.consumer)
        .bind(key)
        .bind(seq)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(|row| event_from_row(row, Opening::With(cipher))).transpose()
}

/// A stored (failed or parked) event by id.
pub(crate) async fn stored(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    id: EventId,
    opening: Opening<'_>,
) -> Result<Option<(String, Event)>> {
    let sql = format!(
        "SELECT status, {STORED_COLUMNS} FROM inbox_events
         WHERE consumer = $1 AND event_id = $2 AND status IN ('parked', 'failed') FOR UPDATE"
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .persistent(scope.persistent)
        .bind(scope.consumer)
        .bind(id.as_uuid())
        .fetch_optional(conn)
        .await?;
    match row {
        Some(r) => Ok(Some((r.try_get("status")?, event_from_row(&r, opening)?))),
        None => Ok(None),
    }
}

/// Entities whose next event is parked (ready to be applied), for the sweeper.
pub(crate) async fn ready_entities(conn: &mut PgConnection, scope: Scope<'_>, limit: i64) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT p.entity_key FROM inbox_events p
         JOIN inbox_entities e ON e.consumer = p.consumer AND e.entity_key = p.entity_key
         WHERE p.consumer = $1 AND p.status = 'parked'
           AND p.seq = greatest(e.last_seq, (SELECT max(a.seq) FROM inbox_events a
                                             WHERE a.consumer = p.consumer AND a.entity_key = p.entity_key
                                               AND (a.status || '') = 'processed')) + 1
         LIMIT $2",
    )
    .persistent(scope.persistent)
    .bind(scope.consumer)
    .bind(limit)
    .fetch_all(conn)
    .await?)
}
