//! Reading what the reconciliation compares: the business queries, the outbox and its entity
//! counters, and a consumer's inbox and effects, into a [`Snapshot`].

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::rows::{Change, EventRef, InboxRow, OutboxRow};
use crate::{Error, Result};

/// What [`compare`](super::compare) compares: everything read, nothing computed yet.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The business changes.
    pub changes: Vec<Change>,
    /// The outbox rows.
    pub outbox: Vec<OutboxRow>,
    /// The last sequence committed per entity (never reused): of its last event, or the highest
    /// retention deleted (`outbox_entity_sequences`).
    pub counters: HashMap<String, i64>,
    /// Deliveries at the broker, in arrival order, if recorded.
    pub deliveries: Option<Vec<EventRef>>,
    /// The consumer name and its inbox rows, if given.
    pub inbox: Option<(String, Vec<InboxRow>)>,
    /// The event id of every effect row, if an effects query was given.
    pub effects: Option<Vec<Uuid>>,
    /// Whether only changes and events since a time were read (see
    /// [`Reconciliation::since`](super::Reconciliation::since)).
    pub since: bool,
}

/// The business changes: the entity versions queries, then the event ids queries (`since` as `$1`
/// when given).
pub(super) async fn read_changes(
    pool: &PgPool,
    entity_versions: &[String],
    event_ids: &[String],
    since: Option<DateTime<Utc>>,
) -> Result<Vec<Change>> {
    let mut changes = Vec::new();
    for sql in entity_versions {
        for row in fetch(pool, sql, since).await? {
            let key: String = row.try_get(0).map_err(|e| invalid("entity_versions", &e))?;
            let version = int(&row, 1).map_err(|e| invalid("entity_versions", &e))?;
            changes.push(Change::Entity { key, version });
        }
    }
    for sql in event_ids {
        for row in fetch(pool, sql, since).await? {
            changes.push(Change::Event(row.try_get(0).map_err(|e| invalid("event_ids", &e))?));
        }
    }
    Ok(changes)
}

/// Every outbox row (created since `since`, if given), without its payload.
pub(super) async fn read_outbox(pool: &PgPool, since: Option<DateTime<Utc>>) -> Result<Vec<OutboxRow>> {
    type Outbox = (Uuid, Option<String>, Option<i64>, String, i32, Option<String>);
    let rows: Vec<Outbox> = sqlx::query_as(
        "SELECT id, entity_key, seq, status, attempts, last_error_kind FROM outbox_events
         WHERE $1::timestamptz IS NULL OR created_at >= $1",
    )
    .bind(since)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, entity, seq, status, attempts, last_error_kind)| OutboxRow {
            event: EventRef { id, entity, seq },
            status,
            attempts,
            last_error_kind,
        })
        .collect())
}

/// The last sequence committed per entity: of its last event, or the highest retention deleted.
pub(super) async fn read_counters(pool: &PgPool) -> Result<HashMap<String, i64>> {
    let counters: Vec<(String, i64)> = sqlx::query_as(
        "SELECT entity_key, max(seq) FROM (
             SELECT entity_key, seq FROM outbox_events WHERE entity_key IS NOT NULL
             UNION ALL
             SELECT entity_key, last_seq FROM outbox_entity_sequences
         ) s GROUP BY entity_key",
    )
    .fetch_all(pool)
    .await?;
    Ok(counters.into_iter().collect())
}

/// The inbox rows of `consumer`.
pub(super) async fn read_inbox(pool: &PgPool, consumer: &str) -> Result<Vec<InboxRow>> {
    type Inbox = (Uuid, Option<String>, Option<i64>, String);
    let rows: Vec<Inbox> =
        sqlx::query_as("SELECT event_id, entity_key, seq, status FROM inbox_events WHERE consumer = $1")
            .bind(consumer)
            .fetch_all(pool)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(id, entity, seq, status)| InboxRow { event: EventRef { id, entity, seq }, status })
        .collect())
}

/// The event id of every row of the effects query.
pub(super) async fn read_effects(pool: &PgPool, sql: &str) -> Result<Vec<Uuid>> {
    fetch(pool, sql, None)
        .await?
        .iter()
        .map(|r| r.try_get::<Uuid, _>(0).map_err(|e| invalid("effects", &e)))
        .collect::<Result<Vec<Uuid>>>()
}

/// Runs a query the user wrote (an operator's own SQL, run with the operator's privileges), with
/// `since` as `$1` when given.
async fn fetch(pool: &PgPool, sql: &str, since: Option<DateTime<Utc>>) -> Result<Vec<sqlx::postgres::PgRow>> {
    let query = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()));
    let query = match since {
        Some(t) => query.bind(t),
        None => query,
    };
    Ok(query.fetch_all(pool).await?)
}

/// An integer column of any width.
fn int(row: &sqlx::postgres::PgRow, i: usize) -> std::result::Result<i64, sqlx::Error> {
    row.try_get::<i64, _>(i).or_else(|_| row.try_get::<i32, _>(i).map(i64::from))
}

fn invalid(query: &'static str, e: &sqlx::Error) -> Error {
    Error::InvalidQuery { query, reason: e.to_string() }
}
