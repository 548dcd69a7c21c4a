//! The AMQP runner on the real RabbitMQ and PostgreSQL: redeliveries, reordering, crashes between
//! commit and ack, transient failures, panics and malformed deliveries.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use lapin::BasicProperties;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner, InboxRunnerBuilder, InboxService};
use outbox_testkit::{Harness, wait_for};
use outbox_types::{Event, EventId, NewEvent, RetryPolicy};
use sqlx::PgPool;
use tower::Layer;

use crate::support;
use crate::support::{count_effects, effects, effects_table};

type Handler = tower::util::ServiceFn<
    fn(InboxRequest) -> std::pin::Pin<Box<dyn Future<Output = Result<InboxRequest, HandlerError>> + Send>>,
>;

fn event(entity: &str, seq: u64) -> Event {
    NewEvent::json("order.changed", &serde_json::json!({ "seq": seq }))
        .expect("json")
        .entity(entity)
        .into_event(Some(seq), SystemTime::now())
}

fn apply(req: InboxRequest) -> std::pin::Pin<Box<dyn Future<Output = Result<InboxRequest, HandlerError>> + Send>> {
    Box::pin(support::apply(req))
}

fn service(pool: &PgPool) -> InboxService<Handler> {
    InboxLayer::new(pool.clone(), "shipping").layer(tower::service_fn(apply as fn(_) -> _))
}

/// A test database with the `effects` table, a broker with the consumer's queue and its dead
/// letters (the harness's, with no relay and no consumer of its own), and runners built on them.
struct Env {
    h: Harness,
}

impl Env {
    async fn new() -> Self {
        let h = Harness::builder().defer_relay().start().await.expect("harness");
        effects_table(h.pool()).await;
        Self { h }
    }

    fn pool(&self) -> &PgPool {
        self.h.pool()
    }

    fn runner<S>(&self, service: InboxService<S>) -> InboxRunnerBuilder<S>
    where
        S: tower::Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<tower::BoxError>,
        S::Future: Send,
    {
        InboxRunner::builder(outbox_testkit::amqp_url(), service)
            .topology(self.h.topology())
            .retry_policy(
                RetryPolicy::default()
                    .initial_delay(Duration::from_millis(200))
                    .max_delay(Duration::from_secs(1))
                    .max_attempts(5),
            )
            .sweep_interval(Duration::from_millis(500))
    }

    async fn publish(&self, events: &[Event]) {
        self.h.broker().publish_events(self.h.exchange(), "order.changed", events).await.expect("publish");
    }

    async fn close(self) {
        self.h.close().await.expect("cleanup");
    }
}

#[tokio::test]
async fn the_same_event_published_three_times_changes_the_table_once() {
    let env = Env::new().await;
    let handle = env.runner(service(env.pool())).build().expect("runner").spawn();
    let e = event("order-1", 1);
    env.publish(&[e.clone(), e.clone(), e.clone()]).await;
    let marker = event("order-2", 1);
    env.publish(&[marker]).await;
    wait_for("the marker applied", Duration::from_secs(10), || async {
        outbox_testkit::equal(effects(env.pool(), "order-2").await.len(), 1)
    })
    .await
    .expect("applied");
    // Counters move after the commit: wait for both to settle.
    wait_for("two applied, two duplicates dropped", Duration::from_secs(10), || async {
        let s = handle.stats();
        (s.duplicates == 2 && s.applied == 2).then_some(())
    })
    .await
    .expect("dropped");
    handle.shutdown().await.expect("shutdown");
    assert_eq!(effects(env.pool(), "order-1").await, [1], "three deliveries, one effect");
    env.close().await;
}

#[tokio::test]
async fn deliveries_3_1_2_are_applied_in_order_without_another_delivery() {
    let env = Env::new().await;
    let handle = env.runner(service(env.pool())).concurrency(1).build().expect("runner").spawn();
    let (e1, e2, e3) = (event("o", 1), event("o", 2), event("o", 3));
    env.publish(&[e3]).await;
    wait_for("3 parked", Duration::from_secs(10), || async {
        let parked: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_events WHERE status = 'parked'")
            .fetch_one(env.pool())
            .await
            .map_err(|e| e.to_string())?;
        outbox_testkit::equal(parked, 1)
    })
    .await
    .expect("parked");
    env.publish(&[e1, e2]).await;
    wait_for("three effects", Duration::from_secs(10), || async {
        outbox_testkit::equal(effects(env.pool(), "o").await.len(), 3)
    })
    .await
    .expect("applied");
    handle.shutdown().await.expect("shutdown");
    assert_eq!(effects(env.pool(), "o").await, [1, 2, 3]);
    env.close().await;
}

