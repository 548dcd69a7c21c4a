//! `outbox reconcile` over an operator's query of business changes: a change written without its
//! event is found (exit 1, listed), then reconciled once the event exists; event-id queries and
//! `--since` work; a query of the wrong shape or a missing file is one line, exit 1.

use crate::support::output as run;
use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use outbox_types::NewEvent;

/// Writes `order-<id>` at `version` with its event, in one transaction, as a service would.
async fn change(db: &TestDb, id: i64, version: i64) -> uuid::Uuid {
    let mut tx = db.pool().begin().await.expect("begin");
    sqlx::query("INSERT INTO order_history (order_id, version) VALUES ($1, $2)")
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await
        .expect("business row");
    let event = NewEvent::json("order.changed", &serde_json::json!({ "version": version }))
        .expect("json")
        .entity(format!("order-{id}"));
    let event_id = Outbox::new().enqueue(&mut *tx, event).await.expect("enqueue");
    tx.commit().await.expect("commit");
    *event_id.as_uuid()
}

fn query_file(dir: &std::path::Path, name: &str, sql: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, sql).expect("write the query");
    path.display().to_string()
}

#[tokio::test]
async fn reconcile_finds_a_change_without_its_event_and_passes_once_it_exists() {
    let db = TestDb::new().await.expect("db");
    sqlx::query("CREATE TABLE order_history (order_id bigint, version bigint, at timestamptz DEFAULT now())")
        .execute(db.pool())
        .await
        .expect("table");
    for version in 1..=3 {
        change(&db, 1, version).await;
    }
    change(&db, 2, 1).await;
    sqlx::query("UPDATE outbox_events SET status = 'published', published_at = now()")
        .execute(db.pool())
        .await
        .expect("published");
    // A change written without its event: the bug reconciliation exists to find.
    sqlx::query("INSERT INTO order_history (order_id, version) VALUES (2, 2)").execute(db.pool()).await.expect("bug");

    let dir = std::env::temp_dir().join(format!("outbox-reconcile-{}", outbox_testkit::unique_suffix()));
    std::fs::create_dir_all(&dir).expect("dir");
    let versions = query_file(&dir, "versions.sql", "SELECT 'order-' || order_id, version FROM order_history;\n");
    let url = db.url();

    let out = run(&url, &["reconcile", "--changes-sql", &versions]).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("business changes without an event: 1") && stdout.contains("order-2 version 2"),
        "{stdout}"
    );
    assert!(stdout.contains("5 business changes, 4 outbox events (4 published)"), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let out = run(&url, &["reconcile", "--changes-sql", &versions, "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (v["missing"].as_bool(), v["changes_without_event"][0].as_str()),
        (Some(true), Some("order-2 version 2")),
        "{v}"
    );
    assert_eq!(out.status.code(), Some(1));

    // The missing event is written (as a repair would); it waits to be published: listed, not missing.
    let mut tx = db.pool().begin().await.expect("begin");
    let event = NewEvent::json("order.changed", &serde_json::json!({ "version": 2 })).expect("json").entity("order-2");
    Outbox::new().enqueue(&mut *tx, event).await.expect("enqueue");
    tx.commit().await.expect("commit");
    let out = run(&url, &["reconcile", "--changes-sql", &versions]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("business changes without an event: 0") && stdout.contains("events not published: 1"),
        "{stdout}"
    );

    // Only the changes of the last hour, as a history table gives them: version 3 of order-5.
    let recent =
        query_file(&dir, "recent.sql", "SELECT 'order-' || order_id, version FROM order_history WHERE at >= $1");
    sqlx::query("UPDATE order_history SET at = now() - interval '2 days'").execute(db.pool()).await.expect("age");
    sqlx::query("UPDATE outbox_events SET created_at = now() - interval '2 days'")
        .execute(db.pool())
        .await
        .expect("age");
    sqlx::query("INSERT INTO outbox_entity_sequences (entity_key, last_seq) VALUES ('order-5', 2)")
        .execute(db.pool())
        .await
        .expect("counter");
    let id = change(&db, 5, 3).await;
    let out = run(&url, &["reconcile", "--changes-sql", &recent, "--since", "1h"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("1 business changes, 1 outbox events"), "{stdout}");

    // A query of event ids is recognised by its column.
    sqlx::query("CREATE TABLE orders_events (event_id uuid)").execute(db.pool()).await.expect("table");
    sqlx::query("INSERT INTO orders_events VALUES ($1)").bind(id).execute(db.pool()).await.expect("row");
    let ids = query_file(&dir, "ids.sql", "SELECT event_id FROM orders_events");
    let out = run(&url, &["reconcile", "--changes-sql", &ids]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));

    for (args, needle) in [
        (vec!["reconcile", "--changes-sql", &query_file(&dir, "bad.sql", "SELECT 1")], "must return"),
        (vec!["reconcile", "--changes-sql", "/nonexistent/changes.sql"], "cannot read --changes-sql"),
    ] {
        let out = run(&url, &args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(needle), "{needle:?} missing: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    db.close().await.expect("cleanup");
}
