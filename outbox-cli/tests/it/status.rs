//! `outbox status` on a database in a known state: what waits, what is held and quarantined, what
//! was published lately, which entities are behind, which relay holds claims (one expired), and
//! an inbox consumer with a gap — as a table and as JSON, and never the password of the URL; and
//! the session whose old snapshot holds back vacuum, by pid.

use std::process::Output;
use std::time::Duration;

use outbox_producer::Outbox;
use outbox_testkit::{SNAPSHOT_HOLDER_APP, SnapshotHolder, TestDb, wait_for};
use outbox_types::NewEvent;

use crate::support;

/// Runs `outbox status ARGS` against `url`.
async fn status(url: &str, args: &[&str]) -> Output {
    support::output(url, &[&["status"], args].concat()).await
}

/// `order-1`: 3 events, the first published, the second claimed by `relay-x` with an expired
/// lease. `order-2`: its first event quarantined (`contract`), the second held behind it. One
/// inbox row of `shipping` parked behind a gap.
async fn fill(db: &TestDb) {
    let outbox = Outbox::new();
    let mut tx = db.pool().begin().await.expect("begin");
    let events = (0..3)
        .map(|i| ("order-1", i))
        .chain((0..2).map(|i| ("order-2", i)))
        .map(|(e, i)| NewEvent::json("order.changed", &serde_json::json!({ "i": i })).expect("json").entity(e))
        .collect::<Vec<_>>();
    outbox.enqueue_many(&mut *tx, events).await.expect("enqueue");
    tx.commit().await.expect("commit");
    for statement in [
        "UPDATE outbox_events SET status = 'published', published_at = now() WHERE entity_key = 'order-1' AND seq = 1",
        "UPDATE outbox_events SET lease_owner = 'relay-x', claim_token = gen_random_uuid(),
         lease_until = now() - interval '1 minute' WHERE entity_key = 'order-1' AND seq = 2",
        "UPDATE outbox_events SET status = 'quarantined', quarantined_at = now(), last_error_kind = 'contract'
         WHERE entity_key = 'order-2' AND seq = 1",
        "UPDATE outbox_events SET next_attempt_at = 'infinity' WHERE entity_key = 'order-2' AND seq = 2",
        "INSERT INTO inbox_entities (consumer, entity_key, last_seq) VALUES ('shipping', 'order-9', 1)",
        "INSERT INTO inbox_events (consumer, event_id, entity_key, seq, status, received_at)
         VALUES ('shipping', gen_random_uuid(), 'order-9', 3, 'parked', now() - interval '5 seconds')",
    ] {
        sqlx::query(statement).execute(db.pool()).await.expect(statement);
    }
}

