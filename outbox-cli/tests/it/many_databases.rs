//! Operator commands over many databases (`--databases-file`, `--database NAME=URL`): `migrate`
//! and `quarantine list` work on each listed database, print a line or a section per database and
//! a total, say why one could not be worked on, exit 1 for it, and never show a password.
//! (`status` over many databases is in `status.rs`.)

use outbox_testkit::TestDb;

use crate::support;

/// A list file naming `databases` (`NAME URL` lines) in a folder of its own; the folder and the
/// file's path.
pub(crate) fn list_file(databases: &[(&str, String)]) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("outbox-many-{}", outbox_testkit::unique_suffix()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("databases");
    let text: String = databases.iter().map(|(name, url)| format!("{name} {url}\n")).collect();
    std::fs::write(&file, text).expect("list");
    let path = file.to_str().expect("path").to_owned();
    (dir, path)
}

/// Whether the database holds the table `name`.
async fn has_table(db: &TestDb, name: &str) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
        .bind(name)
        .fetch_one(db.pool())
        .await
        .expect("to_regclass")
}

/// A password in a URL, to prove it never shows.
pub(crate) fn with_password(url: &str) -> String {
    url.replacen("postgres@", "postgres:hunter2@", 1)
}

#[tokio::test]
async fn migrate_over_many_databases_migrates_each_and_names_the_one_it_could_not() {
    let (a, b) = (TestDb::empty().await.expect("db"), TestDb::empty().await.expect("db"));
    let (dir, file) = list_file(&[("tenant-a", with_password(&a.url())), ("tenant-b", b.url())]);
    let down = format!("tenant-c={}", with_password(&support::closed_database_url()));
    let args = ["migrate", "--databases-file", &file, "--database", &down, "--connect-timeout-secs", "1"];

    let out = support::output(&a.url(), &args).await;
    let (text, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}{stderr}");
    let line = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}:\n{text}"));
    assert!(line("tenant-a").ends_with("  migrated"), "{text}");
    assert!(line("tenant-b").ends_with("  migrated"), "{text}");
    assert!(line("tenant-c").contains("not migrated: cannot connect"), "{text}");
    assert!(text.ends_with("migrated 2 of 3 databases\n"), "{text}");
    assert!(stderr.contains("1 of 3 databases could not be migrated"), "{stderr}");
    assert!(!text.contains("hunter2") && !stderr.contains("hunter2"), "a password shown:\n{text}\n{stderr}");
    for db in [&a, &b] {
        assert!(has_table(db, "outbox_events").await && has_table(db, "inbox_events").await, "{}", db.name());
    }

    // Again, the file alone: already migrated, nothing fails.
    let out = support::output(&a.url(), &["migrate", "--databases-file", &file, "--outbox-only"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("migrated 2 of 2 databases\n"));
    let _ = std::fs::remove_dir_all(&dir);
    a.close().await.expect("drop");
    b.close().await.expect("drop");
}

/// Commits `n` events of `n` entities `<prefix>-<i>` in `db`; their ids.
pub(crate) async fn enqueue(db: &TestDb, n: usize, prefix: &str) -> Vec<uuid::Uuid> {
    let outbox = outbox_producer::Outbox::new();
    let mut tx = db.pool().begin().await.expect("begin");
    let events = (0..n)
        .map(|i| outbox_types::NewEvent::json("order.changed", &i).expect("json").entity(format!("{prefix}-{i}")));
    let ids = outbox.enqueue_many(&mut *tx, events).await.expect("enqueue");
    tx.commit().await.expect("commit");
    ids.into_iter().map(|id| *id.as_uuid()).collect()
}

/// Quarantines `n` events of `n` entities of `db`, with the reason `reason`.
async fn quarantine(db: &TestDb, n: usize, reason: &str) {
    let ids = enqueue(db, n, "order").await;
    sqlx::query(
        "UPDATE outbox_events SET status = 'quarantined', quarantined_at = now(), last_error_kind = 'contract',
         last_error = $1 WHERE id = ANY($2)",
    )
    .bind(reason)
    .bind(ids)
    .execute(db.pool())
    .await
    .expect("quarantine");
}

