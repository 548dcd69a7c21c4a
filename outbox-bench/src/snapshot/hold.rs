//! The held snapshot: another session of the benchmark database in a `REPEATABLE READ`
//! transaction that has read `outbox_events` once and then sits idle, as a long report, a
//! `pg_dump` or a forgotten idle-in-transaction session does. Until it commits, vacuum and pruning
//! in that database keep every row version that became dead after its snapshot was taken.

use std::time::Duration;

use outbox_testkit::TestDb;
use sqlx::{Connection as _, PgConnection};
use tokio::time::Instant;

use super::horizon::Horizon;
use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::comment;
use crate::wait::{FLOOR, within};

/// The holder's backend, to check that its snapshot is in force.
const PID: &str = "SELECT pg_backend_pid()";
/// The server's setting would end the idle transaction (and the experiment) early.
const NO_TIMEOUT: &str = "SET idle_in_transaction_session_timeout = 0";
const BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ";
/// The first read of the transaction, which takes its snapshot.
const READ: &str = "SELECT count(*) FROM outbox_events";
/// Whether backend `$1` holds back the database's horizon (its `backend_xmin` is set).
const HOLDS: &str = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND backend_xmin IS NOT NULL)";
const COMMIT: &str = "COMMIT";
/// The age from which a transaction with an xid elsewhere on the server counts as holding vacuum
/// back in a run (the runs' own transactions last milliseconds).
const HELD_BACK: Duration = Duration::from_secs(5);

/// Whether a run has a snapshot held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Snapshot {
    /// Nothing holds vacuum back.
    Free,
    /// A snapshot is held from the start of the run to its end.
    Held,
}

impl Snapshot {
    /// Both, in the order they run: free first.
    pub(super) const BOTH: [Self; 2] = [Self::Free, Self::Held];

    /// As figure names and `#` lines say it: `free`, `held`.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Free => "free",
            Self::Held => "held",
        }
    }
}

/// The session holding the snapshot.
struct Held {
    conn: PgConnection,
    pid: i32,
    since: Instant,
}

impl Held {
    /// Opens a connection of its own to `db`, begins the transaction, reads `outbox_events` and
    /// checks that the server counts the snapshot. Each step may take [`FLOOR`].
    async fn begin(db: &TestDb) -> Result<Self, BoxError> {
        let mut conn =
            within("a connection to hold a snapshot", FLOOR, PgConnection::connect_with(db.connect_options())).await?;
        let began = async {
            let pid: i32 = sqlx::query_scalar(PID).fetch_one(&mut conn).await?;
            sqlx::raw_sql(NO_TIMEOUT).execute(&mut conn).await?;
            sqlx::raw_sql(BEGIN).execute(&mut conn).await?;
            sqlx::query_scalar::<_, i64>(READ).fetch_one(&mut conn).await?;
            Ok::<_, sqlx::Error>(pid)
        };
        let pid = within("the snapshot to be taken", FLOOR, began).await?;
        let held = Self { conn, pid, since: Instant::now() };
        held.check(db, "taken").await?;
        Ok(held)
    }

    /// Fails unless the server still counts the snapshot (`when`: `taken`, `at the end`).
    async fn check(&self, db: &TestDb, when: &str) -> Result<(), BoxError> {
        let holds = sqlx::query_scalar::<_, bool>(HOLDS).bind(self.pid).fetch_one(db.pool());
        if within("the check of the held snapshot", FLOOR, holds).await? {
            Ok(())
        } else {
            Err(format!("the snapshot of backend {} is not in force {when}", self.pid).into())
        }
    }

    /// Checks that the snapshot is still in force, commits and closes the connection; returns how
    /// long it was held. On an error the connection is dropped, which ends the transaction too.
    async fn release(mut self, db: &TestDb) -> Result<Duration, BoxError> {
        let checked = self.check(db, "at the end").await;
        let held = self.since.elapsed();
        within("the held snapshot's transaction to commit", FLOOR, sqlx::raw_sql(COMMIT).execute(&mut self.conn))
            .await?;
        let _ = tokio::time::timeout(FLOOR, self.conn.close()).await;
        checked?;
        Ok(held)
    }
}

/// Runs `phase` in a fresh database ([`with_db`]), with the snapshot held as [`holding`] holds it,
/// while [`Horizon`] watches the server; says in a `#` line how old the oldest transaction with an
/// xid was, and whether it held vacuum back in this run (`label`) too.
pub(super) async fn in_fresh_db<T>(
    snapshot: Snapshot,
    label: &str,
    phase: impl AsyncFnOnce(&TestDb) -> Result<T, BoxError>,
) -> Result<T, BoxError> {
    with_db(async |db| {
        let horizon = Horizon::watch(db.pool().clone());
        let outcome = holding(db, snapshot, async || phase(db).await).await;
        let oldest = horizon.stop();
        let note = match snapshot {
            _ if oldest < HELD_BACK => "",
            Snapshot::Free => ": it held vacuum back in this run's database too, so this free run was not free",
            Snapshot::Held => ": it held vacuum back in this run's database too",
        };
        comment(format_args!(
            "{label}: the oldest transaction with an xid on the server was {:.1} s old{note}",
            oldest.as_secs_f64()
        ));
        outcome
    })
    .await
}

/// Runs `phase` in `db`, with a snapshot held on another connection from before it starts until
/// it ends if `snapshot` is [`Snapshot::Held`]. The snapshot is released on every path; a phase
/// that succeeded fails if the snapshot was not in force at its end.
async fn holding<T>(
    db: &TestDb,
    snapshot: Snapshot,
    phase: impl AsyncFnOnce() -> Result<T, BoxError>,
) -> Result<T, BoxError> {
    let held = match snapshot {
        Snapshot::Free => None,
        Snapshot::Held => Some(Held::begin(db).await?),
    };
    let outcome = phase().await;
    let Some(held) = held else { return outcome };
    let released = held.release(db).await;
    let value = outcome?;
    let held_for = released?;
    comment(format_args!("snapshot held for {:.1} s, in force to the end, committed", held_for.as_secs_f64()));
    Ok(value)
}
