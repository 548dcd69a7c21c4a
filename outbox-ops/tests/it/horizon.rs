//! What holds back the xmin horizon, against the real PostgreSQL: a session idle in a
//! `REPEATABLE READ` transaction is reported with its pid, application name, state and an age at
//! least as long as it was held, by [`outbox_ops::horizon`] and in the backlog; it is gone once it
//! commits. A role without `pg_read_all_stats` still sees the session and its age in transactions,
//! not its age in seconds. A physical slot that only reserves WAL is not reported.
//!
//! Other tests hold snapshots in their own databases at the same time: the assertions are about
//! this test's session, never "nothing else is held".

use std::time::Duration;

use outbox_ops::{HeldSnapshot, Horizon, admin};
use outbox_testkit::{SNAPSHOT_HOLDER_APP, SnapshotHolder, TestDb, wait_for};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

const WAIT: Duration = Duration::from_secs(30);
/// How long the snapshot is held before it is checked.
const HELD: Duration = Duration::from_secs(1);
/// Transactions started while the snapshot is held.
const LATER_XACTS: i64 = 5;

/// The session `pid`'s snapshot in `horizon`, if it is the oldest.
fn held_by(horizon: &Horizon, pid: i32) -> Option<&HeldSnapshot> {
    horizon.oldest_snapshot.as_ref().filter(|s| s.pid == pid)
}

/// Starts `LATER_XACTS` transactions that each take a transaction id.
async fn later_transactions(pool: &PgPool) {
    for _ in 0..LATER_XACTS {
        sqlx::query("SELECT pg_current_xact_id()").execute(pool).await.expect("a transaction id");
    }
}

/// Waits until the horizon read through `pool` names `holder` with an age of at least [`HELD`];
/// returns what it read.
async fn wait_until_held(pool: &PgPool, holder: &SnapshotHolder) -> HeldSnapshot {
    wait_for("the held snapshot to be reported a second old", WAIT, || async {
        let horizon = outbox_ops::horizon(pool).await.map_err(|e| e.to_string())?;
        match held_by(&horizon, holder.pid()) {
            Some(s) if s.age.is_some_and(|age| age >= HELD) => Ok(s.clone()),
            _ => Err(format!("{horizon:?}")),
        }
    })
    .await
    .expect("the snapshot reported")
}

#[tokio::test]
async fn a_held_snapshot_is_reported_with_its_session_until_it_commits() {
    let db = TestDb::new().await.expect("db");
    let holder = SnapshotHolder::hold(&db).await.expect("hold a snapshot");
    later_transactions(db.pool()).await;
    wait_until_held(db.pool(), &holder).await;

    let held_for = holder.held_for();
    let horizon = outbox_ops::horizon(db.pool()).await.expect("horizon");
    let s = held_by(&horizon, holder.pid()).unwrap_or_else(|| panic!("{horizon:?}"));
    assert!(s.age.is_some_and(|age| age >= held_for), "at least {held_for:?} old: {s:?}");
    assert!(s.xid_age >= LATER_XACTS, "{LATER_XACTS} transactions since: {s:?}");
    assert_eq!((s.application_name.as_str(), s.state.as_deref()), (SNAPSHOT_HOLDER_APP, Some("idle in transaction")));
    assert!(horizon.xid_age() >= s.xid_age && horizon.oldest_snapshot_age() >= held_for, "{horizon:?}");

    // The backlog reads it too, through a pool or on a connection.
    let backlog = admin::backlog(db.pool()).await.expect("backlog");
    assert!(held_by(&backlog.horizon, holder.pid()).is_some(), "{backlog:?}");
    let mut conn = db.pool().acquire().await.expect("conn");
    let backlog = admin::backlog(&mut *conn).await.expect("backlog on a connection");
    assert!(held_by(&backlog.horizon, holder.pid()).is_some(), "{backlog:?}");
    drop(conn);

    let pid = holder.pid();
    holder.release().await.expect("commit");
    wait_for("the committed session to be gone from the horizon", WAIT, || async {
        let horizon = outbox_ops::horizon(db.pool()).await.map_err(|e| e.to_string())?;
        held_by(&horizon, pid).map_or(Ok(()), |s| Err(format!("{s:?}")))
    })
    .await
    .expect("released");
    db.close().await.expect("cleanup");
}

