//! The relay through outages of its servers, each injected by a `ChaosProxy` in front of one of
//! the relay's connections (the shared servers are never stopped): a database blip must not stall
//! the entities for a lease nor publish confirmed rows twice; a broker outage must not be charged
//! to the events, however long it lasts.

use std::time::{Duration, Instant};

use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, Relay, RelayBuilder};
use outbox_system_tests::sizes::{BROKER_OUTAGE, OUTAGE_BACKLOG};
use outbox_system_tests::{Load, count, fill};
use outbox_testkit::{ChaosProxy, Harness, Recorder, TestDb, wait_for};
use outbox_types::{NewEvent, Publisher, RetryPolicy};
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

use crate::support;

/// A relay with the product's defaults (a lease of 30 s) on the harness's exchange, over
/// `database`, in batches of 200 with two in flight.
fn relay<P: Publisher>(h: &Harness, database: PgConnectOptions, publisher: P) -> RelayBuilder<P> {
    Relay::builder(database, publisher)
        .exchange(h.exchange())
        .declare_exchange(false)
        .batch_size(200)
        .confirm_window(400)
}

/// Waits until a tenth of the backlog went out: the drain is under way.
async fn under_way(recorder: &Recorder, load: Load) {
    wait_for("the drain to be under way", Duration::from_secs(60), || async {
        outbox_testkit::at_least(recorder.count(), load.events() / 10)
    })
    .await
    .expect("busy");
}

/// Waits until every row is marked published.
async fn all_marked(pool: &PgPool, n: usize) {
    wait_for("every row marked published", Duration::from_secs(30), || async {
        let published = outbox_ops::admin::stats(pool).await.map_err(|e| e.to_string())?.published;
        outbox_testkit::equal(published, n as i64)
    })
    .await
    .expect("all marked");
}

/// Waits until the recorder has every event, then checks their per-entity order.
async fn assert_all_delivered_in_order(recorder: &Recorder, ids: &[uuid::Uuid]) {
    wait_for("every event delivered", Duration::from_secs(180), || async {
        recorder.all_delivered(ids.iter().copied()).map_err(|missing| format!("{} missing", missing.len()))
    })
    .await
    .expect("nothing lost");
    recorder.in_entity_order().expect("per-entity order");
}

/// More than a confirm window (400) of deliveries: what goes out after a fault was claimed after
/// it, not only what was in flight.
fn after_fault(load: Load) -> usize {
    let n = (load.events() / 5).min(1_000);
    assert!(n > 400, "a backlog of {} events leaves no more than a confirm window after a fault", load.events());
    n
}

/// Fails unless at least `n` events were still to be delivered when the fault landed: a fault
/// after the drain proves nothing.
fn landed_mid_drain(recorder: &Recorder, load: Load, n: usize) {
    let delivered = recorder.count();
    assert!(
        delivered + n <= load.events(),
        "the fault landed when {delivered} of {} events were delivered, fewer than {n} to go: too late to prove \
         anything (the backlog in outbox_system_tests::sizes is too small for this host)",
        load.events()
    );
}

/// Waits until `n` more events reached the queue than at `from`; returns how long it took.
async fn time_to_deliver(recorder: &Recorder, from: usize, n: usize) -> Duration {
    let started = Instant::now();
    wait_for("delivery to resume", Duration::from_secs(60), || async {
        outbox_testkit::at_least(recorder.count(), from + n)
    })
    .await
    .expect("delivery resumed");
    started.elapsed()
}

