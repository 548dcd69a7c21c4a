//! Quarantine by the broker's own answer (the scenario of rejected payloads is in the testkit's
//! `scenarios.rs`): a message over RabbitMQ's size limit closes the channel; only that event is
//! quarantined, the one sent with it is retried and delivered.

use std::time::Duration;

use outbox_producer::Outbox;
use outbox_testkit::{Harness, wait_for};
use outbox_types::{NewEvent, Payload};
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
        outbox_testkit::equal(status_of(h.pool(), huge).await.0, "quarantined")
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

/// The relay's periodic re-check releases rows held behind a quarantined event only once no
/// earlier event of their entity is quarantined; rows held behind other held rows of a quarantine
/// that stands stay held (releasing them only had the next claim hold them again, and logged a
/// release on every relay start).
#[tokio::test]
async fn held_rows_are_released_only_when_their_quarantine_is_resolved() {
    let db = outbox_testkit::TestDb::new().await.expect("db");
    let pool = db.pool();
    let outbox = Outbox::new();
    for entity in ["stands", "resolved"] {
        for _ in 0..4 {
            enqueue_one(pool, &outbox, entity, 10).await;
        }
    }
    // What claims leave behind a quarantined head: the head quarantined, its successors held.
    sqlx::query("UPDATE outbox_events SET status = 'quarantined', quarantined_at = now() WHERE seq = 1")
        .execute(pool)
        .await
        .expect("quarantine the heads");
    sqlx::query("UPDATE outbox_events SET next_attempt_at = 'infinity' WHERE seq > 1")
        .execute(pool)
        .await
        .expect("hold");
    assert_eq!(outbox_ops::admin::release_held(pool).await.expect("re-check"), 0, "every quarantine stands");

    // An operator resolved one head without waking its successors (the race the re-check closes).
    sqlx::query("UPDATE outbox_events SET status = 'skipped' WHERE entity_key = 'resolved' AND seq = 1")
        .execute(pool)
        .await
        .expect("skip");
    assert_eq!(outbox_ops::admin::release_held(pool).await.expect("re-check"), 3);
    let held: Vec<(String, i64)> = sqlx::query_as(
        "SELECT entity_key, seq FROM outbox_events WHERE next_attempt_at = 'infinity' ORDER BY entity_key, seq",
    )
    .fetch_all(pool)
    .await
    .expect("held");
    assert_eq!(held, [("stands".to_owned(), 2), ("stands".to_owned(), 3), ("stands".to_owned(), 4)]);
    db.close().await.expect("cleanup");
}

/// A row written by SQL that breaks the schema's promises (a header value the contract cannot
/// carry, a type longer than AMQP's short string) is quarantined as `contract` when claimed; its
/// entity's later events wait behind it and other entities flow. Before, the claim failed as a
/// whole and the relay took the same row again and again.
#[tokio::test]
async fn a_corrupt_row_is_quarantined_and_its_entity_waits_while_others_flow() {
    let mut h = Harness::builder().defer_relay().start().await.expect("harness");
    let outbox = Outbox::new();
    let bad_header = enqueue_one(h.pool(), &outbox, "A", 10).await;
    let after_bad = enqueue_one(h.pool(), &outbox, "A", 10).await;
    let long_type = enqueue_one(h.pool(), &outbox, "B", 10).await;
    let fine = enqueue_one(h.pool(), &outbox, "C", 10).await;
    sqlx::query("UPDATE outbox_events SET headers = '{\"ratio\": 1.5}' WHERE id = $1")
        .bind(bad_header)
        .execute(h.pool())
        .await
        .expect("corrupt headers");
    sqlx::query("UPDATE outbox_events SET event_type = repeat('é', 200) WHERE id = $1")
        .bind(long_type)
        .execute(h.pool())
        .await
        .expect("long type");
    h.start_relay().await.expect("relay");

    h.recorder().wait_for_count(1, Duration::from_secs(20)).await.expect("the fine event is delivered");
    wait_for("the corrupt rows quarantined", Duration::from_secs(20), || async {
        let a = status_of(h.pool(), bad_header).await.0;
        let b = status_of(h.pool(), long_type).await.0;
        (a == "quarantined" && b == "quarantined").then_some(())
    })
    .await
    .expect("quarantined");
    for id in [bad_header, long_type] {
        let (_, kind, reason) = status_of(h.pool(), id).await;
        assert_eq!(kind.as_deref(), Some("contract"));
        assert!(reason.as_deref().is_some_and(|r| r.starts_with("corrupt row")), "{reason:?}");
    }
    assert_eq!(status_of(h.pool(), after_bad).await.0, "pending", "A's next event waits behind the quarantined one");
    h.stop_relay().await.expect("shutdown");
    assert_eq!(h.recorder().ids(), [fine].into_iter().collect());
    h.close().await.expect("cleanup");
}

