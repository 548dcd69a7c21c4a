//! What a selection holds, before anything is sent (`outbox replay start --dry-run`, and the
//! record of a new job): the events it would send, by type and by entity; and what it cannot send,
//! said rather than skipped in silence: events not published (yet), payloads scrubbed, payloads
//! sealed (whose keys the runner must hold), and entities whose history no longer starts at
//! sequence 1 because retention deleted their first events.

use std::collections::BTreeMap;

use sqlx::{PgPool, QueryBuilder, Row};

use super::selection::ReplaySelection;
use crate::Result;

/// What a selection holds now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Survey {
    /// Events a replay would send (published, payload kept).
    pub total: u64,
    /// Those events by type, sorted by type.
    pub by_type: Vec<(String, u64)>,
    /// Those events by entity, sorted by key (events of no entity are not listed here).
    pub by_entity: Vec<(String, u64)>,
    /// Those events that belong to no entity.
    pub unordered: u64,
    /// Those events whose payload is sealed, by key id: the process sending them must hold these
    /// keys (unless it forwards them sealed, end to end).
    pub sealed: Vec<(String, u64)>,
    /// Published events whose payload retention has scrubbed: they cannot be replayed.
    pub scrubbed: u64,
    /// Selected events not published: waiting or held (the relay sends them), quarantined (an
    /// operator's retry does), skipped by an operator (never sent).
    pub waiting: u64,
    /// See `waiting`.
    pub quarantined: u64,
    /// See `waiting`.
    pub skipped: u64,
    /// Entities whose first selected event is their first remaining one and is not sequence 1:
    /// retention deleted the events before it. A consumer that starts each entity from sequence 1
    /// (`StartPolicy::FromFirst`) will park these entities' events until an operator skips the
    /// gap. Each with the first sequence the replay can send.
    pub cut_histories: Vec<(String, i64)>,
}

impl Survey {
    /// Whether something selected cannot be sent as asked (scrubbed payloads or cut histories).
    pub fn is_incomplete(&self) -> bool {
        self.scrubbed > 0 || !self.cut_histories.is_empty()
    }
}

/// The last position drawn for `outbox_events` (0 before the first): rows enqueued later are not
/// part of a job created now.
pub(crate) async fn last_position(pool: &PgPool) -> Result<i64> {
    let last: Option<i64> =
        sqlx::query_scalar("SELECT pg_sequence_last_value(pg_get_serial_sequence('outbox_events', 'position'))")
            .fetch_one(pool)
            .await?;
    Ok(last.unwrap_or(0))
}

/// What `selection` holds now (a dry run).
///
/// # Errors
/// The database's.
pub async fn survey(pool: &PgPool, selection: &ReplaySelection) -> Result<Survey> {
    let up_to = last_position(pool).await?;
    survey_up_to(pool, selection, up_to).await
}

/// What `selection` holds among the rows positioned up to `up_to`.
pub(crate) async fn survey_up_to(pool: &PgPool, selection: &ReplaySelection, up_to: i64) -> Result<Survey> {
    let mut survey = Survey::default();
    count_groups(pool, selection, up_to, &mut survey).await?;
    survey.cut_histories = cut_histories(pool, selection, up_to).await?;
    Ok(survey)
}

/// One pass over the selected rows, grouped by what the survey tells apart.
async fn count_groups(pool: &PgPool, selection: &ReplaySelection, up_to: i64, survey: &mut Survey) -> Result<()> {
    let mut query = QueryBuilder::new(
        "SELECT e.event_type, e.entity_key, e.status, e.payload_scrubbed_at IS NOT NULL AS scrubbed, \
         e.payload_key_id, count(*) AS n FROM outbox_events e WHERE e.position <= ",
    );
    query.push_bind(up_to);
    selection.push_conditions(&mut query);
    query.push(" GROUP BY 1, 2, 3, 4, 5");
    let (mut types, mut entities, mut keys) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for row in query.build().fetch_all(pool).await? {
        let n = u64::try_from(row.try_get::<i64, _>("n")?).unwrap_or(0);
        let status: String = row.try_get("status")?;
        match status.as_str() {
            "published" if row.try_get::<bool, _>("scrubbed")? => survey.scrubbed += n,
            "published" => {
                survey.total += n;
                *types.entry(row.try_get::<String, _>("event_type")?).or_insert(0) += n;
                match row.try_get::<Option<String>, _>("entity_key")? {
                    Some(key) => *entities.entry(key).or_insert(0) += n,
                    None => survey.unordered += n,
                }
                if let Some(key) = row.try_get::<Option<String>, _>("payload_key_id")? {
                    *keys.entry(key).or_insert(0) += n;
                }
            }
            "quarantined" => survey.quarantined += n,
            "skipped" => survey.skipped += n,
            _ => survey.waiting += n,
        }
    }
    survey.by_type = types.into_iter().collect();
    survey.by_entity = entities.into_iter().collect();
    survey.sealed = keys.into_iter().collect();
    Ok(())
}

/// The selected rows that are their entity's first remaining row without being sequence 1.
async fn cut_histories(pool: &PgPool, selection: &ReplaySelection, up_to: i64) -> Result<Vec<(String, i64)>> {
    let mut query = QueryBuilder::new(
        "SELECT e.entity_key, e.seq FROM outbox_events e \
         WHERE e.entity_key IS NOT NULL AND e.seq > 1 AND e.position <= ",
    );
    query.push_bind(up_to);
    selection.push_conditions(&mut query);
    query.push(
        " AND NOT EXISTS (SELECT 1 FROM outbox_events p WHERE p.entity_key = e.entity_key AND p.seq < e.seq) \
         ORDER BY e.entity_key",
    );
    let rows = query.build().fetch_all(pool).await?;
    rows.iter().map(|r| Ok((r.try_get("entity_key")?, r.try_get("seq")?))).collect()
}
