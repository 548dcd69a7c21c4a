//! The runner's dedup window: processed event ids older than it are deleted while the runner runs,
//! parked, failed and recent ones stay, and an ordered event delivered again after its id is gone
//! is still dropped, by its sequence.

use std::time::{Duration, SystemTime};

use outbox_inbox::{InboxLayer, InboxRunner};
use outbox_testkit::{Harness, wait_for};
use outbox_types::NewEvent;
use sqlx::PgPool;
use tower::Layer;

use crate::support::{apply, effects, effects_table};

async fn ids_by_status(pool: &PgPool) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT status, count(*) FROM inbox_events WHERE consumer = 'shipping' GROUP BY 1 ORDER BY 1")
        .fetch_all(pool)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_past_the_dedup_window_go_and_a_late_duplicate_is_still_dropped() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let pool = h.pool().clone();
    effects_table(&pool).await;
    let first = NewEvent::json("order.changed", &serde_json::json!({ "amount": 1 }))
        .expect("json")
        .entity("order-1")
        .into_event(Some(1), SystemTime::now());
    let service = InboxLayer::new(pool.clone(), "shipping").layer(tower::service_fn(apply));
    let runner = InboxRunner::builder(outbox_testkit::amqp_url(), service)
        .topology(h.topology())
        .dedup_window(Some(Duration::from_secs(3600)))
        .retention_interval(Duration::from_millis(200))
        .build()
        .expect("runner")
        .spawn();
    h.broker().publish_events(h.exchange(), "order.changed", std::slice::from_ref(&first)).await.expect("publish");
    wait_for("the first event applied", Duration::from_secs(60), || async {
        outbox_testkit::equal(effects(&pool, "order-1").await, [1])
    })
    .await
    .expect("applied");

    // The applied event's id ages past the window; old parked and failed rows and a recent
    // processed one are there too.
    for statement in [
        "UPDATE inbox_events SET processed_at = now() - interval '2 hours' WHERE consumer = 'shipping'",
        "INSERT INTO inbox_events (consumer, event_id, entity_key, seq, status, received_at)
         VALUES ('shipping', gen_random_uuid(), 'p', 2, 'parked', now() - interval '2 hours'),
                ('shipping', gen_random_uuid(), 'f', 1, 'failed', now() - interval '2 hours')",
        "INSERT INTO inbox_events (consumer, event_id, status, received_at, processed_at)
         VALUES ('shipping', gen_random_uuid(), 'processed', now(), now())",
    ] {
        sqlx::query(statement).execute(&pool).await.expect(statement);
    }
    let left = wait_for("the old id deleted", Duration::from_secs(60), || async {
        let left = ids_by_status(&pool).await;
        (left.iter().any(|(s, n)| s == "processed" && *n == 1)).then_some(left)
    })
    .await
    .expect("retention");
    let expected: Vec<(String, i64)> =
        [("failed", 1), ("parked", 1), ("processed", 1)].iter().map(|(s, n)| ((*s).to_owned(), *n)).collect();
    assert_eq!(left, expected);

    // The same event again: its id is gone, its sequence is not.
    h.broker().publish_events(h.exchange(), "order.changed", &[first]).await.expect("publish");
    wait_for("the duplicate dropped as stale", Duration::from_secs(60), || async {
        outbox_testkit::equal(runner.stats().stale, 1)
    })
    .await
    .expect("stale");
    assert_eq!(effects(&pool, "order-1").await, [1], "applied once");
    runner.shutdown().await.expect("shutdown");
    h.close().await.expect("cleanup");
}
