//! The whole product end to end over partition queues with single active consumers: producer,
//! relay, consumers. (Three consumer processes with one killed: `examples/shipping-service/tests`.)

use std::time::Duration;

use lapin::ExchangeKind;
use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner, QueueType, Topology};
use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, Partitioned, Relay};
use outbox_system_tests::count;
use outbox_system_tests::sizes::{PARTITIONED_WRITES, Writes};
use outbox_testkit::{TestBroker, TestDb, wait_for};
use outbox_types::{NewEvent, RetryPolicy};
use sqlx::PgPool;
use tower::Layer;

const PARTITIONS: u32 = 4;

/// The handler of both tests: one row per applied event, in the inbox's transaction.
async fn apply(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let body: serde_json::Value = req.event().payload.json().map_err(|_| HandlerError::permanent("not JSON"))?;
    let entity = req.event().entity.as_ref().map(|e| (e.key.clone(), e.seq as i64));
    let (key, seq) = entity.ok_or_else(|| HandlerError::permanent("unordered event"))?;
    sqlx::query("INSERT INTO applied (entity, seq, version) VALUES ($1, $2, $3)")
        .bind(key)
        .bind(seq)
        .bind(body["version"].as_i64())
        .execute(req.conn())
        .await?;
    Ok(req)
}

async fn applied_table(pool: &PgPool) {
    sqlx::query(
        "CREATE TABLE applied (n bigserial PRIMARY KEY, entity text NOT NULL, seq bigint NOT NULL, version bigint)",
    )
    .execute(pool)
    .await
    .expect("create");
}

/// Per entity, the sequence numbers in the order they were applied.
async fn applied_per_entity(pool: &PgPool) -> std::collections::HashMap<String, Vec<i64>> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT entity, seq FROM applied ORDER BY n").fetch_all(pool).await.expect("applied");
    let mut map: std::collections::HashMap<String, Vec<i64>> = std::collections::HashMap::new();
    for (entity, seq) in rows {
        map.entry(entity).or_default().push(seq);
    }
    map
}

async fn partitions(broker: &TestBroker, exchange: &str, kind: QueueType) -> Topology {
    let base = broker.name("shipping");
    let topology =
        outbox_inbox::declare_partitions_as(broker.channel(), kind, exchange, &base, "partition.", PARTITIONS)
            .await
            .expect("partitions");
    for q in topology.queues.iter().chain([&topology.dead_letter_queue]) {
        broker.remember_queue(q);
    }
    broker.remember_exchange(&topology.dead_letter_exchange);
    topology
}

/// A relay publishing over the partitions' routing keys.
fn relay(pool: &PgPool, exchange: &str) -> outbox_relayer::RelayHandle {
    Relay::builder(pool, AmqpPublisher::builder(outbox_testkit::amqp_url()).build_unchecked())
        .exchange(exchange)
        .declare_exchange(false)
        .routing(Partitioned::new(PARTITIONS))
        .build()
        .expect("relay")
        .spawn()
}

fn runner(pool: &PgPool, topology: &Topology) -> outbox_inbox::RunnerHandle {
    let service = InboxLayer::new(pool.clone(), "shipping").layer(tower::service_fn(apply));
    InboxRunner::builder(outbox_testkit::amqp_url(), service)
        .topology(topology)
        .prefetch(100)
        .concurrency(8)
        .retry_policy(
            RetryPolicy::default().initial_delay(Duration::from_millis(100)).max_delay(Duration::from_secs(1)),
        )
        .sweep_interval(Duration::from_millis(500))
        .build()
        .expect("runner")
        .spawn()
}

