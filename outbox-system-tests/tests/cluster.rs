//! The product on a RabbitMQ cluster of three nodes of its own, beside the shared server: a relay
//! given every node drains a backlog into quorum partition queues and a runner applies it; the
//! relay's node stops in the middle of the drain and comes back, then the runner's node. Every event
//! is published and applied once, in per-entity order, and the time to go on through another node
//! is printed. A serial test binary of its own: the nodes load the host. Long tier only: starting
//! three nodes takes minutes (`cargo test -p outbox-system-tests --test cluster -- --ignored`).

use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner, QueueType, RunnerHandle, Topology};
use outbox_relayer::{AmqpPublisher, Partitioned, Relay, RelayHandle};
use outbox_system_tests::sizes::CLUSTER_BACKLOG;
use outbox_system_tests::{count, fill};
use outbox_testkit::{TestCluster, TestDb, wait_for};
use outbox_types::ExchangeKind;
use sqlx::PgPool;
use tower::Layer;

const ENTITIES: usize = CLUSTER_BACKLOG.entities;
/// Events per entity in each backlog.
const PER_ENTITY: usize = CLUSTER_BACKLOG.per_entity;
const BACKLOG: i64 = (ENTITIES * PER_ENTITY) as i64;
const PARTITIONS: u32 = 4;
const EXCHANGE: &str = "events";
const RELAY: &str = "cluster-test-relay";
const RUNNER: &str = "cluster-test-runner";
/// How long a node may take to stop or start, and everything to be applied: generous, for a busy host.
const DEADLINE: Duration = Duration::from_secs(600);

async fn apply(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let entity = req.event().entity.as_ref().map(|e| (e.key.clone(), e.seq as i64));
    let (key, seq) = entity.ok_or_else(|| HandlerError::permanent("unordered event"))?;
    sqlx::query("INSERT INTO applied (entity, seq) VALUES ($1, $2)").bind(key).bind(seq).execute(req.conn()).await?;
    Ok(req)
}

const PUBLISHED: &str = "SELECT count(*) FROM outbox_events WHERE status = 'published'";
const APPLIED: &str = "SELECT count(*) FROM applied";

/// The exchange, the quorum partitions and an audit queue holding every message that reached the
/// broker, declared through node 1.
async fn topology(url: &str) -> (Topology, String) {
    let connection = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await.expect("node 1");
    let channel = connection.create_channel().await.expect("channel");
    outbox_amqp::declare_exchange(&channel, EXCHANGE, ExchangeKind::Topic).await.expect("exchange");
    let partitions =
        outbox_inbox::declare_partitions_as(&channel, QueueType::Quorum, EXCHANGE, "shipping", "partition.", 4)
            .await
            .expect("partitions");
    let audit = outbox_inbox::declare_queue_as(&channel, QueueType::Quorum, EXCHANGE, "audit", &["#"])
        .await
        .expect("audit queue");
    connection.close(200, "declared".into()).await.expect("close");
    (partitions, audit.queues[0].clone())
}

fn relay(db: &TestDb, urls: &[String]) -> RelayHandle {
    let publisher =
        AmqpPublisher::builder(&urls[0]).nodes(&urls[1..]).connection_name(RELAY).build().expect("publisher");
    Relay::builder(db.connect_options().clone(), publisher)
        .exchange(EXCHANGE)
        .declare_exchange(false)
        .routing(Partitioned::new(PARTITIONS))
        .build()
        .expect("relay")
        .spawn()
}

/// The runner starts on node 3, then node 1, then node 2.
fn runner(pool: &PgPool, urls: &[String], topology: &Topology) -> RunnerHandle {
    let service = InboxLayer::new(pool.clone(), "shipping").layer(tower::service_fn(apply));
    InboxRunner::builder(&urls[2], service)
        .nodes([&urls[0], &urls[1]])
        .connection_name(RUNNER)
        .topology(topology)
        .build()
        .expect("runner")
        .spawn()
}

