//! Shared set-up of the relay tests: an isolated database, exchange and queue per test.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use outbox_core::{EventId, NewEvent};
use outbox_producer::{AmqpPublisher, Outbox, Relay, RelayBuilder};
use outbox_testkit::{Recorder, TestBroker, TestDb};
use sqlx::PgPool;
use uuid::Uuid;

pub struct Env {
    pub db: TestDb,
    pub broker: TestBroker,
    pub exchange: String,
    pub queue: String,
    pub recorder: Recorder,
}

impl Env {
    /// A database, a topic exchange and a queue bound to everything, and a recorder on the queue.
    pub async fn new() -> Self {
        let db = TestDb::new().await.expect("test db");
        let broker = TestBroker::new().await.expect("broker");
        let exchange = broker.declare_exchange("events", lapin::ExchangeKind::Topic).await.expect("exchange");
        let queue = broker.declare_queue("all").await.expect("queue");
        broker.bind(&queue, &exchange, "#").await.expect("bind");
        let recorder = Recorder::start(&queue).await.expect("recorder");
        Self { db, broker, exchange, queue, recorder }
    }

    pub fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// A relay on this test's database and exchange, with test-friendly timings.
    pub fn relay(&self) -> RelayBuilder<AmqpPublisher> {
        self.relay_with(publisher())
    }

    pub fn relay_with<P: outbox_core::Publisher>(&self, publisher: P) -> RelayBuilder<P> {
        Relay::builder(self.pool().clone(), publisher)
            .exchange(&self.exchange)
            .declare_exchange(false)
            .lease(Duration::from_secs(3))
            .confirm_timeout(Duration::from_secs(2))
            .poll_interval(Duration::from_millis(200))
            .shutdown_deadline(Duration::from_secs(5))
    }

    pub async fn close(self) {
        drop(self.recorder);
        self.broker.close().await.expect("broker cleanup");
        self.db.close().await.expect("db cleanup");
    }
}

pub fn publisher() -> AmqpPublisher {
    AmqpPublisher::builder(outbox_testkit::amqp_url()).connect_timeout(Duration::from_secs(2)).build()
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
        (count_status(pool, "published").await >= n).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; published {}", 0));
}