/// End to end: writers commit changes with their events (2,000; 10,000 in the long tier), the
/// relay publishes them over partitions, two consumers apply them; the consumer's table matches
/// the producer's exactly.
#[tokio::test]
async fn end_to_end_the_consumers_table_equals_the_producers() {
    end_to_end(PARTITIONED_WRITES.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn end_to_end_the_consumers_table_equals_the_producers_long_tier() {
    end_to_end(PARTITIONED_WRITES.long).await;
}

async fn end_to_end(writes: Writes) {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    applied_table(pool).await;
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY, version bigint NOT NULL)")
        .execute(pool)
        .await
        .expect("orders");
    sqlx::query("INSERT INTO orders SELECT g, 0 FROM generate_series(1, 500) g").execute(pool).await.expect("seed");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("events", ExchangeKind::Topic).await.expect("exchange");
    let topology = partitions(&broker, &exchange, QueueType::Classic).await;

    let relay = relay(pool, &exchange);
    let consumers: Vec<_> = (0..2).map(|_| runner(pool, &topology)).collect();

    // Each writer's transaction bumps a random order's version and enqueues its event.
    let outbox = Outbox::new();
    let writers = (0..writes.writers).map(|w| {
        let (pool, outbox) = (pool.clone(), outbox.clone());
        tokio::spawn(async move {
            use rand::Rng;
            for _ in 0..writes.per_writer {
                let id: i64 = rand::rng().random_range(1..=500);
                let mut tx = pool.begin().await.expect("begin");
                let version: i64 =
                    sqlx::query_scalar("UPDATE orders SET version = version + 1 WHERE id = $1 RETURNING version")
                        .bind(id)
                        .fetch_one(&mut *tx)
                        .await
                        .expect("update");
                let event = NewEvent::json("order.changed", &serde_json::json!({ "order_id": id, "version": version }))
                    .expect("json")
                    .entity(format!("order-{id}"));
                outbox.enqueue(&mut *tx, event).await.expect("enqueue");
                tx.commit().await.expect("commit");
            }
            w
        })
    });
    for w in writers.collect::<Vec<_>>() {
        w.await.expect("writer");
    }
    wait_for("every event applied", Duration::from_secs(180), || async {
        outbox_testkit::at_least(count(pool, "SELECT count(*) FROM applied").await, writes.events() as i64)
    })
    .await
    .expect("all applied");
    relay.shutdown().await.expect("relay shutdown");
    for c in consumers {
        c.shutdown().await.expect("consumer shutdown");
    }

    // Each order's events were applied exactly once, in version order, up to the producer's version.
    let mismatches: i64 = count(
        pool,
        "SELECT count(*) FROM orders o
         FULL JOIN (SELECT entity, count(*) AS n, max(version) AS v,
                           bool_and(version = seq) AS in_step FROM applied GROUP BY entity) a
           ON a.entity = 'order-' || o.id
         WHERE o.version > 0 AND (a.n IS DISTINCT FROM o.version OR a.v IS DISTINCT FROM o.version OR NOT a.in_step)",
    )
    .await;
    assert_eq!(mismatches, 0, "the consumer's table differs from the producer's");
    for (entity, seqs) in applied_per_entity(pool).await {
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{entity} applied out of order: {seqs:?}");
    }
    let events = writes.events() as i64;
    assert_eq!(count(pool, "SELECT count(*) FROM applied").await, events);
    assert_eq!(count(pool, "SELECT coalesce(sum(version), 0)::bigint FROM orders").await, events);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

/// Quorum partition queues (what a cluster needs): the queues are quorum queues (declaring one
/// again without `x-queue-type` is refused), and a relay and two runners over them apply every event
/// once, in per-entity order, with single active consumers as on classic queues.
#[tokio::test]
async fn quorum_partitions_apply_every_event_once_in_order() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    applied_table(pool).await;
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("events", ExchangeKind::Topic).await.expect("exchange");
    let topology = partitions(&broker, &exchange, QueueType::Quorum).await;
    let other = lapin::Connection::connect(&outbox_testkit::amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("connection");
    let channel = other.create_channel().await.expect("channel");
    let classic = lapin::options::QueueDeclareOptions { durable: true, ..Default::default() };
    let again = channel.queue_declare(topology.queues[0].as_str().into(), classic, Default::default()).await;
    let refused = again.expect_err("a quorum queue declared again as classic").to_string();
    assert!(refused.contains("PRECONDITION_FAILED") || refused.contains("inequivalent"), "{refused}");
    other.close(200, "done".into()).await.expect("close");

    let outbox = Outbox::new();
    for round in 0..20 {
        let events: Vec<NewEvent> = (0..100)
            .map(|e| {
                NewEvent::json("order.changed", &serde_json::json!({ "version": round + 1 }))
                    .expect("json")
                    .entity(format!("order-{e}"))
            })
            .collect();
        let mut tx = pool.begin().await.expect("begin");
        outbox.enqueue_many(&mut *tx, events).await.expect("enqueue");
        tx.commit().await.expect("commit");
    }
    let relay = relay(pool, &exchange);
    let consumers: Vec<_> = (0..2).map(|_| runner(pool, &topology)).collect();
    wait_for("every event applied", Duration::from_secs(120), || async {
        outbox_testkit::at_least(count(pool, "SELECT count(*) FROM applied").await, 2_000)
    })
    .await
    .expect("all applied");
    relay.shutdown().await.expect("relay shutdown");
    for c in consumers {
        c.shutdown().await.expect("consumer shutdown");
    }
    let applied = applied_per_entity(pool).await;
    assert_eq!(applied.len(), 100);
    for (entity, seqs) in applied {
        assert_eq!(seqs, (1..=20).collect::<Vec<i64>>(), "{entity} applied out of order or twice");
    }
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}
