//! `producer-basic` runs any number of times on one database, and several runs at once on a
//! database that does not exist yet.

use std::process::{Command, Output};

use outbox_testkit::TestDb;
use sqlx::ConnectOptions;

fn run(database_url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_producer-basic"))
        .env("DATABASE_URL", database_url)
        .output()
        .expect("run producer-basic")
}

fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Drops a database the test's processes created, at the end of the test or on a panic, over a
/// connection of its own to the testkit's database (which must still exist). If this test
/// process is killed, the testkit's sweep removes it later: its name starts like the testkit's own.
struct DropDatabase {
    admin: sqlx::postgres::PgConnectOptions,
    name: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                let mut conn = admin.connect().await?;
                let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.map(drop)
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop the database {}", self.name);
        }
    }
}

#[tokio::test]
async fn runs_again_and_again_on_one_database() {
    let db = TestDb::empty().await.expect("db");
    let url = db.url();
    // Order ids pass 9 on the fifth run: the self-check must not compare them as strings.
    for n in 1..=6 {
        let output = tokio::task::spawn_blocking({
            let url = url.clone();
            move || run(&url)
        })
        .await
        .expect("join");
        assert_ok(&output, &format!("run {n}"));
    }
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(db.pool()).await.expect("count");
    assert_eq!(events, 6 * 4, "four events per run");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn three_runs_at_once_on_a_missing_database() {
    let admin = TestDb::empty().await.expect("db");
    let name = format!("{}_basic", admin.name());
    let drop_db = DropDatabase { admin: admin.connect_options().clone(), name: name.clone() };
    let url = admin.connect_options().clone().database(&name).to_url_lossy().to_string();
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::task::spawn_blocking(move || run(&url))
        })
        .collect();
    for (n, r) in runs.into_iter().enumerate() {
        assert_ok(&r.await.expect("join"), &format!("concurrent run {n}"));
    }
    drop(drop_db);
    admin.close().await.expect("cleanup");
}
