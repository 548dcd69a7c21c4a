//! `outbox inbox` with the real binary beside a running consumer: the status, gaps and failed
//! events an operator sees, and the repairs the consumer then applies at its sweep — a failed
//! event retried (its parked successor follows), a gap skipped (the parked events are applied), a
//! failed event skipped with a recorded reason; and bad input refused with one line.

use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::support::output as run;
use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner};
use outbox_testkit::{Harness, wait_for};
use outbox_types::{Event, NewEvent};
use sqlx::PgPool;
use tower::Layer;

const CONSUMER: &str = "shipping";
const WAIT: Duration = Duration::from_secs(60);

/// While set, the handler refuses every event whose payload says `poison`, for good.
static POISON_FAILS: AtomicBool = AtomicBool::new(true);

async fn apply(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let poison = String::from_utf8_lossy(req.event().payload.bytes()).contains("poison");
    if poison && POISON_FAILS.load(Ordering::SeqCst) {
        return Err(HandlerError::permanent("the handler refuses this event"));
    }
    let entity = req.event().entity.clone().expect("ordered events only");
    sqlx::query("INSERT INTO effects (entity, seq) VALUES ($1, $2)")
        .bind(&entity.key)
        .bind(i64::try_from(entity.seq).expect("seq"))
        .execute(req.conn())
        .await
        .map_err(|e| HandlerError::transient(e.to_string()))?;
    Ok(req)
}

fn event(entity: &str, seq: u64, poison: bool) -> Event {
    NewEvent::json("order.changed", &serde_json::json!({ "seq": seq, "note": if poison { "poison" } else { "fine" } }))
        .expect("json")
        .entity(entity)
        .into_event(Some(seq), SystemTime::now())
}

async fn json(url: &str, args: &[&str]) -> serde_json::Value {
    let out = run(url, args).await;
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

fn assert_refused(out: &Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(needle), "{needle:?} missing: {stderr}");
}

async fn applied(pool: &PgPool, entity: &str) -> Vec<i64> {
    sqlx::query_scalar("SELECT seq FROM effects WHERE entity = $1 ORDER BY id")
        .bind(entity)
        .fetch_all(pool)
        .await
        .expect("effects")
}

async fn wait_applied(pool: &PgPool, entity: &str, expected: &[i64]) {
    wait_for(&format!("{entity}'s effects {expected:?}"), WAIT, || async {
        outbox_testkit::equal(applied(pool, entity).await, expected)
    })
    .await
    .expect("applied by the consumer's sweep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_repairs_an_inbox_that_its_running_consumer_then_applies() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let pool = h.pool().clone();
    outbox_inbox::migrate(&pool).await.expect("inbox tables");
    sqlx::query("CREATE TABLE effects (id bigserial PRIMARY KEY, entity text NOT NULL, seq bigint NOT NULL)")
        .execute(&pool)
        .await
        .expect("effects");
    let service = InboxLayer::new(pool.clone(), CONSUMER).layer(tower::service_fn(apply));
    let runner = InboxRunner::builder(outbox_testkit::amqp_url(), service)
        .topology(h.topology())
        .sweep_interval(Duration::from_millis(200))
        .build()
        .expect("runner")
        .spawn();
    let url = h.db().url();

    // order-1: its first event fails for good, its second parks behind it. order-2: its second
    // event arrives, its first never does. order-3: like order-1.
    let poisoned = event("order-1", 1, true);
    let skipped = event("order-3", 1, true);
    let events = [
        poisoned.clone(),
        event("order-1", 2, false),
        event("order-2", 2, false),
        skipped.clone(),
        event("order-3", 2, false),
    ];
    h.broker().publish_events(h.exchange(), "order.changed", &events).await.expect("publish");
    let status = wait_for("two failed, three parked", WAIT, || async {
        let v = json(&url, &["inbox", "status", CONSUMER, "--json"]).await;
        (v["failed"] == 2 && v["parked"] == 3).then_some(v)
    })
    .await
    .expect("the inbox's state");
    assert_eq!(status["entities_with_gap"], 3, "{status}");
    let failed = json(&url, &["inbox", "failed", CONSUMER, "--json"]).await;
    assert_eq!(failed.as_array().map(Vec::len), Some(2), "{failed}");
    let gaps = json(&url, &["inbox", "gaps", CONSUMER, "--json"]).await;
    assert!(
        gaps.as_array().expect("array").iter().any(|g| g["entity_key"] == "order-2" && g["last_seq"] == 0),
        "{gaps}"
    );

    // Retry: parked again, and the consumer's sweep applies it and its successor, in order.
    POISON_FAILS.store(false, Ordering::SeqCst);
    let id = poisoned.id.to_string();
    assert!(run(&url, &["inbox", "retry", CONSUMER, &id]).await.status.success());
    wait_applied(&pool, "order-1", &[1, 2]).await;
    assert_refused(&run(&url, &["inbox", "retry", CONSUMER, &id]).await, 1, "has no failed event");

    // Skip a gap: only with --yes; then the parked event is applied.
    assert_refused(&run(&url, &["inbox", "skip-gap", CONSUMER, "order-2"]).await, 2, "--yes");
    assert!(run(&url, &["inbox", "skip-gap", CONSUMER, "order-2", "--yes"]).await.status.success());
    wait_applied(&pool, "order-2", &[2]).await;
    assert_refused(&run(&url, &["inbox", "skip-gap", CONSUMER, "order-2", "--yes"]).await, 1, "has no gap");

    // Skip a failed event with a reason: never applied, its successor is.
    let skip = ["inbox", "skip", CONSUMER, &skipped.id.to_string(), "--reason", "bad data upstream"];
    assert!(run(&url, &skip).await.status.success());
    wait_applied(&pool, "order-3", &[2]).await;
    let reason: Option<String> =
        sqlx::query_scalar("SELECT last_error FROM inbox_events WHERE consumer = $1 AND event_id = $2")
            .bind(CONSUMER)
            .bind(skipped.id.as_uuid())
            .fetch_one(&pool)
            .await
            .expect("row");
    assert!(reason.is_some_and(|r| r.contains("bad data upstream")), "the reason is recorded");
    let after = json(&url, &["inbox", "status", CONSUMER, "--json"]).await;
    assert_eq!((after["failed"].as_i64(), after["parked"].as_i64()), (Some(0), Some(0)), "{after}");

    runner.shutdown().await.expect("shutdown");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn inbox_commands_refuse_what_they_cannot_use() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let url = h.db().url();
    outbox_inbox::migrate(h.pool()).await.expect("inbox tables");
    assert_refused(&run(&url, &["inbox", "retry", CONSUMER, "not-an-id"]).await, 2, "expected an event id");
    let unknown = "00000000-0000-0000-0000-00000000abcd";
    assert_refused(&run(&url, &["inbox", "skip", CONSUMER, unknown, "--yes"]).await, 1, "has no failed event");
    assert_refused(&run(&url, &["inbox", "skip", CONSUMER, unknown]).await, 2, "--yes");
    h.close().await.expect("cleanup");

    let empty = outbox_testkit::TestDb::empty().await.expect("db");
    assert_refused(&run(&empty.url(), &["inbox", "status", CONSUMER]).await, 1, "inbox tables do not exist");
    empty.close().await.expect("cleanup");
}
