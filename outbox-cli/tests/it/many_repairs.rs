//! The commands about particular events, jobs and gaps over many databases (`--databases-file`,
//! `--only`): an event, a quarantined event, a failed inbox event, a gap or a replay job named by
//! its id is found in the database that holds it and repaired there; listings print each
//! database's under its name and a total; a replay runs a job in each database; what is in no
//! database, or in several, changes nothing and says so.

use outbox_system_tests::{Load, fill};
use outbox_testkit::{Recorder, TestBroker, TestDb, equal, wait_for};
use uuid::Uuid;

use crate::many_databases::{enqueue, list_file, with_password};
use crate::support::{self, closed_database_url};

/// Runs `outbox` with `args`: its exit status, standard output and standard error.
async fn outbox(args: &[&str]) -> (Option<i32>, String, String) {
    // DATABASE_URL is left unset: the list alone says where to go.
    let out = support::output("", args).await;
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `== NAME` section headers of a report.
fn sections(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("== ")).collect()
}

/// Marks `ids` quarantined with a contract failure.
async fn quarantine(db: &TestDb, ids: &[Uuid]) {
    sqlx::query(
        "UPDATE outbox_events SET status = 'quarantined', quarantined_at = now(), last_error_kind = 'contract',
         last_error = 'no route' WHERE id = ANY($1)",
    )
    .bind(ids)
    .execute(db.pool())
    .await
    .expect("quarantine");
}

async fn status_of(db: &TestDb, id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(db.pool())
        .await
        .expect("row")
}

