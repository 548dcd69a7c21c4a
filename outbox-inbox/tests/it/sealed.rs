//! Encryption on the consumer's side, on the real servers: payloads sealed end to end (the relay
//! forwards them sealed, the runner opens them; a runner without the keys dead-letters them), and
//! the payloads the inbox keeps while parked sealed at rest and opened when applied.

use std::time::{Duration, SystemTime};

use crate::support::{apply, count_effects, effects, effects_table};
use lapin::ExchangeKind;
use outbox_inbox::{InboxLayer, InboxRunner, Outcome};
use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, Relay};
use outbox_system_tests::count;
use outbox_testkit::{Recorder, TestBroker, TestDb, wait_for};
use outbox_types::{Event, KEY_BYTES, Keyring, NewEvent, PayloadCipher};
use tower::{Layer, Service};

const SECRET: i64 = 4_111_111_111;

fn keys() -> PayloadCipher {
    PayloadCipher::new(Keyring::new("k2", [2; KEY_BYTES]).and_then(|r| r.with_key("k1", [1; KEY_BYTES])).expect("keys"))
}

#[tokio::test]
async fn payloads_sealed_end_to_end_are_opened_by_the_runner_with_the_keys_only() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    effects_table(pool).await;
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("events", ExchangeKind::Topic).await.expect("exchange");
    let with_keys =
        outbox_inbox::declare_queue(broker.channel(), &exchange, &broker.name("keys"), &["#"]).await.expect("queue");
    let without =
        outbox_inbox::declare_queue(broker.channel(), &exchange, &broker.name("nokeys"), &["#"]).await.expect("queue");
    let wire = broker.declare_queue("wire").await.expect("wire queue");
    broker.bind(&wire, &exchange, "#").await.expect("bind");
    for t in [&with_keys, &without] {
        broker.remember_queue(&t.queues[0]);
        broker.remember_queue(&t.dead_letter_queue);
        broker.remember_exchange(&t.dead_letter_exchange);
    }
    let recorder = Recorder::start(&wire).await.expect("recorder");

    let outbox = Outbox::builder().cipher(keys()).build();
    let mut tx = pool.begin().await.expect("begin");
    let events = (1..=5).map(|n| {
        NewEvent::json("card.charged", &serde_json::json!({ "amount": SECRET + n })).expect("json").entity("card-1")
    });
    outbox.enqueue_many(&mut *tx, events.collect::<Vec<_>>()).await.expect("enqueue");
    tx.commit().await.expect("commit");
    let relay = Relay::builder(pool, AmqpPublisher::builder(broker.url()).build_unchecked())
        .exchange(&exchange)
        .declare_exchange(false)
        .end_to_end(true)
        .build()
        .expect("relay")
        .spawn();
    let service = InboxLayer::new(pool.clone(), "billing").layer(tower::service_fn(apply));
    let runner =
        InboxRunner::builder(broker.url(), service).topology(&with_keys).cipher(keys()).build().expect("runner");
    let runner = runner.spawn();
    let blind = InboxLayer::new(pool.clone(), "blind").layer(tower::service_fn(apply));
    let blind = InboxRunner::builder(broker.url(), blind).topology(&without).build().expect("runner").spawn();

    wait_for("every event applied", Duration::from_secs(60), || async {
        outbox_testkit::equal(count_effects(pool).await, 5)
    })
    .await
    .expect("applied");
    wait_for("the blind consumer's dead letters", Duration::from_secs(60), || async {
        outbox_testkit::equal(blind.stats().dead_lettered, 5)
    })
    .await
    .expect("dead-lettered");
    relay.shutdown().await.expect("relay");
    runner.shutdown().await.expect("runner");
    blind.shutdown().await.expect("runner");

    assert_eq!(effects(pool, "card-1").await, [1, 2, 3, 4, 5], "opened, applied once, in order");
    let amounts: Vec<i64> =
        sqlx::query_scalar("SELECT amount FROM effects ORDER BY seq").fetch_all(pool).await.expect("amounts");
    assert_eq!(amounts, (1..=5).map(|n| SECRET + n).collect::<Vec<_>>(), "the handler saw the plain payload");
    recorder.wait_for_count(5, Duration::from_secs(30)).await.expect("on the wire");
    for r in recorder.records() {
        let text = String::from_utf8_lossy(&r.payload);
        assert!(!text.contains("411111"), "the message carries the sealed payload only");
    }
    let applied_by_blind: i64 = count(pool, "SELECT count(*) FROM inbox_events WHERE consumer = 'blind'").await;
    assert_eq!(applied_by_blind, 0, "nothing applied without the keys");
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

fn event(seq: u64) -> Event {
    NewEvent::json("card.charged", &serde_json::json!({ "amount": SECRET + seq as i64 }))
        .expect("json")
        .entity("card-9")
        .into_event(Some(seq), SystemTime::now())
}

#[tokio::test]
async fn parked_payloads_are_sealed_at_rest_and_opened_when_their_turn_comes() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    effects_table(pool).await;
    let mut svc = InboxLayer::new(pool.clone(), "billing").cipher(keys()).layer(tower::service_fn(apply));
    assert_eq!(svc.call(event(3)).await.expect("3"), Outcome::Parked);
    assert_eq!(svc.call(event(2)).await.expect("2"), Outcome::Parked);
    let plain =
        count(pool, "SELECT count(*) FROM inbox_events WHERE position(convert_to('411111', 'UTF8') in payload) > 0")
            .await;
    assert_eq!(plain, 0, "the parked payloads are sealed");
    assert_eq!(count(pool, "SELECT count(*) FROM inbox_events WHERE payload_key_id = 'k2'").await, 2);

    // A consumer without the keys applies the event it was handed, but not the parked ones: they
    // stay parked (the error is logged), until a consumer with the keys sweeps them.
    let mut blind = InboxLayer::new(pool.clone(), "billing").layer(tower::service_fn(apply));
    assert_eq!(blind.call(event(1)).await.expect("1"), Outcome::Applied { successors: 0 });
    assert_eq!(effects(pool, "card-9").await, [1]);
    assert_eq!(count(pool, "SELECT count(*) FROM inbox_events WHERE status = 'parked'").await, 2);
    let blind_sweep = blind.sweep_parked().await;
    assert!(blind_sweep.is_ok_and(|n| n == 0), "nothing applied without the keys");

    assert_eq!(svc.sweep_parked().await.expect("sweep"), 2);
    assert_eq!(effects(pool, "card-9").await, [1, 2, 3]);
    let amounts: Vec<i64> =
        sqlx::query_scalar("SELECT amount FROM effects ORDER BY seq").fetch_all(pool).await.expect("amounts");
    assert_eq!(amounts, [SECRET + 1, SECRET + 2, SECRET + 3], "the parked payloads opened");
    db.close().await.expect("cleanup");
}
