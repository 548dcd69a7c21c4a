//! What holds back this database's xmin horizon: the oldest snapshot another session holds (a long
//! report, `pg_dump`, a session idle in a transaction, a standby's `hot_standby_feedback`) and
//! the replication slot with the oldest `xmin`. While one is held, vacuum keeps every row version
//! that died after it, so the outbox's published rows stay in its indexes and the claims slow
//! down: the backlog shows the symptom, this shows the cause.
//!
//! One statement over `pg_stat_activity`, `pg_stat_progress_vacuum` and `pg_replication_slots`,
//! whatever the size of the tables. It never reads a session's query text (which can hold
//! payloads) nor its user name.
//!
//! Any role may run it and sees every session's pid, application name and `backend_xmin` (so the
//! age in transactions is always there). A session's state and its start times are shown only to
//! a superuser, to the session's own role and to members of `pg_read_all_stats` (or
//! `pg_monitor`): without that, [`HeldSnapshot::age`] and [`HeldSnapshot::state`] are `None` for
//! other roles' sessions (`migrations/roles.sql` grants `pg_read_all_stats` to the relay).
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_ops::Error> {
//! let horizon = outbox_ops::horizon(&pool).await?;
//! if let Some(s) = &horizon.oldest_snapshot {
//!     println!("pid {} holds a snapshot {} transactions old since {:?}", s.pid, s.xid_age, s.age);
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use sqlx::PgExecutor;

use crate::Result;

/// The oldest snapshot and the oldest slot holding back this database's horizon.
///
/// Sessions count when they are in this database, or in none (a walsender whose standby sends
/// `hot_standby_feedback`): sessions in other databases do not hold back this one's tables. The
/// querying session and sessions running a (lazy) `VACUUM`, which vacuum ignores, do not count.
/// A session holds the horizon with its snapshot (`backend_xmin`) or, once it wrote, with its
/// own transaction id (`backend_xid`): its age in transactions is the older of the two. Every slot
/// of the server counts (slots hold back every database).
///
/// The ages come from `now()`, the start of the reading transaction.
const HORIZON: &str = "\
WITH snapshot AS (
    SELECT pid, application_name, state,
           EXTRACT(EPOCH FROM now() - coalesce(xact_start, query_start, backend_start))::float8 AS age,
           greatest(age(backend_xmin), age(backend_xid))::int8 AS xid_age
    FROM pg_stat_activity
    WHERE (datname = current_database() OR datid IS NULL)
      AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
      AND pid <> pg_backend_pid()
      AND pid NOT IN (SELECT pid FROM pg_stat_progress_vacuum)
    ORDER BY xid_age DESC, age DESC NULLS LAST
    LIMIT 1
), slot AS (
    SELECT slot_name::text AS name, slot_type = 'logical' AS logical,
           age(xmin)::int8 AS xid_age, age(catalog_xmin)::int8 AS catalog_xid_age
    FROM pg_replication_slots
    WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
    ORDER BY age(xmin) DESC NULLS LAST, age(catalog_xmin) DESC NULLS LAST
    LIMIT 1
)
SELECT s.pid, s.application_name, s.state, s.age, s.xid_age,
       l.name, l.logical, l.xid_age, l.catalog_xid_age
FROM (SELECT) one
LEFT JOIN snapshot s ON true
LEFT JOIN slot l ON true";

/// What holds back this database's xmin horizon (see [`horizon`]).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Horizon {
    /// The session whose snapshot (or transaction id) is the oldest, if any holds one.
    pub oldest_snapshot: Option<HeldSnapshot>,
    /// The replication slot with the oldest `xmin` (or, when no slot has one, `catalog_xmin`).
    pub oldest_slot: Option<HeldSlot>,
}

/// A session holding a snapshot: who, and for how long.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HeldSnapshot {
    /// The session's process id: `SELECT pg_terminate_backend(pid)` ends it.
    pub pid: i32,
    /// Its `application_name` (empty when the client set none).
    pub application_name: String,
    /// Its state, for example `idle in transaction`; `None` when hidden from the reading role.
    pub state: Option<String>,
    /// How long it has held the snapshot: since its transaction began (or, for a walsender, its
    /// last query or its start); `None` when hidden from the reading role.
    pub age: Option<Duration>,
    /// How many transactions were started since its snapshot (or its own transaction id).
    pub xid_age: i64,
}

