//! The backlog as the relays' gauges and `outbox status` show it: what waits, what is held behind
//! a quarantined event, how old the oldest of each is, what is quarantined by kind, which entities
//! are behind and by how much, which claims have outlived their lease, and what holds back the
//! database's xmin horizon (the cause of a queue that slows down while vacuum cannot clean it).
//!
//! One statement over the outbox, served by the partial indexes of pending, held and quarantined
//! rows: its cost follows the backlog up to a cap, never the table's history (figures in
//! BENCHMARKS.md); and [`horizon`](crate::horizon()) on the same connection.

use std::time::Duration;

use sqlx::{Acquire, Postgres};

use crate::{Horizon, Result};

/// Waiting rows counted one by one at most; beyond, the count is estimated from queue positions.
pub const EXACT_UP_TO: i64 = 100_000;

/// The waiting rows, from the front of the queue, whose entities, sequences and leases are read:
/// entities behind, the largest gap and expired leases are exact while no more than these wait.
pub const SAMPLED: i64 = 10_000;

/// The status names are written out so that the partial indexes' predicates match. The waiting
/// rows are read from queue position `$3` on (the front of the queue, or a relay's low water), held
/// rows through their own index wherever they are.
const BACKLOG: &str = "\
WITH head AS (
    SELECT count(*) AS n, max(position) AS last FROM (
        SELECT position FROM outbox_events WHERE status = 'pending' AND position >= $3 ORDER BY position LIMIT $1
    ) h
), held AS (
    SELECT count(*) AS n, count(*) FILTER (WHERE position < $3) AS below, min(created_at) AS oldest FROM (
        SELECT position, created_at FROM outbox_events
        WHERE status = 'pending' AND next_attempt_at = 'infinity' LIMIT $1
    ) h
), front AS (
    SELECT entity_key, seq, lease_owner IS NOT NULL AND lease_until <= now() AS expired
    FROM outbox_events WHERE status = 'pending' AND position >= $3 ORDER BY position LIMIT $2
), behind AS (
    SELECT u.entity_key, min(u.seq) AS first FROM (
        SELECT entity_key, seq FROM front
        UNION ALL
        (SELECT entity_key, seq FROM outbox_events WHERE status = 'quarantined' LIMIT $2)
    ) u
    WHERE u.entity_key IS NOT NULL
    GROUP BY u.entity_key
), kinds AS (
    SELECT COALESCE(last_error_kind, 'unknown') AS kind, count(*) AS n FROM outbox_events
    WHERE status = 'quarantined' GROUP BY 1
)
SELECT head.n + held.below, head.last,
       (SELECT max(position) FROM outbox_events WHERE status = 'pending'),
       EXTRACT(EPOCH FROM now() - least(held.oldest, (SELECT created_at FROM outbox_events
        WHERE status = 'pending' AND position >= $3 ORDER BY position LIMIT 1)))::float8,
       held.n, EXTRACT(EPOCH FROM now() - held.oldest)::float8,
       (SELECT count(*) FILTER (WHERE expired) FROM front),
       (SELECT count(*) FROM behind),
       (SELECT COALESCE(max(l.seq - b.first + 1), 0) FROM behind b,
        LATERAL (SELECT max(seq) AS seq FROM outbox_events q WHERE q.entity_key = b.entity_key) l),
       (SELECT COALESCE(array_agg(kind ORDER BY kind), '{}') FROM kinds),
       (SELECT COALESCE(array_agg(n ORDER BY kind), '{}') FROM kinds)
FROM head, held";

/// The backlog at one moment (see [`backlog`]).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Backlog {
    /// Rows waiting to be published, held and claimed ones included: exact up to
    /// [`EXACT_UP_TO`], estimated beyond (see [`Backlog::waiting_exact`]).
    pub waiting: i64,
    /// Whether [`Backlog::waiting`] was counted row by row.
    pub waiting_exact: bool,
    /// Of the waiting rows, those held behind a quarantined event of their entity.
    pub held: i64,
    /// Age of the oldest waiting row (zero when none waits).
    pub oldest_waiting_age: Duration,
    /// Age of the oldest held row (zero when none is held).
    pub oldest_held_age: Duration,
    /// Quarantined rows by failure kind, in kind order.
    pub quarantined: Vec<(String, i64)>,
    /// Rows claimed by a relay whose lease has expired: the relay died or stalls, and another
    /// relay takes them over on its next claim.
    pub expired_leases: i64,
    /// Entities with events written and not yet published (quarantined ones included).
    pub entities_behind: i64,
    /// The largest gap between an entity's last written and last published sequence.
    pub largest_gap: i64,
    /// What holds back the database's xmin horizon: the oldest snapshot another session holds
    /// and the oldest replication slot (see [`horizon`](crate::horizon())).
    pub horizon: Horizon,
}

