//! Reading what the reconciliation compares: the business queries, the outbox and its entity
//! counters, the recorder's deliveries, and a consumer's inbox and effects.

use std::collections::HashMap;

use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::{Change, EventRef, InboxRow, OutboxRow, Reconciliation};
use crate::{Error, Recorder, Result};

/// What [`compare`](crate::compare) compares: everything read, nothing computed yet.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The business changes.
    pub changes: Vec<Change>,
    /// The outbox rows.
    pub outbox: Vec<OutboxRow>,
    /// `outbox_entity_sequences`: the last sequence committed per entity (never reused).
    pub counters: HashMap<String, i64>,
    /// Deliveries at the broker, in arrival order, if recorded.
    pub deliveries: Option<Vec<EventRef>>,
    /// The consumer name and its inbox rows, if given.
    pub inbox: Option<(String, Vec<InboxRow>)>,
    /// The event id of every effect row, if an effects query was given.
    pub effects: Option<Vec<Uuid>>,
}

impl Reconciliation<'_> {
    /// Reads everything without comparing.
    ///
    /// # Errors
    /// As [`Self::run`].
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let mut snapshot = Snapshot { changes: self.read_changes().await?, ..Snapshot::default() };
        snapshot.outbox = read_outbox(&self.pool).await?;
        snapshot.counters = read_counters(&self.pool).await?;
        snapshot.deliveries = self.recorder.map(deliveries);
        if let Some((pool, consumer)) = &self.inbox {
            snapshot.inbox = Some((consumer.clone(), read_inbox(pool, consumer).await?));
            if let Some(sql) = &self.effects {
                snapshot.effects = Some(read_effects(pool, sql).await?);
            }
        }
        Ok(snapshot)
    }

    /// The business changes: the entity versions queries, then the event ids queries.
    async fn read_changes(&self) -> Result<Vec<Change>> {
        let mut changes = Vec::new();
        for sql in &self.entity_versions {
            for row in fetch(&self.pool, sql).await? {
                let key: String = row.try_get(0).map_err(|e| invalid("entity_versions", &e))?;
                let version = int(&row, 1).map_err(|e| invalid("entity_versions", &e))?;
                changes.push(Change::Entity { key, version });
            }
        }
        for sql in &self.event_ids {
            for row in fetch(&self.pool, sql).await? {
                changes.push(Change::Event(row.try_get(0).map_err(|e| invalid("event_ids", &e))?));
            }
        }
        Ok(changes)
    }
}

/// Every outbox row, without its payload.
async fn read_outbox(pool: &PgPool) -> Result<Vec<OutboxRow>> {
    type Outbox = (Uuid, Option<String>, Option<i64>, String, i32, Option<String>);
    let rows: Vec<Outbox> =
        sqlx::query_as("SELECT id, entity_key, seq, status, attempts, last_error_kind FROM outbox_events")
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

/// The last sequence committed per entity.
async fn read_counters(pool: &PgPool) -> Result<HashMap<String, i64>> {
    let counters: Vec<(String, i64)> =
        sqlx::query_as("SELECT entity_key, last_seq FROM outbox_entity_sequences").fetch_all(pool).await?;
    Ok(counters.into_iter().collect())
}

/// What the recorder saw, in arrival order (deliveries without an event id left out).
fn deliveries(recorder: &Recorder) -> Vec<EventRef> {
    recorder
        .records()
        .into_iter()
        .filter_map(|r| Some(EventRef { id: r.event_id?, entity: r.entity, seq: r.seq }))
        .collect()
}

/// The inbox rows of `consumer`.
async fn read_inbox(pool: &PgPool, consumer: &str) -> Result<Vec<InboxRow>> {
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
async fn read_effects(pool: &PgPool, sql: &str) -> Result<Vec<Uuid>> {
    fetch(pool, sql)
        .await?
        .iter()
        .map(|r| r.try_get::<Uuid, _>(0).map_err(|e| invalid("effects", &e)))
        .collect::<Result<Vec<Uuid>>>()
}

async fn fetch(pool: &PgPool, sql: &str) -> Result<Vec<sqlx::postgres::PgRow>> {
    Ok(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).fetch_all(pool).await?)
}

/// An integer column of any width.
fn int(row: &sqlx::postgres::PgRow, i: usize) -> std::result::Result<i64, sqlx::Error> {
    row.try_get::<i64, _>(i).or_else(|_| row.try_get::<i32, _>(i).map(i64::from))
}

fn invalid(query: &'static str, e: &sqlx::Error) -> Error {
    Error::InvalidQuery { query, reason: e.to_string() }
}