/// Stops node `i` once `sql` counts `at_least`, waits for the first count after the node is down
/// and then for 1,000 more, starts the node again; returns the time from the stop to that first
/// one and to those 1,000 more (going on through another node).
async fn lose_node(
    cluster: &TestCluster,
    i: usize,
    pool: &PgPool,
    sql: &'static str,
    at_least: i64,
) -> (Duration, Duration) {
    wait_for("the drain under way", DEADLINE, || async { outbox_testkit::at_least(count(pool, sql).await, at_least) })
        .await
        .expect("under way");
    let stopped = Instant::now();
    let at_stop = count(pool, sql).await;
    tokio::task::block_in_place(|| cluster.stop_node(i)).expect("stop node");
    let took_to_stop = stopped.elapsed();
    let when_down = count(pool, sql).await;
    wait_for("the first one through another node", DEADLINE, || async {
        (count(pool, sql).await > when_down).then_some(())
    })
    .await
    .expect("went on");
    let first = stopped.elapsed();
    wait_for("1,000 more through another node", DEADLINE, || async {
        outbox_testkit::at_least(count(pool, sql).await, at_stop + 1_000)
    })
    .await
    .expect("went on");
    let resumed = stopped.elapsed();
    println!(
        "node {} stopped at {at_stop}: stop_app took {} ms; the first one once it was down {} ms, 1,000 more {} ms \
         after the stop began",
        i + 1,
        took_to_stop.as_millis(),
        first.as_millis(),
        resumed.as_millis()
    );
    tokio::task::block_in_place(|| cluster.start_node(i)).expect("start node");
    (first, resumed)
}

/// Waits until the client `name` is connected to node `i`.
async fn connected(cluster: &TestCluster, i: usize, name: &str) {
    let what = format!("{name} connected to node {}", i + 1);
    wait_for(&what, DEADLINE, || async {
        (tokio::task::block_in_place(|| cluster.clients_on(i, name)).expect("list connections") == 1).then_some(())
    })
    .await
    .expect("connected");
}

/// Waits until the client `name` has one connection, on a node other than `lost`: it moved on,
/// to whichever live node answered first (the next in its list, or the one after when that one
/// is slow to answer while the cluster absorbs the loss).
async fn moved_on(cluster: &TestCluster, lost: usize, name: &str) {
    let what = format!("{name} connected to a node other than node {}", lost + 1);
    wait_for(&what, DEADLINE, || async {
        let on: Vec<usize> = (0..3)
            .map(|i| tokio::task::block_in_place(|| cluster.clients_on(i, name)).expect("list connections"))
            .collect();
        let elsewhere: usize = on.iter().enumerate().filter(|(i, _)| *i != lost).map(|(_, n)| n).sum();
        if on[lost] == 0 && elsewhere == 1 { Ok(()) } else { Err(format!("connections per node {on:?}")) }
    })
    .await
    .expect("moved on");
}