/// PostgreSQL goes away for 2 s in the middle of a drain (every connection of the relay cut, new
/// ones refused). Batches whose confirms arrived meanwhile keep them and record them when the
/// database answers: delivery resumes within seconds of the heal (the lease is 30 s), and nothing
/// the broker confirmed is published again.
#[tokio::test]
async fn a_database_blip_stalls_nothing_and_publishes_nothing_twice() {
    run_a_database_blip_stalls_nothing_and_publishes_nothing_twice(OUTAGE_BACKLOG.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn a_database_blip_stalls_nothing_and_publishes_nothing_twice_long_tier() {
    run_a_database_blip_stalls_nothing_and_publishes_nothing_twice(OUTAGE_BACKLOG.long).await;
}

async fn run_a_database_blip_stalls_nothing_and_publishes_nothing_twice(load: Load) {
    let h = support::env().await;
    let (recorder, ids) = (h.recorder(), fill(h.pool(), load).await);
    let proxy = ChaosProxy::start("127.0.0.1:5432".parse().expect("addr")).await.expect("proxy");
    let through_proxy = h.db().connect_options().clone().host("127.0.0.1").port(proxy.addr().port());
    let relay = relay(&h, through_proxy, support::publisher()).build().expect("relay").spawn();
    under_way(recorder, load).await;

    proxy.refuse();
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(2)).await; // the outage itself
    proxy.heal();
    let at_heal = recorder.count();
    landed_mid_drain(recorder, load, after_fault(load));
    // More than a confirm window of new deliveries: claims after the heal, not what was in flight.
    let resumed = time_to_deliver(recorder, at_heal, after_fault(load)).await;
    println!("database blip: delivery resumed {} ms after the heal", resumed.as_millis());
    assert!(resumed < Duration::from_secs(12), "delivery resumed {resumed:?} after the heal; the lease is 30 s");

    assert_all_delivered_in_order(recorder, &ids).await;
    let duplicates: usize = recorder.duplicates().values().map(|n| n - 1).sum();
    println!("database blip: {duplicates} events published twice");
    assert_eq!(duplicates, 0, "confirmed events were published again");
    all_marked(h.pool(), ids.len()).await;
    relay.shutdown().await.expect("shutdown");
    h.close().await.expect("cleanup");
}

/// RabbitMQ cannot be reached for a while (6 s; 15 s in the long tier) in the middle of a drain,
/// with a retry policy whose `max_age` (2 s) and `max_attempts` (3) an outage charged to the events would exceed many times
/// over: no event's attempts grow, nothing is quarantined, and delivery resumes within the
/// publisher's reconnect back-off once the broker answers.
#[tokio::test]
async fn a_broker_outage_charges_no_event_and_delivery_resumes_at_once() {
    run_a_broker_outage_charges_no_event_and_delivery_resumes_at_once(OUTAGE_BACKLOG.fast, BROKER_OUTAGE.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn a_broker_outage_charges_no_event_and_delivery_resumes_at_once_long_tier() {
    run_a_broker_outage_charges_no_event_and_delivery_resumes_at_once(OUTAGE_BACKLOG.long, BROKER_OUTAGE.long).await;
}

async fn run_a_broker_outage_charges_no_event_and_delivery_resumes_at_once(load: Load, outage: Duration) {
    let h = support::env().await;
    let (recorder, ids) = (h.recorder(), fill(h.pool(), load).await);
    let proxy = ChaosProxy::start("127.0.0.1:5672".parse().expect("addr")).await.expect("proxy");
    let url = format!("amqp://guest:guest@{}/%2f", proxy.addr());
    let policy = RetryPolicy::default()
        .initial_delay(Duration::from_millis(200))
        .max_attempts(3)
        .max_age(Duration::from_secs(2));
    let publisher = AmqpPublisher::builder(url).build_unchecked();
    let relay = relay(&h, h.db().connect_options().clone(), publisher).retry_policy(policy).build().expect("relay");
    let relay = relay.spawn();
    under_way(recorder, load).await;

    proxy.refuse();
    proxy.cut();
    let tried = proxy.connections();
    tokio::time::sleep(outage).await; // the outage itself
    let charged =
        count(h.pool(), "SELECT count(*) FROM outbox_events WHERE attempts > 1 OR last_error IS NOT NULL").await;
    assert_eq!(charged, 0, "the outage was charged to {charged} events");
    assert!(proxy.connections() >= tried + 2, "the relay kept trying to reconnect during the outage");
    proxy.heal();
    let at_heal = recorder.count();
    landed_mid_drain(recorder, load, after_fault(load));
    let resumed = time_to_deliver(recorder, at_heal, after_fault(load)).await;
    println!("broker outage: delivery resumed {} ms after the heal", resumed.as_millis());
    assert!(resumed < Duration::from_secs(12), "delivery resumed {resumed:?} after the heal");

    assert_all_delivered_in_order(recorder, &ids).await;
    all_marked(h.pool(), ids.len()).await;
    let (max_attempts, quarantined): (i32, i64) =
        sqlx::query_as("SELECT max(attempts), count(*) FILTER (WHERE status = 'quarantined') FROM outbox_events")
            .fetch_one(h.pool())
            .await
            .expect("attempts");
    assert_eq!(quarantined, 0, "an outage quarantines nothing, even past max_age");
    assert_eq!(max_attempts, 1, "every event was charged only with the attempt that reached the broker");
    relay.shutdown().await.expect("shutdown");
    h.close().await.expect("cleanup");
}

/// A relay given two nodes of one broker (here two proxies in front of the shared broker) loses its
/// node in the middle of a drain (every connection through it cut, new ones refused): it goes on
/// through the other node at once, nothing is charged to the events, every event arrives in
/// per-entity order, and only confirms lost with the node are published again.
#[tokio::test]
async fn a_relay_given_two_nodes_goes_on_through_the_other_when_its_node_goes() {
    run_a_relay_given_two_nodes_goes_on_through_the_other_when_its_node_goes(OUTAGE_BACKLOG.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn a_relay_given_two_nodes_goes_on_through_the_other_when_its_node_goes_long_tier() {
    run_a_relay_given_two_nodes_goes_on_through_the_other_when_its_node_goes(OUTAGE_BACKLOG.long).await;
}

async fn run_a_relay_given_two_nodes_goes_on_through_the_other_when_its_node_goes(load: Load) {
    let h = support::env().await;
    let (recorder, ids) = (h.recorder(), fill(h.pool(), load).await);
    let upstream = "127.0.0.1:5672".parse().expect("addr");
    let (first, second) =
        (ChaosProxy::start(upstream).await.expect("proxy"), ChaosProxy::start(upstream).await.expect("proxy"));
    let url = |proxy: &ChaosProxy| format!("amqp://guest:guest@{}/%2f", proxy.addr());
    let publisher = AmqpPublisher::builder(url(&first)).node(url(&second)).build().expect("publisher");
    let relay = relay(&h, h.db().connect_options().clone(), publisher).build().expect("relay").spawn();
    under_way(recorder, load).await;
    assert_eq!(second.connections(), 0, "the first node is tried first");

    first.refuse();
    first.cut();
    let at_loss = recorder.count();
    landed_mid_drain(recorder, load, after_fault(load));
    let resumed = time_to_deliver(recorder, at_loss, after_fault(load)).await;
    println!("node loss: {} more events delivered {} ms after the node went", after_fault(load), resumed.as_millis());
    assert!(second.connections() >= 1, "the relay connected through the second node");
    assert!(resumed < Duration::from_secs(10), "delivery resumed {resumed:?} after the node went");

    assert_all_delivered_in_order(recorder, &ids).await;
    all_marked(h.pool(), ids.len()).await;
    let duplicates: usize = recorder.duplicates().values().map(|n| n - 1).sum();
    println!("node loss: {duplicates} events published twice (confirms lost with the node)");
    assert!(duplicates <= 400, "{duplicates} republished: more than the confirm window");
    let charged =
        count(h.pool(), "SELECT count(*) FROM outbox_events WHERE attempts > 1 OR last_error IS NOT NULL").await;
    assert_eq!(charged, 0, "the node's loss was charged to {charged} events");
    relay.shutdown().await.expect("shutdown");
    h.close().await.expect("cleanup");
}

/// A broker that answers but closes the channel over the messages (here: the exchange does not
/// exist, 404) is not an outage: the failures are charged to the events, which back off and are
/// quarantined when the policy says so, instead of pausing and resuming the relay forever.
#[tokio::test]
async fn a_channel_the_broker_closes_is_charged_to_the_events_not_taken_for_an_outage() {
    let db = TestDb::new().await.expect("db");
    let outbox = Outbox::new();
    let mut tx = db.pool().begin().await.expect("begin");
    let events = (0..3).map(|e| {
        NewEvent::json("order.changed", &serde_json::json!({ "n": e })).expect("json").entity(format!("order-{e}"))
    });
    outbox.enqueue_many(&mut *tx, events.collect::<Vec<_>>()).await.expect("enqueue");
    tx.commit().await.expect("commit");
    let policy = RetryPolicy::default().initial_delay(Duration::from_millis(50)).max_attempts(3);
    let relay = Relay::builder(
        db.connect_options().clone(),
        AmqpPublisher::builder(outbox_testkit::amqp_url()).build_unchecked(),
    )
    .exchange(format!("missing-{}", outbox_testkit::unique_suffix()))
    .declare_exchange(false)
    .retry_policy(policy)
    .build()
    .expect("relay")
    .spawn();
    wait_for("every event quarantined", Duration::from_secs(60), || async {
        outbox_testkit::equal(
            count(db.pool(), "SELECT count(*) FROM outbox_events WHERE status = 'quarantined'").await,
            3,
        )
    })
    .await
    .expect("quarantined after their attempts");
    let reasons: Vec<(i32, Option<String>)> =
        sqlx::query_as("SELECT attempts, last_error FROM outbox_events").fetch_all(db.pool()).await.expect("rows");
    for (attempts, reason) in reasons {
        assert_eq!(attempts, 3, "each event quarantined after exactly its attempts ({reason:?})");
    }
    relay.shutdown().await.expect("shutdown");
    db.close().await.expect("db cleanup");
}

/// The broker closes the relay's connection in the middle of a drain (`rabbitmqctl
/// close_connection`: CONNECTION_FORCED, as when a node stops or restarts): the confirms in flight
/// are lost with the connection, which is not the events' failure. Every event is delivered in
/// order, and none is charged more than the attempt that got it through.
#[tokio::test]
async fn a_connection_the_broker_closes_is_not_charged_to_the_events() {
    run_a_connection_the_broker_closes_is_not_charged_to_the_events(OUTAGE_BACKLOG.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn a_connection_the_broker_closes_is_not_charged_to_the_events_long_tier() {
    run_a_connection_the_broker_closes_is_not_charged_to_the_events(OUTAGE_BACKLOG.long).await;
}

async fn run_a_connection_the_broker_closes_is_not_charged_to_the_events(load: Load) {
    let h = support::env().await;
    let (recorder, ids) = (h.recorder(), fill(h.pool(), load).await);
    let name = format!("outage-test-{}", outbox_testkit::unique_suffix());
    let publisher = AmqpPublisher::builder(outbox_testkit::amqp_url()).connection_name(&name).build_unchecked();
    let relay = relay(&h, h.db().connect_options().clone(), publisher).build().expect("relay").spawn();
    under_way(recorder, load).await;
    assert_eq!(outbox_testkit::close_connections_named(&name).await.expect("rabbitmqctl"), 1);
    landed_mid_drain(recorder, load, 400);

    assert_all_delivered_in_order(recorder, &ids).await;
    all_marked(h.pool(), ids.len()).await;
    let charged = count(h.pool(), "SELECT count(*) FROM outbox_events WHERE attempts > 1").await;
    assert_eq!(charged, 0, "the closed connection was charged to {charged} events");
    relay.shutdown().await.expect("shutdown");
    h.close().await.expect("cleanup");
}
