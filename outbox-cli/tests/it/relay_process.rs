//! The `outbox relay` process: SIGTERM during a busy drain exits cleanly within the deadline with
//! nothing confirmed left unmarked; SIGKILL loses nothing.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outbox_relayer::{AmqpPublisher, Relay};
use outbox_system_tests::sizes::{RELAY_PROCESS_BACKLOG, THREE_RELAYS_BACKLOG};
use outbox_system_tests::{Load, fill};
use outbox_testkit::{Recorder, TestBroker, TestDb, wait_for};

use crate::support::{closed_port, http_get, sample, wait_status};
use sqlx::PgPool;

fn spawn_relay(db: &TestDb, exchange: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .arg("relay")
        .args(["--exchange", exchange, "--no-declare-exchange"])
        .args(if extra.contains(&"--batch-size") {
            &[][..]
        } else {
            &["--batch-size", "200", "--confirm-window", "400"][..]
        })
        .args(extra)
        .env("DATABASE_URL", db.url())
        .env("AMQP_URL", outbox_testkit::amqp_url())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn outbox relay")
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill").args([sig, &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
}

async fn published(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
        .fetch_one(pool)
        .await
        .expect("count")
}

async fn wait_exit(child: &mut Child, deadline: Duration) -> std::process::ExitStatus {
    wait_for("the relay process to exit", deadline, || {
        let status = child.try_wait().expect("try_wait");
        async move { status }
    })
    .await
    .expect("exited in time")
}

