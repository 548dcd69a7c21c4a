//! What the relays are doing, as `outbox status` shows it: events published in the last minute and
//! the last hour, and the relay instances that hold claims now (rows, lease expiry). Served by the
//! index of published rows (by time) and the queue index of pending rows, each capped, so it stays
//! cheap on a big table.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::Result;

/// Published rows counted one by one at most, per window; beyond, the count is a lower bound.
pub const COUNTED_UP_TO: i64 = 1_000_000;

/// Pending rows, from the front of the queue, whose claims are read.
pub const CLAIMS_SAMPLED: i64 = 100_000;

/// The status names are written out so that the partial indexes' predicates match.
const ACTIVITY: &str = "\
WITH hour AS (
    SELECT published_at FROM outbox_events
    WHERE status IN ('published', 'skipped') AND published_at > now() - interval '1 hour'
    LIMIT $1
)
SELECT (SELECT count(*) FROM hour WHERE published_at > now() - interval '1 minute'),
       (SELECT count(*) FROM hour)";

const CLAIMS: &str = "\
SELECT lease_owner, count(*), min(lease_until), max(lease_until), count(*) FILTER (WHERE lease_until <= now())
FROM (
    SELECT lease_owner, lease_until FROM outbox_events WHERE status = 'pending' ORDER BY position LIMIT $1
) front
WHERE lease_owner IS NOT NULL
GROUP BY lease_owner
ORDER BY lease_owner";

/// Published rows by time window (see [`activity`]).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Activity {
    /// Rows published (or skipped) in the last minute.
    pub published_last_minute: i64,
    /// Rows published (or skipped) in the last hour: at most [`COUNTED_UP_TO`], a lower bound
    /// when it is that.
    pub published_last_hour: i64,
    /// The relays holding claims now, by owner name.
    pub claims: Vec<RelayClaims>,
}

/// The claims one relay instance holds now.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RelayClaims {
    /// The relay's name (`--relay-id`, by default `<host>-<pid>-<random>`).
    pub owner: String,
    /// Rows it holds.
    pub rows: i64,
    /// The earliest and the latest lease expiry of those rows.
    pub lease_until: (DateTime<Utc>, DateTime<Utc>),
    /// Of those rows, the ones whose lease has expired: another relay takes them over.
    pub expired: i64,
}

type ClaimsRow = (String, i64, DateTime<Utc>, DateTime<Utc>, i64);

/// Reads what the relays are doing: published in the last minute and hour, and the claims held
/// (read among the first [`CLAIMS_SAMPLED`] waiting rows in queue order, where relays claim).
///
/// # Errors
/// A database error (for example `outbox_events` does not exist: migrations not applied).
pub async fn activity(conn: &mut PgConnection) -> Result<Activity> {
    let (minute, hour): (i64, i64) = sqlx::query_as(ACTIVITY).bind(COUNTED_UP_TO).fetch_one(&mut *conn).await?;
    let rows: Vec<ClaimsRow> = sqlx::query_as(CLAIMS).bind(CLAIMS_SAMPLED).fetch_all(&mut *conn).await?;
    let claims = rows
        .into_iter()
        .map(|(owner, rows, first, last, expired)| RelayClaims { owner, rows, lease_until: (first, last), expired })
        .collect();
    Ok(Activity { published_last_minute: minute, published_last_hour: hour, claims })
}