#[tokio::test]
async fn status_shows_the_backlog_the_relays_and_the_inbox_as_json_and_as_a_table() {
    let db = TestDb::new().await.expect("db");
    fill(&db).await;
    let url = db.url().replacen("postgres@", "postgres:s3cr3t-pw@", 1);
    assert!(url.contains("s3cr3t-pw"), "the URL carries a password: {url}");

    let out = status(&url, &["--json"]).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(v["waiting"], 3, "order-1's two and order-2's held one: {v}");
    assert_eq!(v["held"], 1, "{v}");
    assert_eq!(v["quarantined"]["contract"], 1, "{v}");
    assert_eq!(v["published_last_minute"], 1, "{v}");
    assert_eq!(v["published_last_hour"], 1, "{v}");
    assert_eq!(v["entities_behind"], 2, "{v}");
    assert_eq!(v["largest_gap"], 2, "order-1 and order-2 are each two behind: {v}");
    assert_eq!(v["expired_leases"], 1, "{v}");
    assert_eq!(v["relays"][0]["owner"], "relay-x", "{v}");
    assert_eq!((v["relays"][0]["rows"].clone(), v["relays"][0]["expired"].clone()), (1.into(), 1.into()), "{v}");
    let shipping = &v["inbox"][0];
    assert_eq!((shipping["consumer"].as_str(), shipping["parked"].as_i64()), (Some("shipping"), Some(1)), "{v}");
    assert_eq!(shipping["entities_with_gap"], 1, "{v}");
    assert!(shipping["oldest_parked_age_seconds"].as_f64().is_some_and(|s| s >= 5.0), "{v}");

    let out = status(&url, &[]).await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for line in ["waiting                   3", "quarantined               1 contract", "relay-x", "shipping"] {
        assert!(table.contains(line), "{line:?} missing from:\n{table}");
    }
    for text in [&stdout, &stderr, &table, &String::from_utf8_lossy(&out.stderr)] {
        assert!(!text.contains("s3cr3t-pw"), "the password is shown:\n{text}");
    }
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn status_without_inbox_tables_says_so() {
    let db = TestDb::empty().await.expect("db");
    outbox_producer::migrate(db.pool()).await.expect("outbox tables only");
    let out = status(&db.url(), &[]).await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(table.contains("waiting                   0"), "{table}");
    assert!(table.contains("relays holding claims: none"), "{table}");
    assert!(table.contains("no inbox tables in this database"), "{table}");
    let json = status(&db.url(), &["--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert!(v["inbox"].is_null(), "{v}");
    db.close().await.expect("cleanup");
}

/// `outbox status --json` on `url`, parsed.
async fn status_json(url: &str) -> serde_json::Value {
    let out = status(url, &["--json"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[tokio::test]
async fn status_names_the_session_whose_snapshot_holds_back_vacuum() {
    let db = TestDb::new().await.expect("db");
    let holder = SnapshotHolder::hold(&db).await.expect("hold a snapshot");
    let pid = holder.pid();
    // Other databases' sessions do not count; this one is the oldest of its own database.
    let v = wait_for("status to show the snapshot a second old", Duration::from_secs(30), || async {
        let v = status_json(&db.url()).await;
        let held = &v["oldest_snapshot"];
        let old = held["age_seconds"].as_f64().is_some_and(|s| s >= 1.0);
        (held["pid"] == pid && old).then_some(v.clone()).ok_or(format!("{v}"))
    })
    .await
    .expect("the held snapshot in status --json");
    let held = &v["oldest_snapshot"];
    assert_eq!(
        (held["application_name"].as_str(), held["state"].as_str()),
        (Some(SNAPSHOT_HOLDER_APP), Some("idle in transaction")),
        "{v}"
    );
    assert!(v["horizon_xid_age"].as_i64().is_some_and(|n| n >= held["xid_age"].as_i64().unwrap_or(i64::MAX)), "{v}");

    let held_for = holder.held_for();
    let v = status_json(&db.url()).await;
    let age = v["oldest_snapshot"]["age_seconds"].as_f64().unwrap_or_default();
    assert!(age >= held_for.as_secs_f64(), "at least {held_for:?} old: {v}");

    let out = status(&db.url(), &[]).await;
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table.lines().find(|l| l.starts_with("oldest snapshot")).unwrap_or_else(|| panic!("{table}"));
    let who = format!("(pid {pid}, {SNAPSHOT_HOLDER_APP}, idle in transaction), holds back vacuum");
    assert!(line.ends_with(&who), "{who:?} missing from {line:?}");

    holder.release().await.expect("commit");
    let v = status_json(&db.url()).await;
    assert_ne!(v["oldest_snapshot"]["pid"], pid, "released: {v}");
    db.close().await.expect("cleanup");
}

/// Many databases (`--databases-file`): a row each, a total, a row that says why a database cannot
/// be read (not migrated; nobody listening), exit status 1 for those, never a password.
#[tokio::test]
async fn status_over_many_databases_prints_a_row_each_and_a_total() {
    let (filled, unmigrated) = (TestDb::new().await.expect("db"), TestDb::empty().await.expect("db"));
    fill(&filled).await;
    let down = support::closed_database_url().replace("postgres@", "postgres:hunter2@");
    let dir = std::env::temp_dir().join(format!("outbox-status-{}", outbox_testkit::unique_suffix()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("databases");
    std::fs::write(&file, format!("tenant-a {}\ntenant-b {}\n", filled.url(), unmigrated.url())).expect("list");
    let file = file.to_str().expect("path");
    let extra = format!("tenant-c={down}");
    let args = ["--databases-file", file, "--database", &extra, "--connect-timeout-secs", "1"];

    let out = status(&filled.url(), &args).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}:\n{text}"));
    let cells: Vec<&str> = line("tenant-a").split_whitespace().collect();
    // waiting 3 (held and claimed included), held 1, quarantined 1, expired leases 1, published in
    // the last hour 1.
    assert_eq!((cells[1], cells[2], cells[3], cells[4]), ("3", "1", "1", "1"), "{text}");
    assert_eq!(cells.last(), Some(&"1"), "{text}");
    assert!(line("tenant-b").contains("the outbox tables do not exist"), "{text}");
    assert!(line("tenant-c").contains("cannot be read: cannot connect"), "{text}");
    assert!(line("total (1 of 3)").split_whitespace().skip(4).take(4).eq(["3", "1", "1", "1"]), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("2 of 3 databases could not be read"), "{stderr}");
    assert!(!text.contains("hunter2") && !stderr.contains("hunter2"), "a password shown:\n{text}\n{stderr}");

    let json: serde_json::Value =
        serde_json::from_slice(&status(&filled.url(), &[&args[..], &["--json"]].concat()).await.stdout).expect("JSON");
    assert_eq!(json["total"]["waiting"], 3, "{json}");
    assert_eq!((json["total"]["databases"].as_i64(), json["total"]["read"].as_i64()), (Some(3), Some(1)), "{json}");
    assert_eq!(json["databases"][2]["name"], "tenant-b", "flags first, then the file: {json}");
    assert!(json["databases"][2]["error"].as_str().is_some_and(|e| e.contains("outbox migrate")), "{json}");
    let _ = std::fs::remove_dir_all(&dir);
    filled.close().await.expect("drop");
    unmigrated.close().await.expect("drop");
}
