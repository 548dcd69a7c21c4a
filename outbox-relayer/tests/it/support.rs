//! Shared set-up of the relay tests: a harness per test, events to publish, and counts.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, RelayBuilder};
use outbox_testkit::Harness;
use outbox_types::{EventId, NewEvent};
use sqlx::PgPool;
use uuid::Uuid;

/// A harness (database, exchange, queues, recorder) with no relay running: each test starts the
/// relay it needs.
pub async fn env() -> Harness {
    Harness::builder().defer_relay().start().await.expect("harness")
}

/// A relay on the harness's database and exchange, with its test-friendly timings.
pub fn relay(h: &Harness) -> RelayBuilder<AmqpPublisher> {
    h.relay_builder_with(publisher())
}

pub fn publisher() -> AmqpPublisher {
    AmqpPublisher::builder(outbox_testkit::amqp_url()).connect_timeout(Duration::from_secs(2)).build_unchecked()
}

pub fn event(entity: Option<&str>) -> NewEvent {
    let e = NewEvent::json("order.changed", &serde_json::json!({ "pad": "x".repeat(200) })).expect("json");
    match entity {
        Some(k) => e.entity(k),
        None => e,
    }
}

/// Commits `per_entity` events for each of `entities` entities, interleaved, plus `unordered`
/// events without entity; returns the ids in commit order.
pub async fn enqueue(pool: &PgPool, entities: usize, per_entity: usize, unordered: usize) -> Vec<Uuid> {
    let outbox = Outbox::new();
    let mut ids = Vec::new();
    let mut batch = Vec::new();
    for round in 0..per_entity {
        for e in 0..entities {
            batch.push(event(Some(&format!("entity-{e}"))));
        }
        if round == 0 {
            batch.extend((0..unordered).map(|_| event(None)));
        }
        if batch.len() >= 1000 || round + 1 == per_entity {
            let mut tx = pool.begin().await.expect("begin");
            let got: Vec<EventId> = outbox.enqueue_many(&mut *tx, std::mem::take(&mut batch)).await.expect("enqueue");
            tx.commit().await.expect("commit");
            ids.extend(got.into_iter().map(|id| *id.as_uuid()));
        }
    }
    ids
}

pub async fn count_status(pool: &PgPool, status: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = $1")
        .bind(status)
        .fetch_one(pool)
        .await
        .expect("count")
}

pub async fn wait_all_published(pool: &PgPool, n: i64, deadline: Duration) {
    outbox_testkit::wait_for("every event published", deadline, || async {
        outbox_testkit::at_least(count_status(pool, "published").await, n)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Runs `scenario` on a runtime of its own with a metrics recorder local to it, which the scenario
/// reads through the snapshotter it is given (tests of the relay's gauges and counters).
pub fn with_recorder<F: std::future::Future<Output = ()>>(
    scenario: impl FnOnce(metrics_util::debugging::Snapshotter) -> F,
) {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    metrics::with_local_recorder(&recorder, || runtime.block_on(scenario(snapshotter)));
}
