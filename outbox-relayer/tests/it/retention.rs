//! Retention in the relay: three relays run it at once over 30,000 old published rows while they
//! publish new events; every old row goes, no relay fails or waits on another, the new events all
//! arrive once and in order, and nothing that waits is touched.

use std::time::Duration;

use outbox_ops::Retention;
use outbox_system_tests::sizes;
use outbox_testkit::{Harness, wait_for};
use outbox_types::NewEvent;

const OLD: i64 = sizes::RETENTION_OLD_ROWS;
const WAIT: Duration = Duration::from_secs(120);

async fn old_published(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE published_at < now() - interval '1 day'")
        .fetch_one(pool)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_relays_share_retention_while_they_publish() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let pool = h.pool().clone();
    sqlx::query(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type, status,
                                    created_at, published_at)
         SELECT gen_random_uuid(), 'order.changed', 1, 'old-' || (i % 100), i / 100 + 1, '\\x7b7d', 'application/json',
                'published', now() - interval '2 days', now() - interval '2 days'
         FROM generate_series(0, $1 - 1) AS i",
    )
    .bind(OLD)
    .execute(&pool)
    .await
    .expect("old rows");
    let mut tx = pool.begin().await.expect("begin");
    let events: Vec<NewEvent> = (0..200)
        .map(|i| {
            NewEvent::json("order.changed", &serde_json::json!({ "i": i }))
                .expect("json")
                .entity(format!("new-{}", i % 20))
        })
        .collect();
    let ids = h.outbox().enqueue_many(&mut *tx, events).await.expect("enqueue");
    tx.commit().await.expect("commit");

    let retention = Retention::builder(Duration::from_secs(86_400)).batch_size(500).build().expect("retention");
    let relays: Vec<_> = (0..3)
        .map(|_| {
            h.relay_builder_with(h.new_publisher())
                .retention(Some(retention.clone()))
                .retention_interval(Duration::from_millis(100))
                .build()
                .expect("relay")
                .spawn()
        })
        .collect();
    wait_for("every old row deleted", WAIT, || async { outbox_testkit::equal(old_published(&pool).await, 0) })
        .await
        .expect("retention");
    h.recorder().wait_for_count(ids.len(), WAIT).await.expect("the new events published");
    for relay in relays {
        relay.shutdown().await.expect("a relay ends without error");
    }
    h.recorder().all_delivered(ids.iter().map(|id| *id.as_uuid())).expect("every new event");
    assert!(h.recorder().duplicates().is_empty(), "each once");
    h.recorder().in_entity_order().expect("in order");
    let published: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(published, 200, "the recent published rows stay");
    h.close().await.expect("cleanup");
}