/// A login role of the test's own, dropped when the guard goes (its sessions closed first).
struct Role {
    name: String,
    admin: PgConnectOptions,
}

impl Role {
    async fn create(db: &TestDb) -> Self {
        let name = format!("outbox_t_monitor_{}", outbox_testkit::unique_suffix());
        execute(db.pool(), &format!("CREATE ROLE \"{name}\" LOGIN")).await;
        Self { name, admin: db.connect_options().clone() }
    }

    async fn pool(&self) -> PgPool {
        let options = self.admin.clone().username(&self.name);
        PgPoolOptions::new().max_connections(2).connect_with(options).await.expect("pool as the role")
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let (name, admin) = (self.name.clone(), self.admin.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on: a thread of its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let mut conn = PgConnection::connect_with(&admin.database("postgres")).await?;
                let sql = format!("DROP ROLE IF EXISTS \"{name}\"");
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await?;
                conn.close().await
            })
        });
        if let Ok(Err(e)) = dropped.join() {
            eprintln!("could not drop the test role: {e}");
        }
    }
}

async fn execute(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test]
async fn a_role_without_pg_read_all_stats_sees_the_session_but_not_its_age() {
    let db = TestDb::new().await.expect("db");
    let role = Role::create(&db).await;
    let holder = SnapshotHolder::hold(&db).await.expect("hold a snapshot as the owner");
    later_transactions(db.pool()).await;
    wait_until_held(db.pool(), &holder).await;

    let plain = role.pool().await;
    let horizon = outbox_ops::horizon(&plain).await.expect("any role may read the horizon");
    let s = held_by(&horizon, holder.pid()).unwrap_or_else(|| panic!("{horizon:?}"));
    assert!(s.xid_age >= LATER_XACTS, "the age in transactions is visible: {s:?}");
    assert_eq!((s.age, s.state.as_deref()), (None, None), "start times and state are hidden: {s:?}");
    assert_eq!(horizon.oldest_snapshot_age(), Duration::ZERO);
    plain.close().await;

    execute(db.pool(), &format!("GRANT pg_read_all_stats TO \"{}\"", role.name)).await;
    let monitor = role.pool().await;
    let horizon = outbox_ops::horizon(&monitor).await.expect("horizon");
    let s = held_by(&horizon, holder.pid()).unwrap_or_else(|| panic!("{horizon:?}"));
    assert!(s.age.is_some_and(|age| age >= HELD), "with pg_read_all_stats: {s:?}");
    assert_eq!(s.state.as_deref(), Some("idle in transaction"));
    monitor.close().await;

    holder.release().await.expect("commit");
    db.close().await.expect("cleanup");
}

/// With `wal_level = replica` (this server's), no slot can be made to hold an xmin here: a
/// logical slot needs `wal_level = logical`, and a physical slot gets an xmin only from a standby
/// with `hot_standby_feedback`. What can be checked: a physical slot that reserves WAL and holds
/// no xmin is not reported as holding the horizon.
#[tokio::test]
async fn a_slot_that_only_reserves_wal_does_not_hold_the_horizon() {
    let db = TestDb::new().await.expect("db");
    let name = format!("outbox_t_slot_{}", outbox_testkit::unique_suffix());
    let created =
        sqlx::query("SELECT pg_create_physical_replication_slot($1, true)").bind(&name).execute(db.pool()).await;
    if let Err(e) = created {
        // max_replication_slots = 0, or every slot taken: nothing to check here.
        eprintln!("horizon: slot test skipped: cannot create a physical slot: {e}");
        db.close().await.expect("cleanup");
        return;
    }
    let horizon = outbox_ops::horizon(db.pool()).await;
    sqlx::query("SELECT pg_drop_replication_slot($1)").bind(&name).execute(db.pool()).await.expect("drop the slot");
    let horizon = horizon.expect("horizon");
    assert!(horizon.oldest_slot.as_ref().is_none_or(|s| s.name != name), "{horizon:?}");
    db.close().await.expect("cleanup");
}
