//! Each fault of the `FaultyPublisher` really happens, and the relay handles it: what reaches the
//! queue, how many times, and what is recorded on the row.

use std::time::Duration;

use outbox_testkit::{Fault, Harness, wait_for};
use outbox_types::{FailureKind, NewEvent, RetryPolicy};
use uuid::Uuid;

/// A harness whose relay starts when a test has queued its faults, with short retries.
async fn harness() -> Harness {
    Harness::builder()
        .defer_relay()
        .relay(|r| {
            r.retry_policy(
                RetryPolicy::default().initial_delay(Duration::from_millis(100)).max_delay(Duration::from_millis(300)),
            )
            .confirm_timeout(Duration::from_secs(2))
            .poll_interval(Duration::from_millis(100))
        })
        .start()
        .await
        .expect("harness")
}

async fn one_event(h: &Harness) -> Uuid {
    let mut tx = h.pool().begin().await.expect("begin");
    let event = NewEvent::json("order.paid", &serde_json::json!({ "id": 1 })).expect("json").entity("o-1");
    let id = h.outbox().enqueue(&mut *tx, event).await.expect("enqueue");
    tx.commit().await.expect("commit");
    *id.as_uuid()
}

/// Runs the relay with `fault` queued `n` times until the row reaches `status`; returns the row's
/// attempts and error kind.
async fn run(h: &mut Harness, n: usize, fault: Fault, status: &'static str) -> (i32, Option<String>) {
    h.faults().inject(n, fault.clone());
    h.start_relay().await.expect("relay");
    wait_for(status, Duration::from_secs(20), || async {
        let s: String = sqlx::query_scalar("SELECT status FROM outbox_events")
            .fetch_one(h.pool())
            .await
            .map_err(|e| e.to_string())?;
        outbox_testkit::equal(s, status)
    })
    .await
    .expect("row reached its status");
    h.stop_relay().await.expect("shutdown");
    assert_eq!(h.faults().applied(), vec![fault; n], "every queued fault was applied");
    assert_eq!(h.faults().pending(), 0);
    sqlx::query_as("SELECT attempts, last_error_kind FROM outbox_events").fetch_one(h.pool()).await.expect("row")
}

#[tokio::test]
async fn nacks_are_retried_with_the_same_id_and_delivered_once() {
    let mut h = harness().await;
    let id = one_event(&h).await;
    let (attempts, kind) = run(&mut h, 2, Fault::Nack, "published").await;
    assert_eq!((attempts, kind.as_deref()), (3, Some("transient")), "two nacked attempts, then confirmed");
    h.recorder().wait_for_count(1, Duration::from_secs(5)).await.expect("delivered");
    assert_eq!(h.recorder().ids(), [id].into_iter().collect(), "nacked messages never reached the queue");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn an_unroutable_return_quarantines_the_event() {
    let mut h = harness().await;
    one_event(&h).await;
    let (attempts, kind) = run(&mut h, 1, Fault::Unroutable, "quarantined").await;
    assert_eq!((attempts, kind.as_deref()), (1, Some("rejected")));
    assert_eq!(h.recorder().count(), 0);
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn auth_failures_are_retried() {
    let mut h = harness().await;
    one_event(&h).await;
    let (attempts, kind) = run(&mut h, 2, Fault::Fail(FailureKind::Auth), "published").await;
    assert_eq!((attempts, kind.as_deref()), (3, Some("auth")));
    h.close().await.expect("cleanup");
}

/// A lost confirm: the broker has the message but the relay never hears of it, so after the
/// confirm timeout it publishes again with the same id. The only broker-side duplicate (G3).
#[tokio::test]
async fn a_lost_confirm_republishes_with_the_same_id() {
    let mut h = harness().await;
    let id = one_event(&h).await;
    let (attempts, _) = run(&mut h, 1, Fault::LoseConfirm, "published").await;
    assert_eq!(attempts, 2);
    h.recorder().wait_for_count(2, Duration::from_secs(5)).await.expect("both copies arrived");
    assert_eq!(h.recorder().duplicates().get(&id), Some(&2), "the same event id twice");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn a_delayed_confirm_within_the_timeout_is_one_publish() {
    let mut h = harness().await;
    let id = one_event(&h).await;
    let (attempts, kind) = run(&mut h, 1, Fault::DelayConfirm(Duration::from_millis(400)), "published").await;
    assert_eq!((attempts, kind), (1, None));
    h.recorder().wait_for_count(1, Duration::from_secs(5)).await.expect("delivered");
    assert!(h.recorder().duplicates().is_empty());
    assert!(h.recorder().ids().contains(&id));
    h.close().await.expect("cleanup");
}