#[tokio::test]
async fn an_event_named_by_its_id_is_found_in_its_database_and_repaired_there() {
    let (a, b) = (TestDb::new().await.expect("db"), TestDb::new().await.expect("db"));
    let (in_a, in_b) = (enqueue(&a, 3, "order").await, enqueue(&b, 2, "order").await);
    quarantine(&a, &in_a[..2]).await;
    quarantine(&b, &in_b[..1]).await;
    let (dir, file) = list_file(&[("tenant-a", with_password(&a.url())), ("tenant-b", b.url())]);
    let list = ["--databases-file", file.as_str()];

    // `events show` goes to the one database that holds the event.
    let (code, text, err) = outbox(&[&["events", "show", &in_b[1].to_string()], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(sections(&text), ["tenant-b"], "{text}");
    assert!(text.contains(&in_b[1].to_string()) && text.ends_with("total: done in 1 of 1 databases\n"), "{text}");

    // A retry of ids of both databases retries each where it is, and nothing else.
    let (x, y) = (in_a[0].to_string(), in_b[0].to_string());
    let (code, text, err) = outbox(&[&["quarantine", "retry", &x, &y], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(sections(&text), ["tenant-a", "tenant-b"], "{text}");
    assert!(text.contains(&format!("{x} retried")) && text.contains(&format!("{y} retried")), "{text}");
    assert_eq!(status_of(&a, in_a[0]).await, "pending");
    assert_eq!(status_of(&b, in_b[0]).await, "pending");
    assert_eq!(status_of(&a, in_a[1]).await, "quarantined", "an id not named stays quarantined");

    // An id quarantined nowhere: nothing is changed, even the one that is quarantined.
    let stranger = Uuid::now_v7().to_string();
    let (code, _, err) =
        outbox(&[&["quarantine", "skip", &in_a[1].to_string(), &stranger, "--yes"], &list[..]].concat()).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("not quarantined: {stranger}; nothing was changed")), "{err}");
    assert_eq!(status_of(&a, in_a[1]).await, "quarantined");

    // A database that cannot be read may hold it: the command says so instead of "no such event".
    let down = format!("tenant-c={}", with_password(&closed_database_url()));
    let args = [&["events", "show", &stranger, "--database", &down, "--connect-timeout-secs", "1"], &list[..]].concat();
    let (code, _, err) = outbox(&args).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is in none of the databases that answered; 1 could not be read: tenant-c (cannot connect"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "a password shown: {err}");

    // The same id in two databases (a copied database): which one is for --only to say.
    sqlx::query("UPDATE outbox_events SET id = $1 WHERE id = $2")
        .bind(in_a[2])
        .bind(in_b[1])
        .execute(b.pool())
        .await
        .expect("copy");
    let twice = in_a[2].to_string();
    let (code, _, err) = outbox(&[&["events", "show", &twice], &list[..]].concat()).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is in several databases (tenant-a, tenant-b): name the one meant with --only"), "{err}");
    let (code, text, err) = outbox(&[&["events", "show", &twice, "--only", "tenant-b"], &list[..]].concat()).await;
    assert_eq!((code, sections(&text)), (Some(0), vec!["tenant-b"]), "{text}{err}");
    quarantine(&a, &in_a[2..]).await;
    quarantine(&b, &in_a[2..]).await;
    let (code, _, err) = outbox(&[&["quarantine", "retry", &in_a[1].to_string(), &twice], &list[..]].concat()).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("quarantined event(s) {twice} is in several databases (tenant-a, tenant-b)")),
        "{err}"
    );
    assert_eq!(status_of(&a, in_a[1]).await, "quarantined", "nothing changed");
    assert_eq!(status_of(&b, in_a[2]).await, "quarantined", "nothing changed");

    // A reconciliation that finds a change without its event: the report is kept beside the error.
    let changes = dir.join("changes.sql");
    std::fs::write(&changes, "SELECT '00000000-0000-0000-0000-000000000001'::uuid").expect("changes");
    let changes = changes.to_str().expect("path");
    let (code, text, err) = outbox(&[&["reconcile", "--changes-sql", changes, "--json"], &list[..]].concat()).await;
    assert_eq!(code, Some(1), "{err}");
    let json: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
    assert!(json["databases"][0]["result"].is_object(), "the report is kept: {json}");
    assert!(json["databases"][0]["error"].as_str().is_some_and(|e| e.contains("without an event")), "{json}");
    assert_eq!(json["failed"], 2, "{json}");

    // `grant` prints SQL for any database: a list is for --apply.
    let (code, _, err) = outbox(&[&["grant"], &list[..]].concat()).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("give --apply to run it in each listed one"), "{err}");

    // A listing: each database's under its name, as one JSON object.
    let (code, text, err) = outbox(&[&["events", "list", "--entity", "order-0", "--json"], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
    assert_eq!(json["databases"][0]["name"], "tenant-a", "{json}");
    assert_eq!(json["databases"][0]["result"][0]["id"], x, "{json}");
    assert_eq!(json["databases"][1]["result"][0]["id"], y, "{json}");
    assert_eq!((json["done"].as_u64(), json["failed"].as_u64()), (Some(2), Some(0)), "{json}");

    // --only names a database that is not listed; --only without a list.
    let (code, _, err) =
        outbox(&[&["events", "list", "--entity", "x", "--only", "tenant-z"], &list[..]].concat()).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--only tenant-z: no database of that name is listed"), "{err}");
    let (code, _, err) = outbox(&["events", "list", "--entity", "x", "--only", "tenant-a"]).await;
    assert_eq!(code, Some(2), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    a.close().await.expect("drop");
    b.close().await.expect("drop");
}

/// An inbox (consumer `shipping`) in `db` with `order-1` applied to 1 and its event 3 parked (a
/// gap at 2), and `order-2`'s first event failed; the failed event's id.
async fn inbox_with_a_gap_and_a_failure(db: &TestDb) -> Uuid {
    outbox_inbox::migrate(db.pool()).await.expect("inbox tables");
    let failed = Uuid::now_v7();
    sqlx::query("INSERT INTO inbox_entities (consumer, entity_key, last_seq) VALUES ('shipping', 'order-1', 1)")
        .execute(db.pool())
        .await
        .expect("order-1 applied to 1");
    sqlx::query(
        "INSERT INTO inbox_events (consumer, event_id, entity_key, seq, status, event_type, content_type, payload, created_at, event_version)
         VALUES ('shipping', gen_random_uuid(), 'order-1', 3, 'parked', 'order.changed', 'application/json', '\\x7b7d', now(), 1),
                ('shipping', $1, 'order-2', 1, 'failed', 'order.changed', 'application/json', '\\x7b7d', now(), 1)",
    )
    .bind(failed)
    .execute(db.pool())
    .await
    .expect("a parked and a failed event");
    failed
}

#[tokio::test]
async fn an_inbox_gap_or_failed_event_is_repaired_in_the_tenant_database_that_holds_it() {
    let (a, b) = (TestDb::empty().await.expect("db"), TestDb::empty().await.expect("db"));
    outbox_inbox::migrate(b.pool()).await.expect("inbox tables");
    let failed = inbox_with_a_gap_and_a_failure(&a).await;
    let (dir, file) = list_file(&[("acme", a.url()), ("globex", b.url())]);
    let list = ["--databases-file", file.as_str()];

    let (code, text, err) = outbox(&[&["inbox", "gaps", "shipping", "--json"], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
    assert_eq!(json["databases"][0]["result"][0]["entity_key"], "order-1", "{json}");
    assert_eq!(json["databases"][1]["result"], serde_json::json!([]), "{json}");

    let (code, text, err) = outbox(&[&["inbox", "skip-gap", "shipping", "order-1", "--yes"], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(sections(&text), ["acme"], "{text}");
    assert!(text.contains("order-1: sequences 2 to 2 given up on"), "{text}");
    let (code, _, err) = outbox(&[&["inbox", "skip-gap", "shipping", "order-9", "--yes"], &list[..]].concat()).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("has no gap for entity \"order-9\"; nothing was changed"), "{err}");

    let (code, text, err) = outbox(&[&["inbox", "retry", "shipping", &failed.to_string()], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(sections(&text), ["acme"], "{text}");
    let status: String = sqlx::query_scalar("SELECT status FROM inbox_events WHERE event_id = $1")
        .bind(failed)
        .fetch_one(a.pool())
        .await
        .expect("row");
    assert_eq!(status, "parked", "handed back to the running consumer's sweep");

    let (code, text, err) = outbox(&[&["inbox", "status", "shipping"], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(sections(&text), ["acme", "globex"], "{text}");
    assert!(text.ends_with("total: done in 2 of 2 databases\n"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
    a.close().await.expect("drop");
    b.close().await.expect("drop");
}

/// Marks every event of `db` published, as a relay would have.
async fn published(db: &TestDb) {
    sqlx::query("UPDATE outbox_events SET status = 'published', published_at = now()")
        .execute(db.pool())
        .await
        .expect("published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_over_the_list_runs_a_job_in_each_database_and_the_jobs_are_found_by_id() {
    let (a, b) = (TestDb::new().await.expect("db"), TestDb::new().await.expect("db"));
    let mut ids = fill(a.pool(), Load { entities: 3, per_entity: 4 }).await;
    ids.extend(enqueue(&b, 5, "globex-order").await);
    published(&a).await;
    published(&b).await;
    let broker = TestBroker::new().await.expect("broker");
    let queue = broker.declare_queue("replayed").await.expect("queue");
    let recorder = Recorder::start(&queue).await.expect("recorder");
    let (dir, file) = list_file(&[("acme", a.url()), ("globex", b.url())]);
    let list = ["--databases-file", file.as_str()];
    let amqp = outbox_testkit::amqp_url();

    let start = ["replay", "start", "--all", "--to-queue", &queue, "--amqp-url", &amqp];
    let (code, _, err) = outbox(&[&start[..], &["--metrics-addr", "127.0.0.1:0"], &list[..]].concat()).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--metrics-addr serves one replay's progress: name one database with --only"), "{err}");
    let (code, text, err) = outbox(&[&start[..], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(sections(&text), ["acme", "globex"], "{text}");
    assert!(text.contains("12 of 12 events sent") && text.contains("5 of 5 events sent"), "{text}");
    wait_for("both databases' events replayed", std::time::Duration::from_secs(60), || async {
        equal(recorder.count(), 17)
    })
    .await
    .expect("replayed");
    recorder.all_delivered(ids).expect("every event of both databases");
    recorder.in_entity_order().expect("each entity's events in order");

    let (code, text, err) = outbox(&[&["replay", "list", "--all", "--json"], &list[..]].concat()).await;
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
    let job = json["databases"][1]["result"][0]["id"].as_str().expect("globex's job").to_owned();
    assert_eq!(json["databases"][1]["result"][0]["state"], "done", "{json}");
    let (code, text, err) = outbox(&[&["replay", "show", &job], &list[..]].concat()).await;
    assert_eq!((code, sections(&text)), (Some(0), vec!["globex"]), "{text}{err}");
    let (code, _, err) = outbox(&[&["replay", "cancel", &job], &list[..]].concat()).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("replay job {job} is done: nothing was changed")), "{err}");
    drop(recorder);
    let _ = std::fs::remove_dir_all(&dir);
    broker.close().await.expect("cleanup");
    a.close().await.expect("drop");
    b.close().await.expect("drop");
}
