//! Reconciliation on the real servers: a healthy flow with one deliberately broken case per
//! category, each reported where it belongs, and the report never prints a payload.

use std::time::{Duration, SystemTime};

use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, Relay};
use outbox_testkit::{Change, OrderViolation, Reconciliation, Recorder, RecorderDeliveries, TestBroker, TestDb};
use outbox_types::{Event, EventId, NewEvent, Payload};
use sqlx::PgPool;
use uuid::Uuid;

const SECRET: &str = "PAYLOAD-SECRET-5d2c";

/// One business change: bump the order's version and enqueue its event, in one transaction.
async fn change(pool: &PgPool, order: i64) -> Uuid {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET version = orders.version + 1")
        .bind(order)
        .execute(&mut *tx)
        .await
        .expect("order");
    let event = NewEvent::json("order.changed", &serde_json::json!({ "note": SECRET })).expect("json");
    let id = Outbox::new().enqueue(&mut *tx, event.entity(format!("order-{order}"))).await.expect("enqueue");
    tx.commit().await.expect("commit");
    *id.as_uuid()
}

/// The wire form of an outbox event, to publish by hand.
fn wire(id: Uuid, entity: &str, seq: u64) -> Event {
    NewEvent::new("order.changed", Payload::new(SECRET, "text/plain"))
        .id(EventId::from_uuid(id))
        .entity(entity)
        .into_event(Some(seq), SystemTime::now())
}

async fn exec(pool: &PgPool, sql: &str, id: Uuid) {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).bind(id).execute(pool).await.expect("statement");
}

#[tokio::test]
async fn every_kind_of_discrepancy_is_reported() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    sqlx::raw_sql(
        "CREATE TABLE orders (id bigint PRIMARY KEY, version bigint NOT NULL);
         CREATE TABLE shipments (event_id uuid NOT NULL);",
    )
    .execute(pool)
    .await
    .expect("tables");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("events", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue = broker.declare_queue("all").await.expect("queue");
    broker.bind(&queue, &exchange, "#").await.expect("bind");
    let recorder = Recorder::start(&queue).await.expect("recorder");

    // The healthy part: four changes, published by a relay, applied once each.
    let healthy = [change(pool, 1).await, change(pool, 1).await, change(pool, 2).await, change(pool, 3).await];
    let relay = Relay::builder(pool, AmqpPublisher::builder(outbox_testkit::amqp_url()).build().expect("publisher"))
        .exchange(&exchange)
        .declare_exchange(false)
        .build()
        .expect("relay")
        .spawn();
    recorder.wait_for_count(4, Duration::from_secs(20)).await.expect("published");
    relay.shutdown().await.expect("shutdown");
    for id in &healthy[..3] {
        exec(pool, "INSERT INTO inbox_events (consumer, event_id, status) VALUES ('shipping', $1, 'processed')", *id)
            .await;
        exec(pool, "INSERT INTO shipments VALUES ($1)", *id).await;
    }
    let clean = Reconciliation::new(pool)
        .entity_versions("SELECT 'order-' || id, version FROM orders")
        .broker(&recorder)
        .run()
        .await
        .expect("reconcile");
    assert!(clean.is_clean(), "{clean}");
    assert_eq!((clean.business_changes, clean.published), (4, 4));

    // A business change committed without its event (a bug in the user's flow).
    sqlx::query("UPDATE orders SET version = version + 1 WHERE id = 2").execute(pool).await.expect("update");
    // An event enqueued without its business change.
    let mut tx = pool.begin().await.expect("begin");
    let orphan = Outbox::new()
        .enqueue(&mut *tx, NewEvent::json("order.changed", &1).expect("json").entity("order-3"))
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    exec(pool, "UPDATE outbox_events SET status = 'published', published_at = now() WHERE id = $1", *orphan.as_uuid())
        .await;
    // Not published: one pending, one quarantined.
    let pending = change(pool, 4).await;
    let quarantined = change(pool, 5).await;
    exec(
        pool,
        "UPDATE outbox_events SET status = 'quarantined', attempts = 3, last_error_kind = 'rejected' WHERE id = $1",
        quarantined,
    )
    .await;
    // At the broker: a duplicate, an event the outbox never had, and order 6 delivered 2 before 1.
    let (six_1, six_2) = (change(pool, 6).await, change(pool, 6).await);
    for id in [six_1, six_2] {
        exec(pool, "UPDATE outbox_events SET status = 'published', published_at = now() WHERE id = $1", id).await;
    }
    let ghost = Uuid::now_v7();
    let by_hand = [
        wire(healthy[0], "order-1", 1),
        wire(ghost, "order-9", 1),
        wire(six_2, "order-6", 2),
        wire(six_1, "order-6", 1),
    ];
    broker.publish_events(&exchange, "order.changed", &by_hand).await.expect("publish");
    recorder.wait_for_count(8, Duration::from_secs(10)).await.expect("recorded");
    // At the consumer: an application of an unknown event, and one effect written twice.
    exec(pool, "INSERT INTO inbox_events (consumer, event_id, status) VALUES ('shipping', $1, 'processed')", ghost)
        .await;
    exec(pool, "INSERT INTO shipments VALUES ($1)", healthy[0]).await;

    let report = Reconciliation::new(pool)
        .entity_versions("SELECT 'order-' || id, version FROM orders")
        .broker(&recorder)
        .inbox(pool, "shipping")
        .effects("SELECT event_id FROM shipments")
        .run()
        .await
        .expect("reconcile");
    assert!(!report.is_clean());
    assert_eq!(report.changes_without_event, [Change::Entity { key: "order-2".into(), version: 2 }]);
    assert_eq!(report.events_without_change.iter().map(|e| e.id).collect::<Vec<_>>(), [*orphan.as_uuid()]);
    let unpublished: Vec<_> = report.unpublished.iter().map(|u| (u.event.id, u.status.as_str())).collect();
    let mut expected = vec![(pending, "pending"), (quarantined, "quarantined")];
    expected.sort();
    assert_eq!(unpublished, expected);
    let b = report.broker.as_ref().expect("broker findings");
    assert_eq!(b.duplicates, [(healthy[0], 2)]);
    assert_eq!(b.unknown, [ghost]);
    assert_eq!(b.order_violations, [OrderViolation { entity: "order-6".into(), seq: 2, expected: 1 }]);
    assert_eq!(b.not_delivered.iter().map(|e| e.id).collect::<Vec<_>>(), [*orphan.as_uuid()]);
    let i = report.inbox.as_ref().expect("inbox findings");
    let mut not_applied: Vec<Uuid> = i.not_applied.iter().map(|(e, _)| e.id).collect();
    not_applied.sort();
    let mut expected = vec![healthy[3], *orphan.as_uuid(), six_1, six_2];
    expected.sort();
    assert_eq!(not_applied, expected);
    assert_eq!(i.unknown_applied.iter().map(|e| e.id).collect::<Vec<_>>(), [ghost]);
    assert_eq!(i.applied_twice, [(healthy[0], 2)]);

    let text = report.to_string();
    assert!(!text.contains(SECRET), "a payload in the report: {text}");
    for needle in ["NOT clean", "order-2 version 2", &ghost.to_string(), "order-6: seq 2 arrived before seq 1"] {
        assert!(text.contains(needle), "{needle:?} missing from the report:\n{text}");
    }

    // A query of the wrong shape is a typed error.
    let err = Reconciliation::new(pool).entity_versions("SELECT id FROM orders").run().await.expect_err("shape");
    assert!(matches!(err, outbox_ops::Error::InvalidQuery { query: "entity_versions", .. }), "{err:?}");

    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}