/// The consumer dies after its commit and before its ack: the broker redelivers, the inbox drops
/// the duplicate, the effect exists once.
#[tokio::test]
async fn crash_between_commit_and_ack_leaves_one_effect() {
    let env = Env::new().await;
    let crashing = env
        .runner(service(env.pool()))
        .concurrency(1)
        .prefetch(1)
        .crash_at(outbox_inbox::CrashPoint::AfterCommitBeforeAck)
        .build()
        .expect("runner")
        .spawn();
    let e = event("k", 1);
    env.publish(std::slice::from_ref(&e)).await;
    assert!(crashing.join().await.is_err(), "stopped at the crash point");
    assert_eq!(effects(env.pool(), "k").await, [1], "committed before the crash");

    let handle = env.runner(service(env.pool())).build().expect("runner").spawn();
    wait_for("the redelivery to be dropped as a duplicate", Duration::from_secs(15), || async {
        outbox_testkit::equal(handle.stats().duplicates, 1)
    })
    .await
    .expect("redelivered");
    assert_eq!(handle.stats().applied, 0);
    handle.shutdown().await.expect("shutdown");
    assert_eq!(effects(env.pool(), "k").await, [1], "the redelivered duplicate was dropped");
    env.close().await;
}

#[tokio::test]
async fn transient_failures_are_retried_with_backoff_then_applied_once() {
    let env = Env::new().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (c, t) = (calls.clone(), times.clone());
    let flaky = tower::service_fn(move |req: InboxRequest| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        t.lock().expect("lock").push(Instant::now());
        async move {
            if n < 2 {
                return Err(HandlerError::transient("downstream unavailable"));
            }
            apply(req).await
        }
    });
    let svc = InboxLayer::new(env.pool().clone(), "shipping").layer(flaky);
    let handle = env.runner(svc).build().expect("runner").spawn();
    env.publish(&[event("f", 1)]).await;
    wait_for("applied", Duration::from_secs(15), || async {
        outbox_testkit::equal(effects(env.pool(), "f").await.len(), 1)
    })
    .await
    .expect("applied");
    handle.shutdown().await.expect("shutdown");
    assert_eq!(calls.load(Ordering::SeqCst), 3, "two failures and one success: no hot loop");
    let t = times.lock().expect("lock").clone();
    assert!(t[1] - t[0] >= Duration::from_millis(190), "first retry after the backoff floor: {:?}", t[1] - t[0]);
    assert!(t[2] - t[1] >= Duration::from_millis(190), "second retry after a backoff: {:?}", t[2] - t[1]);
    assert_eq!(effects(env.pool(), "f").await, [1]);
    env.close().await;
}

#[tokio::test]
async fn a_panicking_handler_does_not_kill_the_consumer() {
    let env = Env::new().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let buggy = tower::service_fn(move |req: InboxRequest| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                panic!("handler bug on first sight");
            }
            apply(req).await
        }
    });
    let svc = InboxLayer::new(env.pool().clone(), "shipping").layer(buggy);
    let handle = env.runner(svc).build().expect("runner").spawn();
    env.publish(&[event("p", 1), event("q", 1)]).await;
    wait_for("both applied", Duration::from_secs(15), || async {
        outbox_testkit::equal(count_effects(env.pool()).await, 2)
    })
    .await
    .expect("applied");
    assert!(!handle.is_finished(), "the runner survived the panic");
    handle.shutdown().await.expect("shutdown");
    env.close().await;
}

fn props(
    id: Option<&str>,
    kind: Option<&str>,
    content_type: Option<&str>,
    headers: &[(&str, AMQPValue)],
) -> BasicProperties {
    let mut table = FieldTable::default();
    for (k, v) in headers {
        table.insert((*k).into(), v.clone());
    }
    let mut p = BasicProperties::default().with_headers(table).with_timestamp(1_700_000_000);
    if let Some(id) = id {
        p = p.with_message_id(id.into());
    }
    if let Some(k) = kind {
        p = p.with_type(k.into());
    }
    if let Some(c) = content_type {
        p = p.with_content_type(c.into());
    }
    p
}

