//! Scenario 7: events the broker rejects for good are quarantined with their reason; every other
//! entity keeps flowing; the quarantined entity's later events wait until an operator retries or
//! skips.

use std::time::Duration;

use outbox_core::{EventId, FailureKind, NewEvent, Payload};
use outbox_producer::{AmqpPublisher, Outbox, admin};
use outbox_testkit::{Recorder, TestBroker, TestDb, wait_for};
use sqlx::PgPool;
use uuid::Uuid;

async fn enqueue_one(pool: &PgPool, outbox: &Outbox, event: NewEvent) -> Uuid {
    let mut tx = pool.begin().await.expect("begin");
    let id = outbox.enqueue(&mut *tx, event).await.expect("enqueue");
    tx.commit().await.expect("commit");
    *id.as_uuid()
}

fn ev(event_type: &str, entity: &str, bytes: usize) -> NewEvent {
    NewEvent::new(event_type, Payload::new(vec![b'x'; bytes], "application/octet-stream")).entity(entity)
}

async fn status_of(pool: &PgPool, id: Uuid) -> (String, Option<String>, Option<String>) {
    sqlx::query_as("SELECT status, last_error_kind, last_error FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("row")
}

fn seqs_of(recorder: &Recorder, entity: &str) -> Vec<i64> {
    recorder.records().into_iter().filter(|r| r.entity.as_deref() == Some(entity)).filter_map(|r| r.seq).collect()
}

#[tokio::test]
async fn scenario_07_rejected_and_unroutable_events_are_quarantined_while_others_flow() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("events", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue = broker.declare_queue("orders").await.expect("queue");
    broker.bind(&queue, &exchange, "order.*").await.expect("bind"); // nothing routes `audit.*`
    let recorder = Recorder::start(&queue).await.expect("recorder");
    let outbox = Outbox::new();

    let too_big = enqueue_one(pool, &outbox, ev("order.changed", "A", 8 * 1024)).await;
    let a_later = [
        enqueue_one(pool, &outbox, ev("order.changed", "A", 10)).await,
        enqueue_one(pool, &outbox, ev("order.changed", "A", 10)).await,
    ];
    let unroutable = enqueue_one(pool, &outbox, ev("audit.recorded", "B", 10)).await;
    let b_later = enqueue_one(pool, &outbox, ev("order.changed", "B", 10)).await;
    let mut c = Vec::new();
    for _ in 0..5 {
        c.push(enqueue_one(pool, &outbox, ev("order.changed", "C", 10)).await);
    }

    // The broker accepts at most 4 KiB in this test; the 8 KiB event can never go.
    let publisher = AmqpPublisher::builder(outbox_testkit::amqp_url()).max_message_bytes(4 * 1024).build();
    let relay = outbox_producer::Relay::builder(pool.clone(), publisher)
        .exchange(&exchange)
        .declare_exchange(false)
        .poll_interval(Duration::from_millis(100))
        .lease(Duration::from_secs(3))
        .confirm_timeout(Duration::from_secs(2))
        .build()
        .expect("relay");
    let handle = relay.spawn();

    recorder.wait_for_count(5, Duration::from_secs(10)).await.expect("entity C flows");
    wait_for("two quarantined events", Duration::from_secs(10), || async {
        (admin::list_quarantined(pool, 10).await.ok()?.len() == 2).then_some(())
    })
    .await
    .expect("quarantined");
    assert_eq!(seqs_of(&recorder, "C"), vec![1, 2, 3, 4, 5]);

    let (status, kind, reason) = status_of(pool, too_big).await;
    assert_eq!((status.as_str(), kind.as_deref()), ("quarantined", Some("rejected")));
    assert!(reason.as_deref().is_some_and(|r| r.contains("8192 bytes")), "{reason:?}");
    let (status, kind, reason) = status_of(pool, unroutable).await;
    assert_eq!((status.as_str(), kind.as_deref()), ("quarantined", Some("rejected")));
    assert!(reason.as_deref().is_some_and(|r| r.contains("312")), "NO_ROUTE reply code expected: {reason:?}");
    let listed = admin::list_quarantined(pool, 10).await.expect("list");
    assert!(listed.iter().all(|q| q.last_error_kind == Some(FailureKind::Rejected) && q.attempts == 1));

    // Their entities' later events wait: nothing of A or B arrived.
    let pending_later = a_later.iter().chain([&b_later]);
    for id in pending_later {
        assert_eq!(status_of(pool, *id).await.0, "pending");
    }
    assert!(seqs_of(&recorder, "A").is_empty() && seqs_of(&recorder, "B").is_empty());

    // Skip the oversized one: A's later events flow. Fix the routing and retry the unroutable one:
    // it goes out with the same id, then B's next event.
    assert!(admin::skip(pool, EventId::from_uuid(too_big)).await.expect("skip"));
    broker.bind(&queue, &exchange, "audit.*").await.expect("bind audit");
    assert!(admin::retry(pool, EventId::from_uuid(unroutable)).await.expect("retry"));
    assert!(!admin::retry(pool, EventId::from_uuid(unroutable)).await.expect("retry twice"), "no longer quarantined");

    recorder.wait_for_count(9, Duration::from_secs(10)).await.expect("A and B flow again");
    handle.shutdown().await.expect("shutdown");
    assert_eq!(seqs_of(&recorder, "A"), vec![2, 3], "A continues after the skipped 1");
    assert_eq!(seqs_of(&recorder, "B"), vec![1, 2], "B's retried event keeps its place");
    recorder.all_delivered([unroutable, b_later].into_iter().chain(a_later).chain(c)).expect("all delivered");
    assert!(!recorder.ids().contains(&too_big));
    assert_eq!(status_of(pool, too_big).await.0, "skipped");
    assert!(recorder.duplicates().is_empty());

    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

/// A message over RabbitMQ's own `max_message_size` (128 MiB by default) is refused by the broker,
/// which closes the channel: only that event is quarantined; the one sent with it is retried and
/// delivered.
#[tokio::test]
async fn message_over_the_brokers_size_limit_is_quarantined_by_the_broker_answer() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("events", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue = broker.declare_queue("all").await.expect("queue");
    broker.bind(&queue, &exchange, "#").await.expect("bind");
    let recorder = Recorder::start(&queue).await.expect("recorder");
    let outbox = Outbox::builder().max_payload_bytes(200 * 1024 * 1024).build();

    let small = enqueue_one(pool, &outbox, ev("order.changed", "S", 10)).await;
    let huge = enqueue_one(pool, &outbox, ev("order.changed", "H", 129 * 1024 * 1024)).await;
    // No client-side limit: the broker must answer.
    let publisher = AmqpPublisher::builder(outbox_testkit::amqp_url()).max_message_bytes(usize::MAX).build();
    let policy = outbox_core::RetryPolicy::default().initial_delay(Duration::from_millis(100));
    let handle = outbox_producer::Relay::builder(pool.clone(), publisher)
        .exchange(&exchange)
        .declare_exchange(false)
        .retry_policy(policy)
        .poll_interval(Duration::from_millis(100))
        .lease(Duration::from_secs(20))
        .confirm_timeout(Duration::from_secs(10))
        .build()
        .expect("relay")
        .spawn();

    wait_for("the huge event quarantined", Duration::from_secs(60), || async {
        (status_of(pool, huge).await.0 == "quarantined").then_some(())
    })
    .await
    .expect("quarantined");
    recorder.wait_for_count(1, Duration::from_secs(20)).await.expect("the small event is delivered");
    handle.shutdown().await.expect("shutdown");

    let (_, kind, reason) = status_of(pool, huge).await;
    assert_eq!(kind.as_deref(), Some("rejected"));
    assert!(reason.as_deref().is_some_and(|r| r.contains("max size")), "{reason:?}");
    assert_eq!(status_of(pool, small).await.0, "published");
    assert_eq!(recorder.ids(), [small].into_iter().collect());

    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}