impl Backlog {
    /// Whether [`Backlog::expired_leases`], [`Backlog::entities_behind`] and
    /// [`Backlog::largest_gap`] are exact: they are read from the first [`SAMPLED`] waiting rows
    /// in queue order, and are lower bounds when more wait.
    pub fn entities_exact(&self) -> bool {
        self.waiting <= SAMPLED
    }
}

type Row = (i64, Option<i64>, Option<i64>, Option<f64>, i64, Option<f64>, i64, i64, i64, Vec<String>, Vec<i64>);

/// Reads the backlog of the outbox.
///
/// Cheap on a big table: every part is read through a partial index and capped (the waiting rows
/// are counted up to [`EXACT_UP_TO`], their entities and leases read in the first [`SAMPLED`]),
/// so it costs milliseconds whatever the number of published rows. The horizon is read on the
/// same connection by a second statement (see [`horizon`](crate::horizon())). The relays read it
/// into their gauges every `gauge_interval`.
///
/// `db` is a pool (`&pool`) or a connection (`&mut conn`).
///
/// # Errors
/// A database error (for example `outbox_events` does not exist: migrations not applied).
pub async fn backlog<'c>(db: impl Acquire<'c, Database = Postgres>) -> Result<Backlog> {
    backlog_from(db, 0).await
}

/// Reads the backlog as [`backlog`] does, of the rows at or after queue position `from` and of
/// every held row: a relay passes its low water (below which no row is due), so that the read
/// walks none of the index entries of rows published before it. While another session holds an
/// old snapshot those entries stay, and a read from the front of the queue walks every row
/// published since the snapshot began. Rows committed late below `from` are counted once the
/// relay has found them and moved its low water back.
///
/// # Errors
/// A database error (for example `outbox_events` does not exist: migrations not applied).
pub async fn backlog_from<'c>(db: impl Acquire<'c, Database = Postgres>, from: i64) -> Result<Backlog> {
    let mut conn = db.acquire().await?;
    let row: Row = sqlx::query_as(BACKLOG).bind(EXACT_UP_TO).bind(SAMPLED).bind(from).fetch_one(&mut *conn).await?;
    let horizon = crate::horizon(&mut *conn).await?;
    let (counted, counted_to, last, oldest, held, oldest_held, expired, behind, gap, kinds, counts) = row;
    Ok(Backlog {
        waiting: waiting(counted, counted_to, last, EXACT_UP_TO),
        waiting_exact: counted < EXACT_UP_TO,
        held,
        oldest_waiting_age: age(oldest),
        oldest_held_age: age(oldest_held),
        quarantined: kinds.into_iter().zip(counts).collect(),
        expired_leases: expired,
        entities_behind: behind,
        largest_gap: gap,
        horizon,
    })
}

/// Waiting rows: exact when fewer than `cap` are counted; beyond, the rows written after the
/// `cap`-th waiting one in queue order are taken as waiting too (in a backlog the relays publish
/// from the front, so few of them are published already).
fn waiting(counted: i64, counted_to: Option<i64>, last: Option<i64>, cap: i64) -> i64 {
    match (counted_to, last) {
        (Some(to), Some(last)) if counted >= cap => counted + (last - to).max(0),
        _ => counted,
    }
}

fn age(seconds: Option<f64>) -> Duration {
    Duration::try_from_secs_f64(seconds.unwrap_or(0.0).max(0.0)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_is_exact_below_the_cap_and_estimated_from_positions_above() {
        assert_eq!(waiting(0, None, None, 100), 0);
        assert_eq!(waiting(42, Some(900), Some(900), 100), 42);
        assert_eq!(waiting(100, Some(1_000), Some(1_000), 100), 100);
        assert_eq!(waiting(100, Some(1_000), Some(5_000), 100), 4_100);
    }

    #[test]
    fn ages_are_never_negative() {
        assert_eq!(age(None), Duration::ZERO);
        assert_eq!(age(Some(-1.0)), Duration::ZERO);
        assert_eq!(age(Some(1.5)), Duration::from_millis(1500));
    }
}
