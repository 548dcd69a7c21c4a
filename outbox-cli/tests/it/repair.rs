//! The operator's repairs with the real `outbox` binary: look at events, list and show the
//! quarantine, retry (the same row and event id; held successors follow) and skip (with a recorded
//! reason, never without `--yes` or `--reason`); and bad input: an unknown or not-quarantined id, a
//! malformed id, an unmigrated database — one line, the documented exit status, nothing changed.

use std::process::Output;

use crate::support::output as run;
use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use outbox_types::NewEvent;
use uuid::Uuid;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks a failed command: `code`, and exactly one stderr line containing `needle`.
fn assert_refused(out: &Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(needle), "{needle:?} missing: {stderr}");
}

/// The state: `order-1` has 3 events, the first quarantined (`contract`) and the second held behind
/// it; `order-2`'s and `order-3`'s first events are quarantined (`rejected`). Returns the ids of
/// order-1's events and the two rejected ones.
async fn fill(db: &TestDb) -> (Vec<Uuid>, Vec<Uuid>) {
    let mut tx = db.pool().begin().await.expect("begin");
    let events = ["order-1", "order-1", "order-1", "order-2", "order-3"]
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            NewEvent::json("order.changed", &serde_json::json!({ "note": format!("n{i}") })).expect("json").entity(e)
        })
        .collect::<Vec<_>>();
    let ids: Vec<Uuid> =
        Outbox::new().enqueue_many(&mut *tx, events).await.expect("enqueue").iter().map(|id| *id.as_uuid()).collect();
    tx.commit().await.expect("commit");
    let quarantine = "UPDATE outbox_events SET status = 'quarantined', quarantined_at = now(), attempts = 3,
                      last_error_kind = $2, last_error = 'refused by the broker (quarantined)' WHERE id = $1";
    for (id, kind) in [(ids[0], "contract"), (ids[3], "rejected"), (ids[4], "rejected")] {
        sqlx::query(quarantine).bind(id).bind(kind).execute(db.pool()).await.expect("quarantine");
    }
    sqlx::query("UPDATE outbox_events SET next_attempt_at = 'infinity' WHERE id = $1")
        .bind(ids[1])
        .execute(db.pool())
        .await
        .expect("held");
    (ids[..3].to_vec(), ids[3..].to_vec())
}

async fn row(db: &TestDb, id: Uuid) -> (String, i32, bool, Option<String>) {
    sqlx::query_as("SELECT status, attempts, next_attempt_at = 'infinity', last_error FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(db.pool())
        .await
        .expect("row")
}

#[tokio::test]
async fn an_operator_looks_at_events_and_the_quarantine() {
    let db = TestDb::new().await.expect("db");
    let (order_1, _) = fill(&db).await;
    let url = db.url();

    let all: serde_json::Value =
        serde_json::from_slice(&run(&url, &["quarantine", "list", "--json"]).await.stdout).expect("json");
    assert_eq!(all.as_array().map(Vec::len), Some(3), "{all}");
    let contract = run(&url, &["quarantine", "list", "--kind", "contract", "--json"]).await;
    let contract: serde_json::Value = serde_json::from_slice(&contract.stdout).expect("json");
    assert_eq!(contract[0]["id"], order_1[0].to_string(), "{contract}");
    assert_eq!((contract[0]["kind"].as_str(), contract[0]["attempts"].as_i64()), (Some("contract"), Some(3)));
    let table = stdout(&run(&url, &["quarantine", "list"]).await);
    assert!(table.contains("order-1#1") && table.contains("refused by the broker"), "{table}");

    let id = order_1[0].to_string();
    let shown = stdout(&run(&url, &["quarantine", "show", &id]).await);
    for line in ["status          quarantined", "entity          order-1: 1 of 3", "last error      contract — refused"]
    {
        assert!(shown.contains(line), "{line:?} missing:\n{shown}");
    }
    assert!(!shown.contains("n0"), "no payload unless asked:\n{shown}");
    let with_payload = stdout(&run(&url, &["events", "show", &id, "--payload"]).await);
    assert!(with_payload.contains(r#"{"note":"n0"}"#), "{with_payload}");

    let held = run(&url, &["events", "show", &order_1[1].to_string(), "--json"]).await;
    let held: serde_json::Value = serde_json::from_slice(&held.stdout).expect("json");
    assert_eq!((held["status"].as_str(), held["held"].as_bool()), (Some("pending"), Some(true)), "{held}");
    let listed = run(&url, &["events", "list", "--entity", "order-1", "--json"]).await;
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    let seqs: Vec<i64> = listed.as_array().expect("array").iter().filter_map(|e| e["seq"].as_i64()).collect();
    assert_eq!(seqs, [1, 2, 3]);
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn retry_and_skip_repair_the_quarantine_and_refuse_what_they_cannot_do() {
    let db = TestDb::new().await.expect("db");
    let (order_1, rejected) = fill(&db).await;
    let url = db.url();
    let (head, successor, pending_id) = (order_1[0].to_string(), order_1[1], order_1[2].to_string());

    // Not quarantined (a pending id), unknown, malformed: refused, nothing changed.
    let out = run(&url, &["quarantine", "retry", &head, &pending_id]).await;
    assert_refused(&out, 1, &format!("not quarantined: {pending_id}; nothing was changed"));
    assert_eq!(row(&db, order_1[0]).await.0, "quarantined");
    assert_refused(&run(&url, &["events", "show", "00000000-0000-0000-0000-00000000abcd"]).await, 1, "no event");
    assert_refused(&run(&url, &["quarantine", "retry", "not-an-id"]).await, 2, "expected an event id");

    // Retry: the same row and id, attempts reset; the held successor is due again.
    let out = run(&url, &["quarantine", "retry", &head]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains(&format!("{head} retried")), "{}", stdout(&out));
    assert_eq!(row(&db, order_1[0]).await.0, "pending");
    assert_eq!(row(&db, order_1[0]).await.1, 0, "attempts reset");
    assert!(!row(&db, successor).await.2, "the held successor follows");

    // Skip asks for --yes or a reason; the reason is recorded.
    let skip = ["quarantine", "skip", &rejected[0].to_string()];
    assert_refused(&run(&url, &skip).await, 2, "--yes");
    assert_eq!(row(&db, rejected[0]).await.0, "quarantined");
    let out = run(&url, &[&skip[..], &["--reason", "order cancelled by support"]].concat()).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (status, _, _, error) = row(&db, rejected[0]).await;
    assert_eq!(status, "skipped");
    assert!(error.is_some_and(|e| e.contains("order cancelled by support")), "the reason is recorded");

    // Retry every quarantined event of a kind.
    let out = run(&url, &["quarantine", "retry", "--all", "--kind", "rejected"]).await;
    assert!(stdout(&out).contains("1 event(s) retried"), "{}", stdout(&out));
    assert_eq!(row(&db, rejected[1]).await.0, "pending");
    assert_refused(&run(&url, &["quarantine", "retry", "--all"]).await, 2, "--kind");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn an_unmigrated_database_gets_the_migrate_hint() {
    let db = TestDb::empty().await.expect("db");
    for args in [&["quarantine", "list"][..], &["events", "list", "--entity", "e"]] {
        assert_refused(&run(&db.url(), args).await, 1, "run `outbox migrate`");
    }
    db.close().await.expect("cleanup");
}