async fn setup() -> (TestDb, TestBroker, String, Recorder) {
    let db = TestDb::new().await.expect("db");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("events", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue = broker.declare_queue("all").await.expect("queue");
    broker.bind(&queue, &exchange, "#").await.expect("bind");
    let recorder = Recorder::start(&queue).await.expect("recorder");
    (db, broker, exchange, recorder)
}

/// Publishes what the first relay left. It keeps the default lease and confirm timeout: a short
/// timeout republishes a batch whose confirms are only slow on a busy host, duplicates that are
/// not the first relay's and that the tests' bound does not count.
async fn drain_rest(db: &TestDb, exchange: &str, recorder: &Recorder, ids: &[uuid::Uuid]) {
    let relay = Relay::builder(
        db.connect_options().clone(),
        AmqpPublisher::builder(outbox_testkit::amqp_url()).build_unchecked(),
    )
    .exchange(exchange)
    .declare_exchange(false)
    .poll_interval(Duration::from_millis(200))
    .build()
    .expect("relay")
    .spawn();
    if let Err(e) = wait_for("every event delivered", Duration::from_secs(120), || async {
        recorder.all_delivered(ids.iter().copied()).map_err(|missing| format!("{} missing", missing.len()))
    })
    .await
    {
        let rows: Vec<(String, Option<String>, bool, i64)> = sqlx::query_as(
            "SELECT status, lease_owner, next_attempt_at > now(), count(*) FROM outbox_events GROUP BY 1, 2, 3",
        )
        .fetch_all(db.pool())
        .await
        .expect("diagnose");
        let missing = recorder.all_delivered(ids.iter().copied()).err().unwrap_or_default();
        let states: Vec<(String, Option<i64>, Option<String>)> =
            sqlx::query_as("SELECT status, seq, lease_owner FROM outbox_events WHERE id = ANY($1) LIMIT 5")
                .bind(&missing)
                .fetch_all(db.pool())
                .await
                .expect("missing");
        panic!("{e}: rows by state {rows:?}; {} missing, e.g. {states:?}", missing.len());
    }
    wait_for("every row published", Duration::from_secs(20), || async {
        outbox_testkit::equal(published(db.pool()).await, ids.len() as i64)
    })
    .await
    .expect("all marked");
    relay.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn sigterm_during_a_busy_drain_exits_in_time_and_nothing_confirmed_is_republished() {
    run_sigterm_during_a_busy_drain_exits_in_time_and_nothing_confirmed_is_republished(RELAY_PROCESS_BACKLOG.fast)
        .await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn sigterm_during_a_busy_drain_exits_in_time_and_nothing_confirmed_is_republished_long_tier() {
    run_sigterm_during_a_busy_drain_exits_in_time_and_nothing_confirmed_is_republished(RELAY_PROCESS_BACKLOG.long)
        .await;
}

async fn run_sigterm_during_a_busy_drain_exits_in_time_and_nothing_confirmed_is_republished(load: Load) {
    let (db, broker, exchange, recorder) = setup().await;
    let ids = fill(db.pool(), load).await;
    let mut child = spawn_relay(&db, &exchange, &["--shutdown-deadline-secs", "5"]);
    wait_for("the drain to be under way", Duration::from_secs(60), || async {
        outbox_testkit::at_least(published(db.pool()).await, load.events() as i64 / 10)
    })
    .await
    .expect("busy");
    let sent = Instant::now();
    signal(&child, "-TERM");
    let status = wait_exit(&mut child, Duration::from_secs(8)).await;
    let took = sent.elapsed();
    assert!(status.success(), "clean exit expected, got {status}");
    assert!(took < Duration::from_secs(5), "exit took {took:?}, deadline 5 s");
    let done = published(db.pool()).await;
    assert!(done < ids.len() as i64, "the drain was interrupted (published {done})");
    let leased: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE lease_owner IS NOT NULL")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(leased, 0, "claims are released at shutdown so the next relay continues at once");
    let confirmed: std::collections::HashSet<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM outbox_events WHERE status = 'published'")
            .fetch_all(db.pool())
            .await
            .expect("published ids")
            .into_iter()
            .collect();

    drain_rest(&db, &exchange, &recorder, &ids).await;
    // What the first run recorded as confirmed is never published again. Rows whose confirm had
    // not arrived by the deadline were released with their outcome unknown: the broker may hold
    // them already, so they may arrive twice (at-least-once), at most one confirm window of them.
    let duplicates = recorder.duplicates();
    let republished = duplicates.keys().filter(|id| confirmed.contains(id)).count();
    assert_eq!(republished, 0, "{republished} events confirmed before SIGTERM were published again");
    assert!(duplicates.len() <= 400, "more duplicates than one confirm window: {}", duplicates.len());
    recorder.in_entity_order().expect("order");
    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn sigkill_mid_drain_loses_nothing() {
    run_sigkill_mid_drain_loses_nothing(RELAY_PROCESS_BACKLOG.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn sigkill_mid_drain_loses_nothing_long_tier() {
    run_sigkill_mid_drain_loses_nothing(RELAY_PROCESS_BACKLOG.long).await;
}

async fn run_sigkill_mid_drain_loses_nothing(load: Load) {
    let (db, broker, exchange, recorder) = setup().await;
    let ids = fill(db.pool(), load).await;
    let mut child = spawn_relay(&db, &exchange, &["--lease-secs", "5", "--confirm-timeout-secs", "4"]);
    wait_for("the drain to be under way", Duration::from_secs(60), || async {
        outbox_testkit::at_least(published(db.pool()).await, load.events() as i64 / 10)
    })
    .await
    .expect("busy");
    signal(&child, "-KILL");
    let _ = wait_exit(&mut child, Duration::from_secs(5)).await;
    assert!(published(db.pool()).await < ids.len() as i64);

    drain_rest(&db, &exchange, &recorder, &ids).await;
    // Only rows in flight at the kill may arrive twice, and with their original ids.
    assert!(
        recorder.duplicates().len() <= 400,
        "more duplicates than one confirm window: {}",
        recorder.duplicates().len()
    );
    recorder.in_entity_order().expect("order");
    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

/// Scenario 5 at scale: three `outbox relay` processes, all ready before the backlog is committed,
/// drain it together (3,000 events over 150 entities; 20,000 over 500 in the long tier): each
/// event arrives once, per-entity order holds in the queue, at least two of the relays published
/// a share, and their `outbox_published_total` add up to the backlog.
#[tokio::test]
async fn three_relay_processes_drain_a_backlog_over_many_entities() {
    run_three_relay_processes_drain_a_backlog_over_many_entities(THREE_RELAYS_BACKLOG.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn three_relay_processes_drain_a_backlog_over_many_entities_long_tier() {
    run_three_relay_processes_drain_a_backlog_over_many_entities(THREE_RELAYS_BACKLOG.long).await;
}

async fn run_three_relay_processes_drain_a_backlog_over_many_entities(load: Load) {
    let (db, broker, exchange, recorder) = setup().await;
    let ports: Vec<u16> = (0..3).map(|_| closed_port()).collect();
    let mut children: Vec<Child> = ports
        .iter()
        .map(|port| {
            // Small batches and windows: a relay waiting for its confirms leaves rows to the others.
            let flags =
                ["--batch-size", "50", "--confirm-window", "100", "--metrics-addr", &format!("127.0.0.1:{port}")];
            spawn_relay(&db, &exchange, &flags)
        })
        .collect();
    for &port in &ports {
        wait_status(port, "/readyz", 200, Duration::from_secs(60)).await;
    }
    let ids = fill(db.pool(), load).await;
    let all = wait_for("every event delivered", Duration::from_secs(180), || async {
        recorder.all_delivered(ids.iter().copied()).map_err(|missing| format!("{} missing", missing.len()))
    })
    .await;
    let published_all = wait_for("every row published", Duration::from_secs(30), || async {
        outbox_testkit::equal(published(db.pool()).await, ids.len() as i64)
    })
    .await;
    let mut shares = Vec::new();
    for &port in &ports {
        let (_, page) = http_get(port, "/metrics").await.expect("each relay's metrics");
        shares.push(sample(&page, "outbox_published_total").unwrap_or(0.0) as u64);
    }
    println!("three relays: each published {shares:?}");
    for child in &children {
        signal(child, "-TERM");
    }
    for child in &mut children {
        assert!(wait_exit(child, Duration::from_secs(15)).await.success());
    }
    all.expect("nothing lost");
    published_all.expect("all marked");
    assert_eq!(shares.iter().sum::<u64>(), ids.len() as u64, "the relays' published counts {shares:?}");
    assert!(shares.iter().filter(|&&n| n > 0).count() >= 2, "one relay published everything: {shares:?}");
    assert!(recorder.duplicates().is_empty(), "published twice without a crash: {}", recorder.duplicates().len());
    recorder.in_entity_order().expect("per-entity order across three relays");
    let owners: i64 = sqlx::query_scalar("SELECT count(DISTINCT lease_owner) FROM outbox_events")
        .fetch_one(db.pool())
        .await
        .expect("owners");
    assert_eq!(owners, 0, "published rows keep no lease");
    drop(recorder);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}

/// A relay given the nodes of a cluster, the first of which is down (comma-separated in
/// `AMQP_URL`, or the flag repeated): it publishes every event, in per-entity order, through the
/// node that answers.
#[tokio::test]
async fn a_relay_given_a_node_that_is_down_publishes_through_the_next() {
    let (db, broker, exchange, recorder) = setup().await;
    let ids = fill(db.pool(), Load { entities: 20, per_entity: 50 }).await;
    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("amqp://guest:guest@{}/%2f", listener.local_addr().expect("addr"))
    };
    for (env, flags) in [
        (format!("{down},{}", outbox_testkit::amqp_url()), vec![]),
        (
            String::new(),
            vec!["--amqp-url".to_owned(), down.clone(), "--amqp-url".to_owned(), outbox_testkit::amqp_url()],
        ),
    ] {
        let mut relay = Command::new(env!("CARGO_BIN_EXE_outbox"))
            .arg("relay")
            .args(["--exchange", &exchange, "--no-declare-exchange"])
            .args(&flags)
            .env("DATABASE_URL", db.url())
            .env("AMQP_URL", &env)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn outbox relay");
        fill(db.pool(), Load { entities: 20, per_entity: 10 }).await;
        let all: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(db.pool()).await.expect("n");
        wait_for("every event published", Duration::from_secs(60), || async {
            outbox_testkit::equal(published(db.pool()).await, all)
        })
        .await
        .expect("published through the second node");
        signal(&relay, "-TERM");
        assert!(wait_exit(&mut relay, Duration::from_secs(30)).await.success());
    }
    let all = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events").fetch_one(db.pool()).await.expect("n");
    wait_for("every event recorded", Duration::from_secs(60), || async {
        outbox_testkit::at_least(recorder.count() as i64, all)
    })
    .await
    .unwrap_or_else(|_| panic!("{} of {all} events reached the queue", recorder.count()));
    recorder.in_entity_order().expect("per-entity order");
    assert!(recorder.all_delivered(ids.iter().copied()).is_ok());
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}