#[tokio::test]
async fn quarantine_list_over_many_databases_lists_each_under_its_name_with_the_total() {
    let (a, b, bare) =
        (TestDb::new().await.expect("db"), TestDb::new().await.expect("db"), TestDb::empty().await.expect("db"));
    quarantine(&a, 2, "no route to orders").await;
    let (dir, file) =
        list_file(&[("tenant-a", with_password(&a.url())), ("tenant-b", b.url()), ("tenant-c", bare.url())]);
    let args = ["quarantine", "list", "--databases-file", &file];

    let out = support::output(&a.url(), &args).await;
    let (text, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}{stderr}");
    let sections: Vec<&str> = text.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(sections.len(), 3, "{text}");
    assert_eq!(sections[0], "== tenant-a: 2 quarantined", "{text}");
    assert_eq!(sections[1], "== tenant-b: no quarantined events", "{text}");
    assert!(
        sections[2].starts_with("== tenant-c: cannot be read:") && sections[2].contains("outbox migrate"),
        "{text}"
    );
    assert_eq!(text.lines().filter(|l| l.contains("no route to orders")).count(), 2, "{text}");
    assert!(text.ends_with("total: 2 quarantined in 2 of 3 databases\n"), "{text}");
    assert!(stderr.contains("1 of 3 databases could not be read"), "{stderr}");
    assert!(!text.contains("hunter2") && !stderr.contains("hunter2"), "a password shown:\n{text}\n{stderr}");

    let out = support::output(&a.url(), &[&args[..], &["--json", "--kind", "contract"]].concat()).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["total"], 2, "{json}");
    assert_eq!(json["databases"][0]["events"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(json["databases"][0]["events"][0]["reason"], "no route to orders", "{json}");
    assert_eq!(json["databases"][1]["events"].as_array().map(Vec::len), Some(0), "{json}");
    assert!(json["databases"][2]["error"].is_string(), "{json}");

    // --database-url with a list is a usage error: which database would it be?
    let out =
        support::output(&a.url(), &["--database-url", &a.url(), "quarantine", "list", "--databases-file", &file]).await;
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    for db in [a, b, bare] {
        db.close().await.expect("drop");
    }
}

/// A database whose outbox table another session holds locked: `status` over the list gives it a
/// line saying it did not answer in time, and prints the others', instead of waiting for ever.
#[tokio::test]
async fn status_over_many_databases_does_not_wait_for_ever_on_a_locked_database() {
    let (free, locked) = (TestDb::new().await.expect("db"), TestDb::new().await.expect("db"));
    let mut locker = locked.pool().begin().await.expect("begin");
    sqlx::query("LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE").execute(&mut *locker).await.expect("lock");
    let (dir, file) = list_file(&[("tenant-a", free.url()), ("tenant-b", locked.url())]);
    let started = std::time::Instant::now();
    let out = support::output(&free.url(), &["status", "--databases-file", &file, "--connect-timeout-secs", "1"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.lines().any(|l| l.starts_with("tenant-a") && !l.contains("cannot")), "{text}");
    let b = text.lines().find(|l| l.starts_with("tenant-b")).unwrap_or_else(|| panic!("{text}"));
    assert!(b.contains("no answer within 11 s (a lock held on its tables?)"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "the command waited {:?}", started.elapsed());
    locker.rollback().await.expect("unlock");
    let _ = std::fs::remove_dir_all(&dir);
    free.close().await.expect("drop");
    locked.close().await.expect("drop");
}

/// Commits `n` events in `db` and marks them published `days` ago.
async fn published(db: &TestDb, n: usize, days: i32) {
    let ids = enqueue(db, n, &format!("o-{days}")).await;
    sqlx::query(
        "UPDATE outbox_events SET status = 'published', published_at = now() - make_interval(days => $1)
         WHERE id = ANY($2)",
    )
    .bind(days)
    .bind(ids)
    .execute(db.pool())
    .await
    .expect("published");
}

#[tokio::test]
async fn cleanup_over_many_databases_cleans_each_and_counts_the_total() {
    let (a, b, bare) =
        (TestDb::new().await.expect("db"), TestDb::new().await.expect("db"), TestDb::empty().await.expect("db"));
    published(&a, 5, 10).await;
    published(&a, 2, 1).await;
    published(&b, 3, 10).await;
    let (dir, file) =
        list_file(&[("tenant-a", with_password(&a.url())), ("tenant-b", b.url()), ("tenant-c", bare.url())]);
    let args = ["cleanup", "--older-than", "7d", "--databases-file", &file];

    let dry = support::output(&a.url(), &[&args[..], &["--dry-run", "--json"]].concat()).await;
    let json: serde_json::Value = serde_json::from_slice(&dry.stdout).expect("JSON");
    assert_eq!(json["total_outbox_rows"], 8, "{json}");
    assert_eq!(json["databases"][0]["summary"]["outbox_rows"], 5, "{json}");
    assert!(json["databases"][2]["error"].as_str().is_some_and(|e| e.contains("outbox migrate")), "{json}");

    let out = support::output(&a.url(), &args).await;
    let (text, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}{stderr}");
    let sections: Vec<&str> = text.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(sections, ["== tenant-a", "== tenant-b", "== tenant-c"], "{text}");
    assert!(text.contains("deleted 5 outbox rows in") && text.contains("deleted 3 outbox rows in"), "{text}");
    assert!(
        text.contains("not cleaned: ") && text.ends_with("total: deleted 8 outbox row(s) in 2 of 3 databases\n"),
        "{text}"
    );
    assert!(stderr.contains("1 of 3 databases could not be cleaned"), "{stderr}");
    assert!(!text.contains("hunter2") && !stderr.contains("hunter2"), "a password shown:\n{text}\n{stderr}");
    let left = |db: &TestDb| {
        let pool = db.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events").fetch_one(&pool).await.expect("count")
        }
    };
    assert_eq!((left(&a).await, left(&b).await), (2, 0), "the old rows went, the young stayed");
    let _ = std::fs::remove_dir_all(&dir);
    for db in [a, b, bare] {
        db.close().await.expect("drop");
    }
}
