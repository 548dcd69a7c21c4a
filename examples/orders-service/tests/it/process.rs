//! The `orders-service` process: it publishes to the exchange named by `EXCHANGE`, and stops
//! gracefully (exit status 0) on SIGTERM and on Ctrl-C (SIGINT).

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use outbox_testkit::{TestBroker, TestDb, wait_for};

/// Generous: the host may be busy building something else.
const DEADLINE: Duration = Duration::from_secs(120);
const CHANGES: u32 = 40;

/// Kills the process if the test ends before it exited, even on a panic.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the service on `exchange`; the partition queues its relay declares are named after the
/// test's broker and deleted with it.
fn spawn(db: &TestDb, broker: &TestBroker, exchange: &str) -> Process {
    let base = broker.name("shipping");
    broker.remember_topology(&outbox_relayer::Topology::partitioned(exchange, &base, 2));
    let child = Command::new(env!("CARGO_BIN_EXE_orders-service"))
        .env("DATABASE_URL", db.url())
        .env("AMQP_URL", outbox_testkit::amqp_url())
        .env("EXCHANGE", exchange)
        .env("QUEUE_BASE", base)
        .env("PARTITIONS", "2")
        .env("CHANGES", CHANGES.to_string())
        .env("ORDERS", "5")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn orders-service");
    Process(child)
}

/// How many messages `queue` holds.
async fn messages(broker: &TestBroker, queue: &str) -> u32 {
    let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    match broker.channel().queue_declare(queue.into(), passive, FieldTable::default()).await {
        Ok(q) => q.message_count(),
        Err(_) => 0,
    }
}

/// Runs the service until every event reached the test's queue, sends `signal`, and returns how
/// the process exited.
async fn run_then_signal(signal: &str) -> ExitStatus {
    let db = TestDb::empty().await.expect("db");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("orders", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue = broker.declare_queue("orders-service").await.expect("queue");
    broker.bind(&queue, &exchange, "#").await.expect("bind");

    let mut process = spawn(&db, &broker, &exchange);
    wait_for("every event in the queue bound to EXCHANGE", DEADLINE, || async {
        outbox_testkit::at_least(messages(&broker, &queue).await, CHANGES)
    })
    .await
    .expect("events published to EXCHANGE");
    assert!(process.0.try_wait().expect("try_wait").is_none(), "orders-service stopped before it was told to");

    let sent = Command::new("kill").args([signal, &process.0.id().to_string()]).status().expect("kill");
    assert!(sent.success(), "kill {signal} failed");
    let status = wait_for("orders-service stopped", DEADLINE, || {
        let exited = process.0.try_wait().expect("try_wait");
        async move { exited }
    })
    .await
    .expect("orders-service stops on the signal");

    let published: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(published, i64::from(CHANGES), "every event recorded as published");
    broker.close().await.expect("broker cleanup");
    db.close().await.expect("db cleanup");
    status
}

#[tokio::test]
async fn publishes_to_the_configured_exchange_and_stops_on_sigterm() {
    let status = run_then_signal("-TERM").await;
    assert!(status.success(), "exit status on SIGTERM: {status}");
}

#[tokio::test]
async fn stops_on_ctrl_c() {
    let status = run_then_signal("-INT").await;
    assert!(status.success(), "exit status on Ctrl-C: {status}");
}
