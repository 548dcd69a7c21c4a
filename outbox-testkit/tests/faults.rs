//! Each fault of the `FaultyPublisher` really happens, and the relay handles it: what reaches the
//! queue, how many times, and what is recorded on the row.

use std::time::Duration;

use outbox_core::{FailureKind, NewEvent, RetryPolicy};
use outbox_producer::Outbox;
use outbox_relay::{AmqpPublisher, Relay};
use outbox_testkit::{Fault, FaultyPublisher, Recorder, TestBroker, TestDb, wait_for};
use uuid::Uuid;

struct Env {
    db: TestDb,
    broker: TestBroker,
    exchange: String,
    recorder: Recorder,
}

async fn env() -> Env {
    let db = TestDb::new().await.expect("db");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("events", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue = broker.declare_queue("all").await.expect("queue");
    broker.bind(&queue, &exchange, "#").await.expect("bind");
    let recorder = Recorder::start(&queue).await.expect("recorder");
    Env { db, broker, exchange, recorder }
}

async fn one_event(env: &Env) -> Uuid {
    let mut tx = env.db.pool().begin().await.expect("begin");
    let id = Outbox::new()
        .enqueue(&mut *tx, NewEvent::json("order.paid", &serde_json::json!({ "id": 1 })).expect("json").entity("o-1"))
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    *id.as_uuid()
}

/// Runs a relay with `fault` queued `n` times until the row reaches `status`; returns the row's
/// attempts and error kind.
async fn run(env: &Env, n: usize, fault: Fault, status: &'static str) -> (i32, Option<String>) {
    let faulty = FaultyPublisher::new(AmqpPublisher::builder(outbox_testkit::amqp_url()).build());
    faulty.inject(n, fault.clone());
    let relay = Relay::builder(env.db.connect_options().clone(), faulty.clone())
        .exchange(&env.exchange)
        .declare_exchange(false)
        .retry_policy(
            RetryPolicy::default().initial_delay(Duration::from_millis(100)).max_delay(Duration::from_millis(300)),
        )
        .confirm_timeout(Duration::from_secs(1))
        .lease(Duration::from_secs(3))
        .poll_interval(Duration::from_millis(100))
        .build()
        .expect("relay")
        .spawn();
    wait_for(status, Duration::from_secs(20), || async {
        let s: String = sqlx::query_scalar("SELECT status FROM outbox_events").fetch_one(env.db.pool()).await.ok()?;
        (s == status).then_some(())
    })
    .await
    .expect("row reached its status");
    relay.shutdown().await.expect("shutdown");
    assert_eq!(faulty.applied(), vec![fault; n], "every queued fault was applied");
    assert_eq!(faulty.pending(), 0);
    sqlx::query_as("SELECT attempts, last_error_kind FROM outbox_events").fetch_one(env.db.pool()).await.expect("row")
}

async fn close(env: Env) {
    drop(env.recorder);
    env.broker.close().await.expect("cleanup");
    env.db.close().await.expect("cleanup");
}

#[tokio::test]
async fn nacks_are_retried_with_the_same_id_and_delivered_once() {
    let env = env().await;
    let id = one_event(&env).await;
    let (attempts, kind) = run(&env, 2, Fault::Nack, "published").await;
    assert_eq!((attempts, kind.as_deref()), (3, Some("transient")), "two nacked attempts, then confirmed");
    env.recorder.wait_for_count(1, Duration::from_secs(5)).await.expect("delivered");
    assert_eq!(env.recorder.ids(), [id].into_iter().collect(), "nacked messages never reached the queue");
    close(env).await;
}

#[tokio::test]
async fn an_unroutable_return_quarantines_the_event() {
    let env = env().await;
    one_event(&env).await;
    let (attempts, kind) = run(&env, 1, Fault::Unroutable, "quarantined").await;
    assert_eq!((attempts, kind.as_deref()), (1, Some("rejected")));
    assert_eq!(env.recorder.count(), 0);
    close(env).await;
}

#[tokio::test]
async fn auth_failures_are_retried() {
    let env = env().await;
    one_event(&env).await;
    let (attempts, kind) = run(&env, 2, Fault::Fail(FailureKind::Auth), "published").await;
    assert_eq!((attempts, kind.as_deref()), (3, Some("auth")));
    close(env).await;
}

/// A lost confirm: the broker has the message but the relay never hears of it, so after the
/// confirm timeout it publishes again with the same id. The only broker-side duplicate (G3).
#[tokio::test]
async fn a_lost_confirm_republishes_with_the_same_id() {
    let env = env().await;
    let id = one_event(&env).await;
    let (attempts, _) = run(&env, 1, Fault::LoseConfirm, "published").await;
    assert_eq!(attempts, 2);
    env.recorder.wait_for_count(2, Duration::from_secs(5)).await.expect("both copies arrived");
    assert_eq!(env.recorder.duplicates().get(&id), Some(&2), "the same event id twice");
    close(env).await;
}

#[tokio::test]
async fn a_delayed_confirm_within_the_timeout_is_one_publish() {
    let env = env().await;
    let id = one_event(&env).await;
    let (attempts, kind) = run(&env, 1, Fault::DelayConfirm(Duration::from_millis(400)), "published").await;
    assert_eq!((attempts, kind), (1, None));
    env.recorder.wait_for_count(1, Duration::from_secs(5)).await.expect("delivered");
    assert!(env.recorder.duplicates().is_empty());
    assert!(env.recorder.ids().contains(&id));
    close(env).await;
}