/// A replication slot holding back the horizon. Slots have no timestamp: their age is in
/// transactions.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HeldSlot {
    /// The slot's name: `SELECT pg_drop_replication_slot(name)` drops it.
    pub name: String,
    /// A logical slot (a physical one otherwise).
    pub logical: bool,
    /// Transactions since its `xmin`: it holds back the vacuum of every table, the outbox's
    /// included (a physical slot of a standby with `hot_standby_feedback`). `None` when unset.
    pub xid_age: Option<i64>,
    /// Transactions since its `catalog_xmin`: it holds back the vacuum of the system catalogs only
    /// (a logical slot whose subscriber does not confirm). `None` when unset.
    pub catalog_xid_age: Option<i64>,
}

impl Horizon {
    /// How many transactions the outbox's vacuum is held back by: the larger of the oldest
    /// snapshot's and the oldest slot's `xmin` age (a slot's `catalog_xmin` does not hold back the
    /// outbox); 0 when nothing holds it.
    pub fn xid_age(&self) -> i64 {
        let snapshot = self.oldest_snapshot.as_ref().map_or(0, |s| s.xid_age);
        let slot = self.oldest_slot.as_ref().and_then(|s| s.xid_age).unwrap_or(0);
        snapshot.max(slot)
    }

    /// How long the oldest snapshot has been held; zero when none is, or when its age is hidden
    /// from the reading role.
    pub fn oldest_snapshot_age(&self) -> Duration {
        self.oldest_snapshot.as_ref().and_then(|s| s.age).unwrap_or_default()
    }
}

/// One row of [`HORIZON`]: the snapshot's columns, then the slot's.
type Row = (
    Option<i32>,
    Option<String>,
    Option<String>,
    Option<f64>,
    Option<i64>,
    Option<String>,
    Option<bool>,
    Option<i64>,
    Option<i64>,
);

/// Reads what holds back this database's xmin horizon: the oldest snapshot held by another
/// session of this database (or a walsender), and the oldest replication slot.
///
/// # Errors
/// A database error.
pub async fn horizon(db: impl PgExecutor<'_>) -> Result<Horizon> {
    let row: Row = sqlx::query_as(HORIZON).fetch_one(db).await?;
    Ok(decode(row))
}

/// The [`Horizon`] of a row of [`HORIZON`].
fn decode(row: Row) -> Horizon {
    let (pid, application_name, state, age, xid_age, slot, logical, slot_xid_age, catalog_xid_age) = row;
    let oldest_snapshot = pid.map(|pid| HeldSnapshot {
        pid,
        application_name: application_name.unwrap_or_default(),
        state,
        age: age.map(seconds),
        xid_age: xid_age.unwrap_or(0),
    });
    let oldest_slot =
        slot.map(|name| HeldSlot { name, logical: logical.unwrap_or(false), xid_age: slot_xid_age, catalog_xid_age });
    Horizon { oldest_snapshot, oldest_slot }
}

/// A non-negative duration of `s` seconds (clocks can make a start look later than `now()`).
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(xid_age: i64, age: Option<f64>) -> Row {
        (Some(42), Some("psql".into()), None, age, Some(xid_age), None, None, None, None)
    }

    #[test]
    fn nothing_held_reads_as_zero() {
        let h = decode((None, None, None, None, None, None, None, None, None));
        assert_eq!(h, Horizon::default());
        assert_eq!((h.xid_age(), h.oldest_snapshot_age()), (0, Duration::ZERO));
    }

    #[test]
    fn a_hidden_age_reads_as_zero_seconds_but_keeps_its_transactions() {
        let h = decode(snapshot(1_234, None));
        assert_eq!(h.oldest_snapshot.as_ref().map(|s| (s.pid, s.age)), Some((42, None)));
        assert_eq!((h.xid_age(), h.oldest_snapshot_age()), (1_234, Duration::ZERO));
    }

    #[test]
    fn ages_are_never_negative() {
        assert_eq!(decode(snapshot(1, Some(-0.5))).oldest_snapshot_age(), Duration::ZERO);
        assert_eq!(decode(snapshot(1, Some(90.25))).oldest_snapshot_age(), Duration::from_millis(90_250));
    }

    #[test]
    fn the_horizon_is_the_older_of_snapshot_and_slot_xmin_and_ignores_catalog_xmin() {
        let mut row = snapshot(100, Some(1.0));
        (row.5, row.6, row.7, row.8) = (Some("standby_1".into()), Some(false), Some(500), Some(700));
        assert_eq!(decode(row.clone()).xid_age(), 500);
        (row.5, row.6, row.7, row.8) = (Some("cdc".into()), Some(true), None, Some(9_000));
        let h = decode(row);
        assert_eq!(h.xid_age(), 100, "a logical slot's catalog_xmin does not hold back the outbox");
        assert_eq!(h.oldest_slot.map(|s| (s.logical, s.catalog_xid_age)), Some((true, Some(9_000))));
    }
}
