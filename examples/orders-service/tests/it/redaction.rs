//! `orders-service` with `RUST_LOG=trace` and no queue bound to its exchange (every event comes
//! back unroutable): its log holds no payload, neither as text nor as the bytes lapin would print.

use std::process::{Command, Stdio};
use std::time::Duration;

use outbox_testkit::{TestBroker, TestDb, wait_for};

/// Generous: the host may be busy building something else.
const DEADLINE: Duration = Duration::from_secs(120);

/// Kills the process if the test ends before it exited, even on a panic.
struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn trace_logs_hold_no_payload() {
    let db = TestDb::empty().await.expect("db");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("orders", lapin::ExchangeKind::Topic).await.expect("exchange");
    let log_path = std::env::temp_dir().join(format!("orders-service-trace-{}.log", outbox_testkit::unique_suffix()));
    let log = std::fs::File::create(&log_path).expect("log file");

    let mut process = Process(
        Command::new(env!("CARGO_BIN_EXE_orders-service"))
            .env("DATABASE_URL", db.url())
            .env("AMQP_URL", outbox_testkit::amqp_url())
            .env("EXCHANGE", &exchange)
            // No queue: every event comes back unroutable, and lapin sees the returned messages.
            .env("QUEUE_BASE", "")
            .env("CHANGES", "5")
            .env("ORDERS", "5")
            .env("RELAY_SECS", "2")
            .env("RUST_LOG", "trace")
            .env("NO_COLOR", "1")
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn orders-service"),
    );
    let status = wait_for("orders-service done", DEADLINE, || {
        let exited = process.0.try_wait().expect("try_wait");
        async move { exited }
    })
    .await
    .expect("orders-service stops after RELAY_SECS");
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    assert!(status.success(), "exit status {status}:\n{text}");

    let returned: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'quarantined'")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert!(returned > 0, "no event came back unroutable: the test proves nothing");
    // The payload starts `{"order_id":`; lapin prints bodies as text or as a list of byte values.
    let as_bytes = format!("{:?}", br#"{"order_id":"#.as_slice());
    let as_bytes = as_bytes.trim_start_matches('[').trim_end_matches(']');
    // (SQL statements logged at DEBUG name the columns, never as JSON keys.)
    for needle in [r#""order_id":"#, r#"\"order_id\":"#, r#""total_cents":"#, r#"\"total_cents\":"#, as_bytes] {
        assert!(!text.contains(needle), "the log holds payload content ({needle}):\n{text}");
    }
    broker.close().await.expect("broker cleanup");
    db.close().await.expect("db cleanup");
}