/// At least eight kinds of malformed delivery: each is dead-lettered with its reason and acked; the
/// good ones around them are applied.
#[tokio::test]
async fn malformed_deliveries_are_dead_lettered_with_a_reason_and_good_ones_flow() {
    let env = Env::new().await;
    let handle = env.runner(service(env.pool())).build().expect("runner").spawn();
    let id = || EventId::new().to_string();
    let v1 = ("x-event-version", AMQPValue::LongLongInt(1));
    let json = Some("application/json");
    let ok_body: &[u8] = b"{\"ok\":true}";
    let big = "h".repeat(70 * 1024);
    let cases: Vec<(&str, BasicProperties, &[u8])> = vec![
        ("missing_message_id", props(None, Some("t"), json, std::slice::from_ref(&v1)), ok_body),
        ("invalid_message_id", props(Some("not-a-uuid"), Some("t"), json, std::slice::from_ref(&v1)), ok_body),
        ("missing_type", props(Some(&id()), None, json, std::slice::from_ref(&v1)), ok_body),
        (
            "missing_header",
            props(Some(&id()), Some("t"), json, &[v1.clone(), ("x-entity", AMQPValue::LongString("e".into()))]),
            ok_body,
        ),
        (
            "invalid_header",
            props(
                Some(&id()),
                Some("t"),
                json,
                &[
                    v1.clone(),
                    ("x-entity", AMQPValue::LongString("e".into())),
                    ("x-seq", AMQPValue::LongString("three".into())),
                ],
            ),
            ok_body,
        ),
        ("missing_header", props(Some(&id()), Some("t"), json, &[]), ok_body),
        (
            "unknown_content_type",
            props(Some(&id()), Some("t"), Some("application/x-mystery"), std::slice::from_ref(&v1)),
            ok_body,
        ),
        ("unparsable_payload", props(Some(&id()), Some("t"), json, std::slice::from_ref(&v1)), b"{not json"),
        (
            "headers_too_large",
            props(
                Some(&id()),
                Some("t"),
                json,
                &[v1.clone(), ("x-big", AMQPValue::LongString(LongString::from(big.as_str())))],
            ),
            ok_body,
        ),
        ("missing_content_type", props(Some(&id()), Some("t"), None, std::slice::from_ref(&v1)), ok_body),
    ];
    let ch = env.h.broker().channel();
    let good_before = event("good", 1);
    env.publish(&[good_before]).await;
    for (_, p, body) in &cases {
        ch.basic_publish(
            env.h.exchange().into(),
            "order.changed".into(),
            BasicPublishOptions::default(),
            body,
            p.clone(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    }
    env.publish(&[event("good", 2)]).await;

    // Read the dead letters.
    let dead = env
        .h
        .broker()
        .channel()
        .basic_consume(
            env.h.topology().dead_letter_queue.as_str().into(),
            "".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("consume dlq");
    let reasons: Vec<String> = tokio::time::timeout(
        Duration::from_secs(15),
        dead.take(cases.len())
            .map(|d| {
                let d = d.expect("delivery");
                match d
                    .properties
                    .headers()
                    .as_ref()
                    .and_then(|h| h.inner().get(outbox_inbox::HEADER_DEAD_LETTER_REASON).cloned())
                {
                    Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
                    other => format!("{other:?}"),
                }
            })
            .collect(),
    )
    .await
    .expect("every malformed delivery dead-lettered");
    let mut expected: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let mut got: Vec<&str> = reasons.iter().map(String::as_str).collect();
    expected.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, expected);
    wait_for("good events applied", Duration::from_secs(10), || async {
        outbox_testkit::equal(effects(env.pool(), "good").await.len(), 2)
    })
    .await
    .expect("good");
    assert!(!handle.is_finished());
    handle.shutdown().await.expect("shutdown");
    assert_eq!(effects(env.pool(), "good").await, [1, 2]);
    env.close().await;
}

/// The broker drops the runner's connection: it reconnects with backoff, the deliveries in hand
/// come back, and every event is applied once.
#[tokio::test]
async fn reconnects_after_the_broker_drops_the_connection() {
    let env = Env::new().await;
    let name = format!("inbox-test-{}", outbox_testkit::unique_suffix());
    let handle = env.runner(service(env.pool())).connection_name(&name).build().expect("runner").spawn();
    env.publish(&[event("r", 1), event("r", 2)]).await;
    wait_for("first events applied", Duration::from_secs(10), || async {
        outbox_testkit::equal(effects(env.pool(), "r").await.len(), 2)
    })
    .await
    .expect("applied");

    let closed = outbox_testkit::close_connections_named(&name).await.expect("rabbitmqctl");
    assert_eq!(closed, 1, "the runner's connection was found and closed");
    env.publish(&[event("r", 3), event("r", 4)]).await;
    wait_for("events after the reconnect applied", Duration::from_secs(30), || async {
        outbox_testkit::equal(effects(env.pool(), "r").await.len(), 4)
    })
    .await
    .expect("reconnected");
    assert!(!handle.is_finished());
    handle.shutdown().await.expect("shutdown");
    assert_eq!(effects(env.pool(), "r").await, [1, 2, 3, 4]);
    env.close().await;
}

/// A runner given two nodes of one broker (two proxies in front of the shared broker) loses its
/// node (every connection through it cut, new ones refused): it consumes through the other node at
/// once, the deliveries it had in hand come back, and every event is applied once, in order.
#[tokio::test]
async fn a_runner_given_two_nodes_goes_on_through_the_other_when_its_node_goes() {
    let env = Env::new().await;
    let upstream = "127.0.0.1:5672".parse().expect("addr");
    let first = outbox_testkit::ChaosProxy::start(upstream).await.expect("proxy");
    let second = outbox_testkit::ChaosProxy::start(upstream).await.expect("proxy");
    let url = |proxy: &outbox_testkit::ChaosProxy| format!("amqp://guest:guest@{}/%2f", proxy.addr());
    let runner = InboxRunner::builder(url(&first), service(env.pool()))
        .node(url(&second))
        .topology(env.h.topology())
        .sweep_interval(Duration::from_millis(500));
    let handle = runner.build().expect("runner").spawn();
    env.publish(&(1..=50).map(|seq| event("n", seq)).collect::<Vec<_>>()).await;
    wait_for("first events applied", Duration::from_secs(30), || async {
        outbox_testkit::equal(effects(env.pool(), "n").await.len(), 50)
    })
    .await
    .expect("applied");
    assert_eq!(second.connections(), 0, "the first node is tried first");

    first.refuse();
    first.cut();
    let lost = std::time::Instant::now();
    env.publish(&(51..=100).map(|seq| event("n", seq)).collect::<Vec<_>>()).await;
    wait_for("events after the node's loss applied", Duration::from_secs(30), || async {
        outbox_testkit::equal(effects(env.pool(), "n").await.len(), 100)
    })
    .await
    .expect("went on through the second node");
    println!("node loss: the runner applied 50 more events {} ms after its node went", lost.elapsed().as_millis());
    assert!(second.connections() >= 1, "the runner connected through the second node");
    handle.shutdown().await.expect("shutdown");
    assert_eq!(effects(env.pool(), "n").await, (1..=100).collect::<Vec<i64>>());
    env.close().await;
}

/// Graceful shutdown while a delivery is being handled: it is finished, committed and acked (not
/// redelivered), then the runner stops.
#[tokio::test]
async fn graceful_shutdown_finishes_and_acks_the_delivery_in_hand() {
    let env = Env::new().await;
    let started = Arc::new(tokio::sync::Notify::new());
    let signal = started.clone();
    let slow = tower::service_fn(move |req: InboxRequest| {
        let signal = signal.clone();
        async move {
            signal.notify_one();
            tokio::time::sleep(Duration::from_millis(500)).await;
            apply(req).await
        }
    });
    let svc = InboxLayer::new(env.pool().clone(), "shipping").layer(slow);
    let handle = env.runner(svc).build().expect("runner").spawn();
    env.publish(&[event("g", 1)]).await;
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await.expect("handler started");
    handle.shutdown().await.expect("graceful shutdown");
    assert_eq!(effects(env.pool(), "g").await, [1], "the delivery in hand was finished");

    let conn = lapin::Connection::connect(&outbox_testkit::amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("connect");
    let queue = conn
        .create_channel()
        .await
        .expect("channel")
        .queue_declare(
            env.h.topology().queues[0].as_str().into(),
            lapin::options::QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("passive declare");
    assert_eq!(queue.message_count(), 0, "acked before closing, so nothing comes back");
    let _ = conn.close(200, "".into()).await;
    env.close().await;
}

/// Deliveries already waiting share transactions; a group with an event the handler refuses is
/// rolled back and handled one delivery at a time: the refused one is dead-lettered, every other
/// one applied once, each entity in order.
#[tokio::test]
async fn deliveries_in_hand_share_a_transaction_and_a_refused_one_goes_alone() {
    let env = Env::new().await;
    sqlx::query("CREATE TABLE applied (n bigserial PRIMARY KEY, entity text, seq bigint, tx bigint)")
        .execute(env.pool())
        .await
        .expect("table");
    let handler = tower::service_fn(|mut req: InboxRequest| async move {
        let entity = req.event().entity.clone().expect("ordered");
        if entity.key == "refused" {
            return Err(HandlerError::permanent("not for shipping"));
        }
        sqlx::query("INSERT INTO applied (entity, seq, tx) VALUES ($1, $2, txid_current())")
            .bind(&entity.key)
            .bind(entity.seq as i64)
            .execute(req.conn())
            .await?;
        Ok::<_, HandlerError>(req)
    });
    let svc = InboxLayer::new(env.pool().clone(), "shipping").layer(handler);
    // 50 entities, 4 events each, interleaved as a relay sends them; the refused event in the middle.
    let mut events: Vec<Event> = (1..=4).flat_map(|seq| (0..50).map(move |e| event(&format!("e{e}"), seq))).collect();
    events.insert(100, event("refused", 1));
    env.publish(&events).await;
    let handle = env.runner(svc).build().expect("runner").spawn();
    wait_for("every event handled", Duration::from_secs(30), || async {
        let s = handle.stats();
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM applied").fetch_one(env.pool()).await.expect("count");
        (s.applied + s.parked == 200 && s.dead_lettered == 1 && rows >= 200).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:?}: {:?}", handle.stats()));
    // An entity's later delivery waits while a batch in hand holds the entity: none overtakes its
    // predecessor, so none is parked.
    assert_eq!(handle.stats().parked, 0, "{:?}", handle.stats());
    let rows: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT entity, seq, tx FROM applied ORDER BY n").fetch_all(env.pool()).await.expect("rows");
    assert_eq!(rows.len(), 200, "each event applied once");
    for e in 0..50 {
        let key = format!("e{e}");
        let seqs: Vec<i64> = rows.iter().filter(|r| r.0 == key).map(|r| r.1).collect();
        assert_eq!(seqs, [1, 2, 3, 4], "{key} in order");
    }
    let transactions: std::collections::HashSet<i64> = rows.iter().map(|r| r.2).collect();
    assert!(transactions.len() < rows.len(), "some deliveries shared a transaction ({} for 200)", transactions.len());
    handle.shutdown().await.expect("shutdown");
    env.close().await;
}

/// Acks are coalesced over the channel's lowest unacked deliveries, but a delivery waiting out its
/// retry delay holds none of the others back: with a prefetch of 4, forty events behind it are
/// applied and acked (the broker would send no more than three of them otherwise), and after the
/// shutdown only the waiting one is back in the queue.
#[tokio::test]
async fn a_delivery_waiting_to_be_retried_holds_back_no_other_ack() {
    let env = Env::new().await;
    let failing = tower::service_fn(|req: InboxRequest| async move {
        if req.event().entity.as_ref().is_some_and(|e| e.key == "slow") {
            return Err(HandlerError::transient("downstream unavailable"));
        }
        apply(req).await
    });
    let svc = InboxLayer::new(env.pool().clone(), "shipping").layer(failing);
    let mut events = vec![event("slow", 1)];
    events.extend((0..40).map(|e| event(&format!("q{e}"), 1)));
    env.publish(&events).await;
    let handle = env
        .runner(svc)
        .prefetch(4)
        .concurrency(2)
        .retry_policy(RetryPolicy::default().initial_delay(Duration::from_secs(120)).max_attempts(5))
        .shutdown_deadline(Duration::from_millis(500))
        .build()
        .expect("runner")
        .spawn();
    wait_for("the forty applied", Duration::from_secs(60), || async {
        outbox_testkit::equal(count_effects(env.pool()).await, 40)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:?}: {:?}", handle.stats()));
    assert_eq!(handle.stats().retried, 1, "the slow event waits for its retry");
    handle.shutdown().await.expect("shutdown");
    assert!(effects(env.pool(), "slow").await.is_empty());

    let conn = lapin::Connection::connect(&outbox_testkit::amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("connect");
    let queue = env.h.topology().queues[0].clone();
    let channel = conn.create_channel().await.expect("channel");
    let passive = lapin::options::QueueDeclareOptions { passive: true, ..Default::default() };
    let waiting = wait_for("the unacked delivery back in the queue", Duration::from_secs(30), || async {
        let q = channel.queue_declare(queue.as_str().into(), passive, FieldTable::default()).await.expect("declare");
        (q.message_count() > 0).then_some(q.message_count())
    })
    .await
    .expect("requeued");
    assert_eq!(waiting, 1, "only the event waiting for its retry is back; the forty were acked");
    let _ = conn.close(200, "".into()).await;
    env.close().await;
}
