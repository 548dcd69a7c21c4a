//! One topology for both sides: the relay and the consumer each declare all of it on connect, so
//! either may start first and no event finds no queue. Events published before any consumer
//! existed wait in the queue the relay declared, and so do those routed to partitions.

use std::time::Duration;

use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner, RunnerHandle, Topology};
use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, Relay, RelayHandle};
use outbox_testkit::{TestBroker, TestDb, equal, wait_for};
use outbox_types::NewEvent;
use tower::Layer;

const ENTITIES: usize = 5;
const PER_ENTITY: usize = 20;
const EVENTS: i64 = (ENTITIES * PER_ENTITY) as i64;
const DEADLINE: Duration = Duration::from_secs(60);

async fn applied(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let event = req.event();
    let (entity, seq) = event.entity.as_ref().map(|e| (e.key.clone(), e.seq as i64)).unzip();
    sqlx::query("INSERT INTO applied (entity, seq) VALUES ($1, $2)").bind(entity).bind(seq).execute(req.conn()).await?;
    Ok(req)
}

fn consumer(db: &TestDb, topology: &Topology) -> RunnerHandle {
    let service = InboxLayer::new(db.pool().clone(), "topology").layer(tower::service_fn(applied));
    let runner = InboxRunner::builder(outbox_testkit::amqp_url(), service).topology(topology).build();
    runner.expect("runner").spawn()
}

fn relay(db: &TestDb, topology: &Topology) -> RelayHandle {
    let publisher = AmqpPublisher::builder(outbox_testkit::amqp_url()).build().expect("publisher");
    Relay::builder(db.pool(), publisher).topology(topology).build().expect("relay").spawn()
}

async fn setup() -> (TestDb, TestBroker) {
    let db = TestDb::new().await.expect("database");
    sqlx::raw_sql("CREATE TABLE applied (id bigserial PRIMARY KEY, entity text NOT NULL, seq bigint NOT NULL)")
        .execute(db.pool())
        .await
        .expect("applied table");
    (db, TestBroker::new().await.expect("broker"))
}

/// `PER_ENTITY` events for each of `ENTITIES` entities, interleaved, one transaction each.
async fn enqueue(db: &TestDb) {
    let outbox = Outbox::new();
    for n in 0..PER_ENTITY {
        for entity in 0..ENTITIES {
            let event = NewEvent::json("item.changed", &serde_json::json!({ "n": n })).expect("event");
            let mut tx = db.pool().begin().await.expect("begin");
            outbox.enqueue(&mut *tx, event.entity(format!("item-{entity}"))).await.expect("enqueue");
            tx.commit().await.expect("commit");
        }
    }
}

async fn count(db: &TestDb, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(db.pool()).await.expect(sql)
}

/// Every event applied once, each entity's in sequence order, nothing quarantined.
async fn assert_applied_once_in_order(db: &TestDb) {
    wait_for("every event applied", DEADLINE, || async {
        equal(count(db, "SELECT count(*) FROM applied").await, EVENTS)
    })
    .await
    .expect("applied");
    let out_of_order = count(
        db,
        "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY entity ORDER BY id) AS n FROM applied) a \
         WHERE seq <> n",
    )
    .await;
    assert_eq!(out_of_order, 0, "each entity's events applied once, in sequence order");
    assert_eq!(
        count(db, "SELECT count(*) FROM outbox_events WHERE status <> 'published'").await,
        0,
        "none quarantined"
    );
}

/// Waits until the relay published every event, no consumer running.
async fn published_with_no_consumer(db: &TestDb) {
    wait_for("every event published with no consumer running", DEADLINE, || async {
        equal(count(db, "SELECT count(*) FROM outbox_events WHERE status = 'published'").await, EVENTS)
    })
    .await
    .expect("published");
}

/// Asserts every event applied once and in order, then stops both sides and cleans up.
async fn applied_then_stopped(db: TestDb, broker: TestBroker, relay: RelayHandle, consumer: RunnerHandle) {
    assert_applied_once_in_order(&db).await;
    consumer.shutdown().await.expect("consumer");
    relay.shutdown().await.expect("relay");
    broker.close().await.expect("broker cleanup");
    db.close().await.expect("database cleanup");
}

#[tokio::test]
async fn events_published_before_any_consumer_wait_in_the_queue_the_relay_declared() {
    let (db, broker) = setup().await;
    let topology = broker.topology("orders", "late.consumer");
    let relay = relay(&db, &topology);
    enqueue(&db).await;
    published_with_no_consumer(&db).await;
    let consumer = consumer(&db, &topology);
    applied_then_stopped(db, broker, relay, consumer).await;
}

#[tokio::test]
async fn a_consumer_started_first_declares_what_the_relay_publishes_to() {
    let (db, broker) = setup().await;
    let topology = broker.topology("orders", "early.consumer");
    let consumer = consumer(&db, &topology);
    wait_for("the consumer consuming", DEADLINE, || async { consumer.health().is_ready().then_some(()) })
        .await
        .expect("consuming");
    enqueue(&db).await;
    let relay = relay(&db, &topology);
    applied_then_stopped(db, broker, relay, consumer).await;
}

#[tokio::test]
async fn partitions_declared_by_the_relay_deliver_every_entity_in_order() {
    let (db, broker) = setup().await;
    let topology = Topology::partitioned(broker.name("orders"), &broker.name("parts"), 3);
    broker.remember_topology(&topology);
    let relay = relay(&db, &topology);
    enqueue(&db).await;
    published_with_no_consumer(&db).await;
    let consumer = consumer(&db, &topology);
    applied_then_stopped(db, broker, relay, consumer).await;
}
