//! `outbox replay`: a job killed mid-way resumes where it stopped (nothing lost, at most two batches
//! twice); what retention deleted or scrubbed is reported and makes the exit status 1; a dry run
//! counts by type and entity; an operator pauses, resumes and cancels a job, and `outbox status`
//! lists it.

use std::time::Duration;

use outbox_system_tests::sizes::REPLAY_PROCESS_BACKLOG;
use outbox_system_tests::{Load, fill};
use outbox_testkit::{Recorder, TestBroker, TestDb, at_least, equal, wait_for};
use uuid::Uuid;

use crate::support::{Running, closed_port, outbox, output, sample, wait_status};

const DEADLINE: Duration = Duration::from_secs(120);

/// A database with `load` committed and published (as a relay would have), and a queue with its
/// recorder for the replay to send to.
async fn setup(load: Load) -> (TestDb, TestBroker, String, Recorder, Vec<Uuid>) {
    let db = TestDb::new().await.expect("db");
    let ids = fill(db.pool(), load).await;
    sqlx::query("UPDATE outbox_events SET status = 'published', published_at = now()")
        .execute(db.pool())
        .await
        .expect("published");
    let broker = TestBroker::new().await.expect("broker");
    let queue = broker.declare_queue("replayed").await.expect("queue");
    let recorder = Recorder::start(&queue).await.expect("recorder");
    (db, broker, queue, recorder, ids)
}

fn replay(db: &TestDb, args: &[&str]) -> std::process::Command {
    let mut cmd = outbox();
    cmd.arg("replay").args(args).env("DATABASE_URL", db.url()).env("AMQP_URL", outbox_testkit::amqp_url());
    cmd
}

/// Events the replay jobs recorded as sent so far (0 before the first is recorded).
async fn sent_so_far(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT coalesce(sum(sent), 0)::bigint FROM outbox_replay_jobs")
        .fetch_one(db.pool())
        .await
        .expect("sent")
}

/// The only job's id and how many events it recorded as sent.
async fn the_job(db: &TestDb) -> (Uuid, i64, String) {
    sqlx::query_as("SELECT id, sent, state FROM outbox_replay_jobs").fetch_one(db.pool()).await.expect("one job")
}

