//! What an operator sees of a relay that stalls past its lease: the backlog shows the expired
//! lease and how far each entity is behind, and the relay that takes the claim over counts it
//! (`outbox_lease_takeovers_total`), after which no lease is expired any more.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, Snapshotter};
use outbox_ops::admin::{self, Backlog};
use outbox_testkit::{Fault, FaultyPublisher, Harness, wait_for};
use outbox_types::NewEvent;

fn events(entity: &str, n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent::json("order.changed", &serde_json::json!({ "n": i })).expect("json").entity(entity))
        .collect()
}

/// The takeover counter, if it was recorded. It has no label: relay ids are minted per process,
/// so a label of them would grow without bound; the log line names the relay taken over from.
fn takeovers(snapshotter: &Snapshotter) -> Option<u64> {
    snapshotter.snapshot().into_vec().into_iter().find_map(|(key, _, _, value)| match value {
        DebugValue::Counter(n) if key.key().name() == "outbox_lease_takeovers_total" => Some(n),
        _ => None,
    })
}

async fn scenario(snapshotter: &Snapshotter) {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let pool = h.db().pool().clone();
    let mut tx = pool.begin().await.expect("begin");
    h.outbox().enqueue_many(&mut *tx, events("order-1", 5)).await.expect("enqueue");
    h.outbox().enqueue_many(&mut *tx, events("order-2", 3)).await.expect("enqueue");
    tx.commit().await.expect("commit");

    let b = admin::backlog(&pool).await.expect("backlog");
    assert_eq!((b.waiting, b.entities_behind, b.largest_gap, b.expired_leases), (8, 2, 5, 0), "{b:?}");
    assert!(b.waiting_exact && b.entities_exact(), "{b:?}");

    let relay = |publisher, id: &str| {
        h.relay_builder_with(publisher)
            .relay_id(id)
            .events_per_entity(1)
            .lease(Duration::from_secs(2))
            .confirm_timeout(Duration::from_millis(1500))
            .build()
            .expect("relay")
    };
    // Relay A claims both heads and stalls before sending them, past its lease.
    let stalled = FaultyPublisher::new(h.new_publisher());
    stalled.inject(1, Fault::Stall(Duration::from_secs(8)));
    let a = relay(stalled, "relay-a");
    let a = tokio::spawn(async move { a.run_batch().await });
    let expired: Backlog = wait_for("relay A's leases to expire", Duration::from_secs(20), || async {
        let b = admin::backlog(&pool).await.expect("backlog");
        (b.expired_leases == 2).then_some(b)
    })
    .await
    .expect("A's leases expire while it stalls");
    assert_eq!((expired.waiting, expired.entities_behind, expired.largest_gap), (8, 2, 5));
    assert_eq!(takeovers(snapshotter), None, "nothing taken over yet");

    // Relay B takes both over and publishes them: counted once per row.
    let b = relay(FaultyPublisher::new(h.new_publisher()), "relay-b");
    let report = b.run_batch().await.expect("B's batch");
    assert_eq!((report.claimed, report.published), (2, 2), "{report:?}");
    assert_eq!(takeovers(snapshotter), Some(2));
    let after = admin::backlog(&pool).await.expect("backlog");
    assert_eq!((after.waiting, after.entities_behind, after.largest_gap, after.expired_leases), (6, 2, 4, 0));

    // A wakes, and its late confirms record nothing: the claims are B's.
    let report = a.await.expect("A's task").expect("A's batch");
    assert_eq!(report.lost_claims, 2, "{report:?}");
    h.close().await.expect("cleanup");
}

#[test]
fn an_expired_lease_shows_in_the_backlog_and_its_takeover_is_counted() {
    crate::support::with_recorder(|snapshotter| async move { scenario(&snapshotter).await });
}
