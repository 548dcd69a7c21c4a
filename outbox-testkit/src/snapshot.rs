//! A session that holds an old snapshot, as a long report, `pg_dump` or a forgotten `BEGIN` does:
//! for tests of what an operator sees while vacuum is held back.

use std::time::{Duration, Instant};

use sqlx::postgres::PgConnection;
use sqlx::{ConnectOptions, Connection};

use crate::{Result, TestDb};

/// The `application_name` of a [`SnapshotHolder`]'s session.
pub const SNAPSHOT_HOLDER_APP: &str = "outbox-snapshot-holder";

/// A session of its own on a test database, idle in a `REPEATABLE READ` transaction that has
/// read `outbox_events`, so it holds its snapshot (and the database's xmin horizon) until
/// [`release`](SnapshotHolder::release)d. Dropping it ends the session, which ends the
/// transaction too.
///
/// ```no_run
/// # async fn f(db: &outbox_testkit::TestDb) -> outbox_testkit::Result<()> {
/// let holder = outbox_testkit::SnapshotHolder::hold(db).await?;
/// println!("pid {} holds a snapshot since {:?}", holder.pid(), holder.held_for());
/// holder.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SnapshotHolder {
    conn: PgConnection,
    pid: i32,
    since: Instant,
}

impl SnapshotHolder {
    /// Opens the session (application name [`SNAPSHOT_HOLDER_APP`]) and takes the snapshot.
    ///
    /// # Errors
    /// If the server cannot be reached or `outbox_events` does not exist.
    pub async fn hold(db: &TestDb) -> Result<Self> {
        let mut conn = db.connect_options().clone().application_name(SNAPSHOT_HOLDER_APP).connect().await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM outbox_events LIMIT 1")
            .execute(&mut conn)
            .await?;
        Ok(Self { conn, pid, since: Instant::now() })
    }

    /// The session's process id, as `pg_stat_activity` shows it.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// How long the snapshot has been held at least: measured from after it was taken, so the
    /// server's `now() - xact_start` read later is never less.
    pub fn held_for(&self) -> Duration {
        self.since.elapsed()
    }

    /// Commits the transaction, which releases the snapshot, and closes the session.
    ///
    /// # Errors
    /// If the server cannot be reached.
    pub async fn release(mut self) -> Result<()> {
        sqlx::raw_sql("COMMIT").execute(&mut self.conn).await?;
        self.conn.close().await?;
        Ok(())
    }
}