#[tokio::test]
async fn a_replay_killed_mid_job_resumes_where_it_stopped() {
    run_a_replay_killed_mid_job_resumes_where_it_stopped(REPLAY_PROCESS_BACKLOG.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn a_replay_killed_mid_job_resumes_where_it_stopped_long_tier() {
    run_a_replay_killed_mid_job_resumes_where_it_stopped(REPLAY_PROCESS_BACKLOG.long).await;
}

async fn run_a_replay_killed_mid_job_resumes_where_it_stopped(load: Load) {
    let (db, broker, queue, recorder, ids) = setup(load).await;
    let args = ["start", "--all", "--to-queue", &queue, "--rate", "2000", "--batch-size", "200"];
    let running = Running::spawn(replay(&db, &args));
    wait_for("the replay under way", DEADLINE, || async { at_least(sent_so_far(&db).await, load.events() as i64 / 4) })
        .await
        .expect("under way");
    running.signal("-KILL");
    let (_, _) = running.finish(Duration::from_secs(10)).await;
    let (id, sent, state) = the_job(&db).await;
    assert_eq!(state, "running", "a killed run leaves the job running, for a resume");
    assert!(sent < load.events() as i64, "killed before the end: {sent}");

    let resumed =
        output(&db.url(), &["replay", "resume", &id.to_string(), "--amqp-url", &outbox_testkit::amqp_url()]).await;
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(resumed.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(
        stdout.contains(&format!("replay job {id} done: {} of {} events sent", load.events(), load.events())),
        "{stdout}"
    );
    wait_for("every event replayed", DEADLINE, || async {
        recorder.all_delivered(ids.iter().copied()).map_err(|missing| format!("{} missing", missing.len()))
    })
    .await
    .expect("delivered");
    let duplicates: usize = recorder.duplicates().values().map(|n| n - 1).sum();
    assert!(duplicates <= 400, "at most the two batches out at the kill sent twice: {duplicates}");
    recorder.in_entity_order().expect("each entity's events in sequence order");
    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn what_retention_deleted_or_scrubbed_is_reported_and_the_exit_status_says_so() {
    let load = Load { entities: 10, per_entity: 10 };
    let (db, broker, queue, recorder, _) = setup(load).await;
    sqlx::raw_sql(
        "DELETE FROM outbox_events WHERE entity_key IN ('entity-0', 'entity-1') AND seq <= 3; \
         UPDATE outbox_events SET payload = '', payload_scrubbed_at = now() WHERE entity_key = 'entity-2' AND seq > 5",
    )
    .execute(db.pool())
    .await
    .expect("retention");

    let dry = output(&db.url(), &["replay", "start", "--all", "--to-queue", &queue, "--dry-run", "--json"]).await;
    assert_eq!(dry.status.code(), Some(1), "a dry run that finds what cannot be sent says so");
    let survey: serde_json::Value = serde_json::from_slice(&dry.stdout).expect("one JSON object");
    assert_eq!(survey["total"], 89);
    assert_eq!(survey["scrubbed"], 5);
    assert_eq!(survey["cut_histories"], serde_json::json!({"entity-0": 4, "entity-1": 4}));
    assert_eq!(survey["by_type"], serde_json::json!({"order.changed": 89}));
    assert_eq!(survey["by_entity"]["entity-2"], 5);
    assert_eq!(the_job_count(&db).await, 0, "a dry run records nothing");

    let amqp = outbox_testkit::amqp_url();
    let run = output(&db.url(), &["replay", "start", "--all", "--to-queue", &queue, "--amqp-url", &amqp]).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert_eq!(run.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("cannot send: 5 events whose payload retention scrubbed"), "{stdout}");
    assert!(stdout.contains("the first events of 2 entities, deleted by retention"), "{stdout}");
    assert!(stdout.contains("entity-0 4, entity-1 4"), "{stdout}");
    assert!(stdout.contains("outbox inbox skip-gap"), "says what a FromFirst consumer will need: {stdout}");
    assert!(stderr.contains("outbox: error: replay job"), "{stderr}");
    wait_for("the rest replayed", DEADLINE, || async { equal(recorder.count(), 89) }).await.expect("sent");
    assert_eq!(the_job(&db).await.2, "done", "everything that could go went");
    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

async fn the_job_count(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_replay_jobs").fetch_one(db.pool()).await.expect("count")
}

#[tokio::test]
async fn an_operator_pauses_resumes_and_cancels_a_job_and_status_lists_it() {
    let load = Load { entities: 20, per_entity: 20 };
    let (db, broker, queue, recorder, ids) = setup(load).await;
    let args = ["start", "--entity", "entity-3", "--entity", "entity-4", "--type", "order.*", "--to-queue", &queue];
    let dry = output(&db.url(), &[&["replay"][..], &args[..], &["--dry-run"]].concat()).await;
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{text}");
    assert!(text.contains("selected: 40 events to send (40 of 2 entities, 0 of no entity)"), "{text}");
    assert!(text.contains("by entity: entity-3 20, entity-4 20"), "{text}");

    let port = closed_port();
    let addr = format!("127.0.0.1:{port}");
    let all = ["start", "--all", "--to-queue", &queue, "--rate", "50", "--metrics-addr", &addr];
    let running = Running::spawn(replay(&db, &all));
    wait_for("the replay under way", DEADLINE, || async { at_least(sent_so_far(&db).await, 10) }).await.expect("going");
    // The job's progress as metrics: what it sent (the page may trail the job's row by a batch).
    let page = wait_for("the replay's progress on /metrics", DEADLINE, || async {
        let page = wait_status(port, "/metrics", 200, DEADLINE).await;
        let sent = page.lines().find_map(|l| l.strip_prefix("outbox_replay_events_total{outcome=\"sent\"} "));
        let sent = sent.and_then(|n| n.trim().parse::<f64>().ok()).unwrap_or(0.0);
        at_least(sent, 10.0).map(|()| page)
    })
    .await
    .expect("progress as metrics");
    let remaining = sample(&page, "outbox_replay_events_remaining").expect("the remaining gauge");
    assert!(remaining > 0.0 && remaining < load.events() as f64, "{remaining}");
    let id = the_job(&db).await.0.to_string();
    let paused = output(&db.url(), &["replay", "pause", &id]).await;
    assert!(paused.status.success(), "{}", String::from_utf8_lossy(&paused.stderr));
    let (status, lines) = running.finish(DEADLINE).await;
    assert!(status.success(), "a paused job ends its run cleanly: {}", lines.join("\n"));
    let status_page = output(&db.url(), &["status"]).await;
    let page = String::from_utf8_lossy(&status_page.stdout);
    assert!(page.contains(&format!("{id} paused")), "outbox status lists the paused job: {page}");
    let sent_when_paused = the_job(&db).await.1;
    assert!(sent_when_paused < load.events() as i64, "paused before the end: {sent_when_paused}");

    let resumed = output(&db.url(), &["replay", "resume", &id, "--amqp-url", &outbox_testkit::amqp_url()]).await;
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    recorder.wait_all_delivered(ids.iter().copied(), DEADLINE).await.expect("every event after the resume");
    assert_eq!(the_job(&db).await.2, "done");
    let again = output(&db.url(), &["replay", "resume", &id, "--amqp-url", &outbox_testkit::amqp_url()]).await;
    assert!(again.status.success(), "a done job's resume succeeds at once: {}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stdout).contains("is done"));
    let cancel = output(&db.url(), &["replay", "cancel", &id]).await;
    assert_eq!(cancel.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&cancel.stderr).contains("is done: nothing was changed"));
    let list = output(&db.url(), &["replay", "list", "--all", "--json"]).await;
    let jobs: serde_json::Value = serde_json::from_slice(&list.stdout).expect("JSON");
    assert_eq!(jobs[0]["state"], "done");
    assert_eq!(jobs[0]["sent"], load.events());
    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

/// Sealed payloads are opened with `OUTBOX_PAYLOAD_KEYS` and sent in plain, as the relay sends
/// them; without the key they are counted as not sendable, never sent sealed, and the exit status
/// says so. The dry run names the key ids a replay needs.
#[tokio::test]
async fn sealed_payloads_are_opened_with_the_keys_or_reported_without_them() {
    use base64::Engine;
    use outbox_types::{KEY_BYTES, Keyring, NewEvent, PayloadCipher};

    const SECRET: &str = "IBAN-DE89-SECRET";
    let (db, broker, queue, recorder, _) = setup(Load { entities: 2, per_entity: 2 }).await;
    let key = [9; KEY_BYTES];
    let outbox =
        outbox_producer::Outbox::builder().cipher(PayloadCipher::new(Keyring::new("k9", key).expect("key"))).build();
    let mut tx = db.pool().begin().await.expect("begin");
    for _ in 0..3 {
        let event = NewEvent::json("payment.made", &serde_json::json!({ "iban": SECRET })).expect("json");
        outbox.enqueue(&mut *tx, event.entity("payment-1")).await.expect("enqueue");
    }
    tx.commit().await.expect("commit");
    sqlx::query("UPDATE outbox_events SET status = 'published', published_at = now()")
        .execute(db.pool())
        .await
        .expect("published");
    let amqp = outbox_testkit::amqp_url();
    let dry = output(&db.url(), &["replay", "start", "--type", "payment.*", "--dry-run"]).await;
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(text.contains("sealed, by key id (opened with OUTBOX_PAYLOAD_KEYS): k9 3"), "{text}");

    let without =
        output(&db.url(), &["replay", "start", "--type", "payment.*", "--to-queue", &queue, "--amqp-url", &amqp]).await;
    let err = String::from_utf8_lossy(&without.stderr);
    assert_eq!(without.status.code(), Some(1), "{err}");
    assert!(
        err.contains("3 events could not be sent") && err.contains("3 sealed with keys not in OUTBOX_PAYLOAD_KEYS"),
        "{err}"
    );
    assert!(!err.contains(SECRET), "{err}");

    let keys = format!("k9:{}", base64::engine::general_purpose::STANDARD.encode(key));
    let mut cmd = replay(&db, &["start", "--type", "payment.*", "--to-queue", &queue]);
    cmd.env("OUTBOX_PAYLOAD_KEYS", keys);
    let with = tokio::task::spawn_blocking(move || cmd.output().expect("run")).await.expect("join");
    assert!(with.status.success(), "{}", String::from_utf8_lossy(&with.stderr));
    wait_for("the opened payloads", DEADLINE, || async { equal(recorder.count(), 3) }).await.expect("sent");
    assert!(recorder.records().iter().all(|r| String::from_utf8_lossy(&r.payload).contains(SECRET)), "sent in plain");
    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

/// A target that routes nowhere (a queue name mistyped) fails the job with the broker's reason,
/// sends nothing further, and says so in one line; the job can be resumed once it is repaired.
#[tokio::test]
async fn a_target_that_routes_nowhere_fails_the_job_with_the_reason() {
    let (db, broker, _queue, recorder, _) = setup(Load { entities: 3, per_entity: 3 }).await;
    let missing = broker.name("no-such-queue");
    let amqp = outbox_testkit::amqp_url();
    let run = output(&db.url(), &["replay", "start", "--all", "--to-queue", &missing, "--amqp-url", &amqp]).await;
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    let line = err.lines().find(|l| l.starts_with("outbox: error: ")).unwrap_or_default();
    assert!(line.contains("failed: the target refuses the events"), "{err}");
    let (id, sent, state) = the_job(&db).await;
    assert_eq!((sent, state.as_str()), (0, "failed"));
    let shown = output(&db.url(), &["replay", "show", &id.to_string(), "--json"]).await;
    let job: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    let reason = job["last_error"].as_str().unwrap_or_default().to_owned();
    assert!(reason.starts_with("rejected") && reason.contains("NO_ROUTE"), "{reason}");
    assert_eq!(recorder.count(), 0);
    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}