/// AMQP does not say which publish a `basic.return` answers: the broker sends it before the
/// confirm of its message, and often confirms that message together with others in one `multiple`
/// ack. Among thousands of routed events, with unroutable ones alone and in runs of three (several
/// returns waiting at once), exactly the unroutable ones are quarantined (as `rejected`, with the
/// broker's reply), and every routed one is published and delivered once.
#[tokio::test]
async fn among_many_routed_events_exactly_the_unroutable_ones_are_quarantined() {
    let mut h = Harness::builder().defer_relay().bindings(&["order.*"]).start().await.expect("harness");
    let outbox = Outbox::new();
    let (mut routed, mut unroutable) = (Vec::new(), Vec::new());
    for round in 0..6 {
        // One in seven alone, and runs of three in a row (several returns waiting at once).
        let lost = |i: usize| i % 7 == round || (i + round) % 50 < 3;
        let events = (0..500).map(|i| {
            let event_type = if lost(i) { "audit.recorded" } else { "order.changed" };
            NewEvent::new(event_type, Payload::new(vec![b'x'; 100], "application/octet-stream"))
        });
        let types: Vec<bool> = (0..500).map(lost).collect();
        let mut tx = h.pool().begin().await.expect("begin");
        let ids = outbox.enqueue_many(&mut *tx, events).await.expect("enqueue");
        tx.commit().await.expect("commit");
        for (id, lost) in ids.into_iter().zip(types) {
            if lost { unroutable.push(*id.as_uuid()) } else { routed.push(*id.as_uuid()) }
        }
    }
    h.start_relay().await.expect("relay");
    wait_for("every event published or quarantined", Duration::from_secs(120), || async {
        let open: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'pending'")
            .fetch_one(h.pool())
            .await
            .ok()?;
        (open == 0).then_some(())
    })
    .await
    .expect("settled");
    h.recorder().wait_all_delivered(routed.iter().copied(), Duration::from_secs(30)).await.expect("routed delivered");
    h.stop_relay().await.expect("shutdown");

    let quarantined: std::collections::HashSet<Uuid> =
        sqlx::query_scalar("SELECT id FROM outbox_events WHERE status = 'quarantined'")
            .fetch_all(h.pool())
            .await
            .expect("quarantined")
            .into_iter()
            .collect();
    let wrongly: Vec<_> = routed.iter().filter(|id| quarantined.contains(id)).collect();
    let missed: Vec<_> = unroutable.iter().filter(|id| !quarantined.contains(id)).collect();
    assert!(
        wrongly.is_empty() && missed.is_empty(),
        "{} routed quarantined, {} unroutable not",
        wrongly.len(),
        missed.len()
    );
    for id in &unroutable {
        let (_, kind, reason) = status_of(h.pool(), *id).await;
        assert_eq!(kind.as_deref(), Some("rejected"));
        assert!(reason.as_deref().is_some_and(|r| r.contains("NO_ROUTE")), "{reason:?}");
    }
    assert_eq!(h.recorder().ids(), routed.iter().copied().collect(), "the routed events, and nothing else");
    assert!(h.recorder().duplicates().is_empty(), "each routed event once");
    h.close().await.expect("cleanup");
}
