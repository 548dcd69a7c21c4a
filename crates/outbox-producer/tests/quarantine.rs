//! Quarantine by the broker's own answer (the scenario of rejected payloads is in the testkit's
//! `scenarios.rs`): a message over RabbitMQ's size limit closes the channel; only that event is
//! quarantined, the one sent with it is retried and delivered.

use std::time::Duration;

use outbox_core::{NewEvent, Payload};
use outbox_producer::Outbox;
use outbox_testkit::{Harness, wait_for};
use sqlx::PgPool;
use uuid::Uuid;

async fn enqueue_one(pool: &PgPool, outbox: &Outbox, entity: &str, bytes: usize) -> Uuid {
    let event = NewEvent::new("order.changed", Payload::new(vec![b'x'; bytes], "application/octet-stream"));
    let mut tx = pool.begin().await.expect("begin");
    let id = outbox.enqueue(&mut *tx, event.entity(entity)).await.expect("enqueue");
    tx.commit().await.expect("commit");
    *id.as_uuid()
}

async fn status_of(pool: &PgPool, id: Uuid) -> (String, Option<String>, Option<String>) {
    sqlx::query_as("SELECT status, last_error_kind, last_error FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("row")
}

/// RabbitMQ's own `max_message_size` is 128 MiB by default; no client-side limit here, so the
/// broker must answer.
#[tokio::test]
async fn message_over_the_brokers_size_limit_is_quarantined_by_the_broker_answer() {
    let mut h = Harness::builder()
        .defer_relay()
        .publisher(|b| b.max_message_bytes(usize::MAX))
        .relay(|b| b.lease(Duration::from_secs(20)).confirm_timeout(Duration::from_secs(10)))
        .start()
        .await
        .expect("harness");
    let outbox = Outbox::builder().max_payload_bytes(200 * 1024 * 1024).build();
    let small = enqueue_one(h.pool(), &outbox, "S", 10).await;
    let huge = enqueue_one(h.pool(), &outbox, "H", 129 * 1024 * 1024).await;
    h.start_relay().await.expect("relay");

    wait_for("the huge event quarantined", Duration::from_secs(60), || async {
        (status_of(h.pool(), huge).await.0 == "quarantined").then_some(())
    })
    .await
    .expect("quarantined");
    h.recorder().wait_for_count(1, Duration::from_secs(20)).await.expect("the small event is delivered");
    h.stop_relay().await.expect("shutdown");

    let (_, kind, reason) = status_of(h.pool(), huge).await;
    assert_eq!(kind.as_deref(), Some("rejected"));
    assert!(reason.as_deref().is_some_and(|r| r.contains("max size")), "{reason:?}");
    assert_eq!(status_of(h.pool(), small).await.0, "published");
    assert_eq!(h.recorder().ids(), [small].into_iter().collect());
    h.close().await.expect("cleanup");
}