/// Every message the audit queue holds: (messages, distinct event ids).
async fn audit(url: &str, queue: &str) -> (usize, usize) {
    let connection = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await.expect("node");
    let channel = connection.create_channel().await.expect("channel");
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let held = channel.queue_declare(queue.into(), passive, Default::default()).await.expect("audit").message_count();
    channel.basic_qos(1_000, BasicQosOptions::default()).await.expect("qos");
    let no_ack = BasicConsumeOptions { no_ack: true, ..Default::default() };
    let mut consumer =
        channel.basic_consume(queue.into(), "audit".into(), no_ack, Default::default()).await.expect("consume");
    let mut ids = std::collections::HashSet::new();
    for _ in 0..held {
        let delivery = tokio::time::timeout(Duration::from_secs(60), consumer.next()).await;
        let delivery = delivery.expect("audit delivery in time").expect("open").expect("delivery");
        ids.insert(delivery.properties.message_id().clone().expect("message id").to_string());
    }
    connection.close(200, "audited".into()).await.expect("close");
    (held as usize, ids.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long tier"]
async fn a_node_lost_under_the_relay_then_under_the_runner_loses_no_event_and_applies_none_twice() {
    if let Some(why) = TestCluster::unavailable() {
        assert!(std::env::var_os("OUTBOX_REQUIRE_CLUSTER").is_none(), "OUTBOX_REQUIRE_CLUSTER is set and {why}");
        eprintln!("skipped: {why}");
        return;
    }
    let started = Instant::now();
    let cluster = TestCluster::start(Duration::from_secs(180)).expect("cluster");
    println!("cluster of 3 nodes up in {} ms", started.elapsed().as_millis());
    let urls = cluster.urls();
    assert!(urls.iter().all(|u| !u.contains(":5672/")), "the shared server's port is not used: {urls:?}");
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    sqlx::query("CREATE TABLE applied (n bigserial PRIMARY KEY, entity text NOT NULL, seq bigint NOT NULL)")
        .execute(pool)
        .await
        .expect("applied");
    let (partitions, audit_queue) = topology(&urls[0]).await;

    fill(pool, CLUSTER_BACKLOG).await;
    let relay = relay(&db, &urls);
    let runner = runner(pool, &urls, &partitions);
    wait_for("a publish", DEADLINE, || async { (count(pool, PUBLISHED).await > 0).then_some(()) }).await.expect("on");
    connected(&cluster, 0, RELAY).await;
    connected(&cluster, 2, RUNNER).await;
    let (relay_first, relay_resumed) = lose_node(&cluster, 0, pool, PUBLISHED, 10_000).await;
    wait_for("the first backlog applied", DEADLINE, || async {
        outbox_testkit::at_least(count(pool, APPLIED).await, BACKLOG)
    })
    .await
    .expect("applied");
    moved_on(&cluster, 0, RELAY).await;

    fill(pool, CLUSTER_BACKLOG).await;
    let (runner_first, runner_resumed) = lose_node(&cluster, 2, pool, APPLIED, BACKLOG + 10_000).await;
    wait_for("both backlogs applied", DEADLINE, || async {
        outbox_testkit::at_least(count(pool, APPLIED).await, 2 * BACKLOG)
    })
    .await
    .expect("applied");
    moved_on(&cluster, 2, RUNNER).await;
    moved_on(&cluster, 2, RELAY).await;
    let stats = runner.stats();
    relay.shutdown().await.expect("relay shutdown");
    runner.shutdown().await.expect("runner shutdown");

    assert_eq!(count(pool, "SELECT count(*) FROM outbox_events WHERE status <> 'published'").await, 0, "unconfirmed");
    let charged = count(pool, "SELECT count(*) FROM outbox_events WHERE attempts > 1").await;
    assert_eq!(count(pool, APPLIED).await, 2 * BACKLOG, "each event applied once");
    let out_of_order = count(
        pool,
        "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY entity ORDER BY n) AS place
                                FROM applied) a WHERE seq <> place",
    )
    .await;
    assert_eq!(out_of_order, 0, "every entity's events applied in order 1..=200");
    let (reached, distinct) = audit(&urls[1], &audit_queue).await;
    assert_eq!(distinct as i64, 2 * BACKLOG, "every event reached the broker");
    println!(
        "cluster: {} events; {} published twice; {charged} rows retried; the inbox dropped {} duplicates; \
         after its node stopped, the relay's first confirm through another node {} ms (1,000 more {} ms), \
         the runner's first applied event {} ms (1,000 more {} ms)",
        2 * BACKLOG,
        reached - distinct,
        stats.duplicates,
        relay_first.as_millis(),
        relay_resumed.as_millis(),
        runner_first.as_millis(),
        runner_resumed.as_millis()
    );
    assert!(relay_resumed < Duration::from_secs(30) && runner_resumed < Duration::from_secs(30), "went on late");
    db.close().await.expect("cleanup");
    let root = cluster.nodes()[0].dir().to_owned();
    drop(cluster);
    assert!(!root.exists(), "the nodes' folders are removed");
}
