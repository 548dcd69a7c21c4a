//! The rows a job sends next: after its cursor, in its order, published before the job was created
//! (a row published later went to every bound queue as live traffic). Events of an entity come by
//! `(entity_key, seq)` on the unique index that backs the sequences, so an entity's events go in
//! sequence order and each batch starts where the last ended; then events of no entity by id, on
//! `outbox_events_unordered`. Sorting is off for the statement's transaction: otherwise, with a table whose
//! statistics lag behind (a backlog just published), the planner may read every published row
//! through another index and sort them for each batch, and a job costs the square of its size.

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, QueryBuilder};
use uuid::Uuid;

use super::job::{Cursor, ReplayJob};
use crate::Result;

/// The columns of `outbox_events` each row carries: what the relay decodes an event from (as its
/// claim returns them), and `scrubbed`, whether retention cleared the payload.
const SELECT: &str = "SELECT e.id, e.event_type, e.event_version, e.entity_key, e.seq, e.payload, \
     e.content_type, e.headers, e.correlation_id, e.causation_id, e.traceparent, e.created_at, e.attempts, \
     e.ctid::text AS tid, e.payload_key_id, \
     e.payload_scrubbed_at IS NOT NULL AS scrubbed \
     FROM outbox_events e WHERE e.status = 'published' AND e.position <= ";

/// Up to `limit` rows of `job` after `cursor`, in the job's order, for the relay's decoding. An
/// empty answer ends the cursor's part (entities, then events of no entity). Run it in a
/// transaction of its own: it turns sorting off until the transaction ends, so that the rows come
/// by index in the job's order (each batch reads about `limit` rows, whatever the table's size).
///
/// # Errors
/// The database's.
pub async fn next_rows(tx: &mut PgConnection, job: &ReplayJob, cursor: &Cursor, limit: i64) -> Result<Vec<PgRow>> {
    sqlx::query("SET LOCAL enable_sort = off").execute(&mut *tx).await?;
    let mut query = QueryBuilder::new(SELECT);
    query.push_bind(job.up_to_position).push(" AND e.published_at <= ").push_bind(job.created_at);
    job.selection.push_conditions(&mut query);
    match cursor {
        Cursor::Start => {
            query.push(" AND e.entity_key IS NOT NULL ORDER BY e.entity_key, e.seq");
        }
        Cursor::Entity { key, seq } => {
            query.push(" AND e.entity_key IS NOT NULL AND (e.entity_key, e.seq) > (").push_bind(key.clone());
            query.push(", ").push_bind(*seq).push(") ORDER BY e.entity_key, e.seq");
        }
        Cursor::Unordered(after) => {
            query.push(" AND e.entity_key IS NULL AND e.id > ").push_bind(*after).push(" ORDER BY e.id");
        }
    }
    query.push(" LIMIT ").push_bind(limit);
    Ok(query.build().fetch_all(&mut *tx).await?)
}

/// The cursor that starts the part of events of no entity.
pub fn unordered_start() -> Cursor {
    Cursor::Unordered(Uuid::nil())
}
