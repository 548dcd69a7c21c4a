//! The shipping service with `OUTBOX_METRICS_ADDR`: the real binary serves its inbox's metrics
//! (a parked gap shows on `/metrics` within a gauge interval), `/healthz` and `/readyz`; an address
//! that cannot be bound stops it at start-up, naming the address.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use outbox_relayer::{Partitioned, RoutingStrategy};
use outbox_testkit::{TestBroker, TestDb, wait_for};
use outbox_types::NewEvent;

const WAIT: Duration = Duration::from_secs(60);

fn spawn(db: &TestDb, exchange: &str, base: &str, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_shipping-service"))
        .env("DATABASE_URL", db.url())
        .env("AMQP_URL", outbox_testkit::amqp_url())
        .env("EXCHANGE", exchange)
        .env("QUEUE_BASE", base)
        .env("PARTITIONS", "2")
        .env("OUTBOX_METRICS_ADDR", format!("127.0.0.1:{port}"))
        .env("GAUGE_INTERVAL_SECS", "0.2")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shipping-service")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A plain HTTP/1.1 GET: the status code and the body, or `None` if nothing answers.
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((head.split_whitespace().nth(1)?.parse().ok()?, body.to_owned()))
}

/// The value of the sample of `name` labelled `consumer="shipping"` (and `extra`, if given).
fn sample(page: &str, name: &str, extra: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let labels = series.strip_prefix(name)?.strip_prefix('{')?;
        (labels.contains("consumer=\"shipping\"") && labels.contains(extra)).then(|| value.parse().ok())?
    })
}

/// Waits for the process to exit; its status and stderr.
async fn exit_of(mut child: Child) -> (std::process::ExitStatus, String) {
    let status = wait_for("shipping-service to exit", WAIT, || {
        let status = child.try_wait().expect("try_wait");
        async move { status }
    })
    .await;
    let status = status.unwrap_or_else(|e| {
        let _ = child.kill();
        panic!("{e}")
    });
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).expect("stderr");
    (status, stderr)
}

#[tokio::test]
async fn the_service_serves_its_inbox_metrics_and_health() {
    let db = TestDb::new().await.expect("db");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("orders", outbox_amqp::lapin::ExchangeKind::Topic).await.expect("exchange");
    let base = broker.name("shipping");
    for q in ["0", "1", "dead"] {
        broker.remember_queue(&format!("{base}.{q}"));
    }
    broker.remember_exchange(&format!("{base}.dlx"));
    let port = free_port();
    let child = spawn(&db, &exchange, &base, port);
    wait_for("/readyz to answer 200", WAIT, || async { (http_get(port, "/readyz").await?.0 == 200).then_some(()) })
        .await
        .expect("ready");
    // Before any event: the inbox's series at zero, so dashboards and alerts read 0, not "no data".
    let fresh = wait_for("the inbox's gauges on /metrics", WAIT, || async {
        let (_, page) = http_get(port, "/metrics").await?;
        sample(&page, "inbox_events_failed", "").is_some().then_some(page)
    })
    .await
    .expect("fresh metrics");
    for (name, label) in [
        ("inbox_events_total", "outcome=\"applied\""),
        ("inbox_events_total", "outcome=\"duplicate\""),
        ("inbox_dead_letters_total", "reason=\"handler_failed\""),
        ("inbox_bad_deliveries_total", "reason=\"unparsable_payload\""),
        ("inbox_events_parked", ""),
    ] {
        assert_eq!(sample(&fresh, name, label), Some(0.0), "{name} {label} at zero before any event:\n{fresh}");
    }

    // The second change of an order whose first never came: parked, a gap.
    let payload = serde_json::json!({ "order_id": 7, "version": 2, "status": "paid" });
    let event = NewEvent::json("order.changed", &payload)
        .expect("json")
        .entity("order-7")
        .into_event(Some(2), SystemTime::now());
    let key = Partitioned::new(2).routing_key(&event);
    broker.publish_routed(&exchange, &[(key, event)]).await.expect("publish");
    let page = wait_for("the parked gap on /metrics", WAIT, || async {
        let (_, page) = http_get(port, "/metrics").await?;
        (sample(&page, "inbox_entities_with_gap", "") == Some(1.0)).then_some(page)
    })
    .await
    .expect("gauges");
    assert_eq!(sample(&page, "inbox_events_total", "outcome=\"parked\""), Some(1.0), "{page}");
    assert_eq!(sample(&page, "inbox_events_parked", ""), Some(1.0), "{page}");
    assert!(page.contains("# HELP inbox_events_total"), "described:\n{page}");
    assert!(!page.contains("order-7"), "no entity key in labels:\n{page}");
    assert_eq!(http_get(port, "/healthz").await.map(|(s, _)| s), Some(200));

    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let (status, stderr) = exit_of(child).await;
    assert!(status.success(), "clean exit on SIGTERM, got {status}:\n{stderr}");
    broker.close().await.expect("broker cleanup");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn an_address_that_cannot_be_bound_stops_the_service_at_start_up() {
    let db = TestDb::new().await.expect("db");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let (status, stderr) = exit_of(spawn(&db, "unused", "unused", port)).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")), "the cause is named:\n{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line:\n{stderr}");
    drop(taken);
    db.close().await.expect("cleanup");
}
