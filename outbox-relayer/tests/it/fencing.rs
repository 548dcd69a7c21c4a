//! Fencing: a relay whose lease expired while it waited for the broker (paused, partitioned, slow)
//! cannot overwrite the outcome recorded by the relay that took its claim over.

use std::time::Duration;

use outbox_testkit::{Fault, FaultyPublisher, Harness, wait_for};
use outbox_types::NewEvent;
use uuid::Uuid;

#[tokio::test]
async fn a_relay_paused_past_its_lease_cannot_overwrite_the_takeover() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let db = h.db();
    let recorder = h.recorder();

    let mut tx = db.pool().begin().await.expect("begin");
    let events = (0..5).map(|i| NewEvent::json("order.changed", &serde_json::json!({ "n": i })).expect("json"));
    let ids: Vec<Uuid> = h
        .outbox()
        .enqueue_many(&mut *tx, events.map(|e| e.entity("order-1")).collect::<Vec<_>>())
        .await
        .expect("enqueue")
        .into_iter()
        .map(|id| *id.as_uuid())
        .collect();
    tx.commit().await.expect("commit");

    // One event per claim, so that each relay's claim is exactly the entity's head.
    let relay = |publisher| {
        h.relay_builder_with(publisher)
            .events_per_entity(1)
            .lease(Duration::from_secs(2))
            .confirm_timeout(Duration::from_millis(1500))
            .build()
            .expect("relay")
    };
    let publisher = || FaultyPublisher::new(h.new_publisher());

    // Relay A claims the head of the entity and stalls before sending it, past its lease.
    let stalled = publisher();
    stalled.inject(1, Fault::Stall(Duration::from_secs(6)));
    let a = relay(stalled);
    let a = tokio::spawn(async move { a.run_batch().await });
    let head_row = "SELECT status, attempts, last_error FROM outbox_events WHERE seq = 1";
    wait_for("relay A's claim to expire", Duration::from_secs(10), || async {
        let expired: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_events WHERE lease_owner IS NOT NULL AND lease_until < now()",
        )
        .fetch_one(db.pool())
        .await
        .expect("count");
        (expired > 0).then_some(())
    })
    .await
    .expect("A claimed and its lease ran out");

    // Relay B takes the expired claim over; the broker nacks its send, so B records a retry.
    let nacking = publisher();
    nacking.inject(1, Fault::Nack);
    let b = relay(nacking);
    let report = b.run_batch().await.expect("B's batch");
    assert_eq!((report.claimed, report.retried, report.lost_claims), (1, 1, 0), "{report:?}");

    // A wakes up, sends, and the broker confirms: but the claim is B's now, so A records nothing and
    // B's outcome (retry later, with its reason) stands.
    let report = a.await.expect("A's task").expect("A's batch");
    assert_eq!((report.claimed, report.published, report.lost_claims), (1, 1, 1), "{report:?}");
    let (status, attempts, error): (String, i32, Option<String>) =
        sqlx::query_as(head_row).fetch_one(db.pool()).await.expect("head");
    assert_eq!((status.as_str(), attempts), ("pending", 2), "A's late confirm did not overwrite B's outcome");
    assert!(error.is_some_and(|e| e.contains("nack")), "B's failure reason is kept");

    // The retry goes out in order; only A's late send repeats at the broker.
    sqlx::query("UPDATE outbox_events SET next_attempt_at = now() WHERE seq = 1")
        .execute(db.pool())
        .await
        .expect("due");
    let b = relay(publisher());
    let mut published = 0;
    while published < ids.len() {
        published += b.run_batch().await.expect("B's batch").published;
    }
    recorder.wait_for_count(ids.len() + 1, Duration::from_secs(10)).await.expect("deliveries");
    recorder.all_delivered(ids.iter().copied()).expect("nothing lost");
    assert_eq!(recorder.duplicates().keys().copied().collect::<Vec<_>>(), [ids[0]], "only A's stale send repeats");

    h.close().await.expect("cleanup");
}
