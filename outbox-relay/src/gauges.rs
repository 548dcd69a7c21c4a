//! The backlog as gauges: what waits, what is held behind a quarantined event, how old the oldest
//! of each is, and what is quarantined by kind. One periodic query per relay, served by the
//! partial indexes of pending, held and quarantined rows: its cost follows the backlog up to a cap,
//! never the table's history.

use std::time::Duration;

use sqlx::PgPool;

/// Waiting rows counted one by one at most; beyond, the count is estimated from queue positions.
pub(crate) const EXACT_UP_TO: i64 = 100_000;

/// The status names are written out so that the partial indexes' predicates match.
const BACKLOG: &str = "\
WITH head AS (
    SELECT position FROM outbox_events WHERE status = 'pending' ORDER BY position LIMIT $1
), held AS (
    SELECT created_at FROM outbox_events
    WHERE status = 'pending' AND next_attempt_at = 'infinity' LIMIT $1
)
SELECT (SELECT count(*) FROM head),
       (SELECT max(position) FROM head),
       (SELECT max(position) FROM outbox_events WHERE status = 'pending'),
       (SELECT EXTRACT(EPOCH FROM now() - created_at)::float8 FROM outbox_events
        WHERE status = 'pending' ORDER BY position LIMIT 1),
       (SELECT count(*) FROM held),
       (SELECT EXTRACT(EPOCH FROM now() - min(created_at))::float8 FROM held)";

const QUARANTINED: &str = "\
SELECT COALESCE(last_error_kind, 'unknown'), count(*) FROM outbox_events
WHERE status = 'quarantined' GROUP BY 1";

/// The backlog at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Backlog {
    /// Rows waiting to be published (held ones included): exact up to [`EXACT_UP_TO`].
    pub(crate) waiting: i64,
    /// Of those, rows held behind a quarantined event of their entity.
    pub(crate) held: i64,
    /// Age of the oldest waiting row (zero when none waits).
    pub(crate) oldest_waiting: Duration,
    /// Age of the oldest held row (zero when none is held).
    pub(crate) oldest_held: Duration,
    /// Quarantined rows by failure kind.
    pub(crate) quarantined: Vec<(String, i64)>,
}

type Row = (i64, Option<i64>, Option<i64>, Option<f64>, i64, Option<f64>);

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

/// Reads the backlog.
pub(crate) async fn read(pool: &PgPool) -> Result<Backlog, sqlx::Error> {
    let (counted, counted_to, last, oldest, held, oldest_held): Row =
        sqlx::query_as(BACKLOG).bind(EXACT_UP_TO).fetch_one(pool).await?;
    let quarantined = sqlx::query_as(QUARANTINED).fetch_all(pool).await?;
    Ok(Backlog {
        waiting: waiting(counted, counted_to, last, EXACT_UP_TO),
        held,
        oldest_waiting: age(oldest),
        oldest_held: age(oldest_held),
        quarantined,
    })
}

/// Sets the gauges to `backlog`; kinds seen before and gone now are set to zero.
pub(crate) fn record(backlog: &Backlog, kinds_seen: &mut Vec<String>) {
    use crate::metrics as m;
    metrics::gauge!(m::WAITING).set(backlog.waiting as f64);
    metrics::gauge!(m::HELD).set(backlog.held as f64);
    metrics::gauge!(m::OLDEST_WAITING).set(backlog.oldest_waiting.as_secs_f64());
    metrics::gauge!(m::OLDEST_HELD).set(backlog.oldest_held.as_secs_f64());
    for kind in kinds_seen.iter() {
        if !backlog.quarantined.iter().any(|(k, _)| k == kind) {
            metrics::gauge!(m::QUARANTINED_NOW, "kind" => kind.clone()).set(0.0);
        }
    }
    for (kind, n) in &backlog.quarantined {
        metrics::gauge!(m::QUARANTINED_NOW, "kind" => kind.clone()).set(*n as f64);
        if !kinds_seen.contains(kind) {
            kinds_seen.push(kind.clone());
        }
    }
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
