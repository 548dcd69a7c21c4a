//! The article's eight measures, read the way an operator reads them: a scripted run with real
//! processes (two `outbox relay` processes and a consumer host serving the shipping service's
//! `/metrics`), and every measure checked on the scraped pages.
//!
//! The script: relay A claims a wave of events through a broker connection that passes no bytes
//! and is killed with its claims; relay B, paused meanwhile by a broker outage of its own, shows
//! the expired leases, then takes them over; a queue that refuses every message of one partition
//! makes some publishes fail transiently until it is deleted; a corrupt row is quarantined with
//! its entity's successors held behind it; the consumer sees a duplicate, a stale event, a gap and
//! a delivery it cannot decode.

#[path = "it/support.rs"]
mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use outbox_producer::Outbox;
use outbox_testkit::{ChaosProxy, TestBroker, TestDb, wait_for};
use outbox_types::{Event, EventId, NewEvent, Payload};
use support::{Running, closed_port, http_get, outbox};

const CONSUMER_HOST: &str = "OUTBOX_ACCEPTANCE_CONSUMER_HOST";
const PARTITIONS: u32 = 2;
/// Orders in the wave relay A claims, and events per order.
const ORDERS: i64 = 10;
const VERSIONS: i64 = 4;
const WAIT: Duration = Duration::from_secs(90);

/// The value of the sample `name` whose labels include every one of `labels` (`key="value"`).
fn sample(page: &str, name: &str, labels: &[&str]) -> Option<f64> {
    page.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        (metric == name && labels.iter().all(|l| rest.contains(l))).then(|| value.parse().ok())?
    })
}

/// Scrapes `port` until `check` accepts the page; returns it.
async fn scrape_until(port: u16, what: &str, check: impl Fn(&str) -> bool) -> String {
    let found = wait_for(what, WAIT, || async {
        let (status, page) = http_get(port, "/metrics").await?;
        (status == 200 && check(&page)).then_some(page)
    })
    .await;
    match found {
        Ok(page) => page,
        Err(e) => panic!("{e}; last page:\n{}", http_get(port, "/metrics").await.unwrap_or_default().1),
    }
}

/// The rows `relay`'s JSON log says it took over from `from`.
fn taken_over_from(relay: &Running, from: &str) -> i64 {
    relay
        .lines()
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v["from"] == from)
        .filter_map(|v| v["rows"].as_i64())
        .sum()
}

async fn wait_ready(port: u16, process: &Running) {
    let ready =
        wait_for("/readyz to answer 200", WAIT, || async { (http_get(port, "/readyz").await?.0 == 200).then_some(()) })
            .await;
    if let Err(e) = ready {
        panic!("{e}; its stderr:\n{}", process.lines().join("\n"));
    }
}

fn amqp_via(proxy: &ChaosProxy) -> String {
    format!("amqp://guest:guest@{}/%2f", proxy.addr())
}

fn relay(db: &TestDb, exchange: &str, amqp_url: &str, id: &str, port: u16) -> Command {
    let mut cmd = outbox();
    cmd.arg("relay")
        .args(["--exchange", exchange, "--no-declare-exchange", "--partitions", &PARTITIONS.to_string()])
        .args(["--relay-id", id, "--lease-secs", "5", "--confirm-timeout-secs", "4"])
        .args(["--gauge-interval-secs", "0.2", "--summary-interval-secs", "1", "--log-format", "json"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", db.url())
        .env("AMQP_URL", amqp_url);
    cmd
}

fn order_changed(order: i64, version: i64) -> NewEvent {
    let payload = serde_json::json!({ "order_id": order, "version": version, "status": "confirmed" });
    NewEvent::json("order.changed", &payload).expect("json").entity(format!("order-{order}"))
}

/// Writes the wave: `ORDERS` orders × `VERSIONS` events, and the quarantine case: a row of
/// `order-q` written by SQL with headers that are not an object, then two events behind it.
/// Returns how many events `enqueue` wrote.
async fn write_wave(db: &TestDb) -> usize {
    let outbox = Outbox::new();
    let mut tx = db.pool().begin().await.expect("begin");
    let events: Vec<NewEvent> = (1..=VERSIONS).flat_map(|v| (1..=ORDERS).map(move |o| order_changed(o, v))).collect();
    let written = events.len();
    outbox.enqueue_many(&mut *tx, events).await.expect("enqueue");
    sqlx::query("INSERT INTO outbox_entity_sequences (entity_key, last_seq) VALUES ('order-q', 1)")
        .execute(&mut *tx)
        .await
        .expect("sequence");
    sqlx::query(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type, headers)
         VALUES (gen_random_uuid(), 'order.changed', 1, 'order-q', 1, '\\x7b7d', 'application/json', '\"x\"')",
    )
    .execute(&mut *tx)
    .await
    .expect("corrupt row");
    let held = (2..=3).map(|v| order_changed(99, v).entity("order-q")).collect::<Vec<_>>();
    outbox.enqueue_many(&mut *tx, held).await.expect("held successors");
    tx.commit().await.expect("commit");
    written + 2
}

/// Starts the consumer host: this test binary again, running [`consumer_host`].
fn spawn_consumer_host(db: &TestDb, exchange: &str, queue_base: &str, port: u16) -> Running {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--ignored", "--exact", "consumer_host", "--nocapture", "--test-threads", "1"])
        .env(CONSUMER_HOST, "1")
        .env("DATABASE_URL", db.url())
        .env("AMQP_URL", outbox_testkit::amqp_url())
        .env("EXCHANGE", exchange)
        .env("QUEUE_BASE", queue_base)
        .env("OUTBOX_METRICS_ADDR", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped());
    Running::spawn(cmd)
}

/// The consumer host of [`the_eight_measures_are_visible_on_the_relay_and_the_consumer`]: the
/// shipping service with its endpoint, until its standard input ends.
#[test]
#[ignore = "the consumer host process of the acceptance test, started by it"]
fn consumer_host() {
    if std::env::var_os(CONSUMER_HOST).is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let var = |name: &str| std::env::var(name).expect(name);
        let addr: SocketAddr = var("OUTBOX_METRICS_ADDR").parse().expect("addr");
        let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        shipping_service::endpoint::serve(addr, ready.clone()).await.expect("endpoint");
        let pool = sqlx::PgPool::connect(&var("DATABASE_URL")).await.expect("database");
        shipping_service::migrate(&pool).await.expect("migrate");
        let gauges = Some(Duration::from_millis(200));
        let (runner, _) =
            shipping_service::start(&pool, &var("AMQP_URL"), &var("EXCHANGE"), &var("QUEUE_BASE"), PARTITIONS, gauges)
                .await
                .expect("start");
        ready.store(true, std::sync::atomic::Ordering::Relaxed);
        // Until the test closes our standard input.
        let _ = tokio::task::spawn_blocking(|| std::io::read_to_string(std::io::stdin())).await;
        runner.shutdown().await.expect("shutdown");
    });
}

/// Publishes, straight to partition 0, what a consumer must cope with: a duplicate of the first
/// event of `order-1` (its id, as the relay published it), a stale event (a new id with that
/// sequence), the second event of an order whose first never comes (a gap), and a message that is
/// not an event of the wire contract.
async fn publish_consumer_cases(broker: &TestBroker, db: &TestDb, exchange: &str) {
    let (id,): (uuid::Uuid,) = sqlx::query_as("SELECT id FROM outbox_events WHERE entity_key = 'order-1' AND seq = 1")
        .fetch_one(db.pool())
        .await
        .expect("first event");
    let event = |id: EventId, key: &str, seq: u64| {
        let payload = serde_json::json!({ "order_id": 1, "version": seq, "status": "confirmed" });
        let mut e = Event::new(
            id,
            "order.changed",
            Payload::new(serde_json::to_vec(&payload).expect("json"), "application/json"),
            std::time::SystemTime::now(),
        );
        e.entity = Some(outbox_types::Entity { key: key.to_owned(), seq });
        e
    };
    let cases = [
        event(EventId::from_uuid(id), "order-1", 1),
        event(EventId::new(), "order-1", 1),
        event(EventId::new(), "order-gap", 2),
    ];
    broker.publish_events(exchange, "partition.0", &cases).await.expect("consumer cases");
    let properties = lapin::BasicProperties::default().with_delivery_mode(2);
    broker
        .channel()
        .basic_publish(exchange.into(), "partition.0".into(), Default::default(), b"not an event", properties)
        .await
        .expect("publish")
        .await
        .expect("confirm");
}

/// Declares a queue on partition 0's routing key that refuses every message (`x-max-length` 0,
/// `reject-publish`): the broker nacks what is routed there, a transient failure for the relay.
async fn refuse_partition_0(broker: &TestBroker, exchange: &str) -> String {
    let mut args = lapin::types::FieldTable::default();
    args.insert("x-max-length".into(), lapin::types::AMQPValue::LongLongInt(0));
    args.insert("x-overflow".into(), lapin::types::AMQPValue::LongString("reject-publish".into()));
    let queue = broker.declare_queue_with("refusing", args).await.expect("queue");
    broker.bind(&queue, exchange, "partition.0").await.expect("bind");
    queue
}

fn json_lines(lines: &[String]) -> Vec<serde_json::Value> {
    lines.iter().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[tokio::test]
async fn the_eight_measures_are_visible_on_the_relay_and_the_consumer() {
    let recorder = DebuggingRecorder::new();
    let created = recorder.snapshotter();
    recorder.install().expect("recorder of this test process (the producer)");
    let producer_db = TestDb::new().await.expect("db");
    let consumer_db = TestDb::new().await.expect("db");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("acceptance", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue_base = broker.name("shipping");
    for n in 0..PARTITIONS {
        broker.remember_queue(&format!("{queue_base}.{n}"));
    }
    broker.remember_queue(&format!("{queue_base}.dead"));
    broker.remember_exchange(&format!("{queue_base}.dlx"));

    let consumer_port = closed_port();
    let host = spawn_consumer_host(&consumer_db, &exchange, &queue_base, consumer_port);
    wait_ready(consumer_port, &host).await;

    // Relay B comes up, then loses the broker: its claims pause, its gauges go on.
    let broker_addr = "127.0.0.1:5672".parse().expect("addr");
    let proxy_b = ChaosProxy::start(broker_addr).await.expect("proxy");
    let port_b = closed_port();
    let b = Running::spawn(relay(&producer_db, &exchange, &amqp_via(&proxy_b), "relay-b", port_b));
    wait_ready(port_b, &b).await;
    proxy_b.refuse();
    proxy_b.cut();
    // An event to publish shows B the broker is gone.
    let mut tx = producer_db.pool().begin().await.expect("begin");
    Outbox::new().enqueue(&mut *tx, order_changed(1000, 1)).await.expect("enqueue");
    tx.commit().await.expect("commit");
    wait_for("relay B to see the broker gone", WAIT, || async {
        (http_get(port_b, "/readyz").await?.0 == 503).then_some(())
    })
    .await
    .expect("B paused");

    // Relay A claims the wave through a connection that passes no bytes, and is killed.
    let proxy_a = ChaosProxy::start(broker_addr).await.expect("proxy");
    let port_a = closed_port();
    let a = Running::spawn(relay(&producer_db, &exchange, &amqp_via(&proxy_a), "relay-a", port_a));
    wait_ready(port_a, &a).await;
    proxy_a.stall();
    let written = write_wave(&producer_db).await + 1;
    // A claims the wave, and quarantines the corrupt row as it claims it.
    let held_by_a: i64 = wait_for("relay A to claim", WAIT, || async {
        let (n, quarantined): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE lease_owner = 'relay-a'), count(*) FILTER (WHERE status = 'quarantined')
             FROM outbox_events",
        )
        .fetch_one(producer_db.pool())
        .await
        .ok()?;
        (n > 0 && quarantined == 1).then_some(n)
    })
    .await
    .expect("A claims");
    a.signal("-KILL");
    let _ = a.finish(WAIT).await;
    let held_by_a: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE lease_owner = 'relay-a'")
        .fetch_one(producer_db.pool())
        .await
        .unwrap_or(held_by_a);

    // 6: B, still paused, shows A's leases once they expire; 1, 2, 8: and what waits.
    let page = scrape_until(port_b, "the expired leases on B's page", |p| {
        sample(p, "outbox_expired_leases", &[]) == Some(held_by_a as f64)
    })
    .await;
    assert_eq!(sample(&page, "outbox_events_waiting", &[]), Some(written as f64), "{page}");
    assert!(sample(&page, "outbox_oldest_waiting_age_seconds", &[]).is_some_and(|s| s > 0.0), "{page}");
    assert_eq!(sample(&page, "outbox_entities_behind", &[]), Some(ORDERS as f64 + 2.0), "{page}");
    assert_eq!(sample(&page, "outbox_largest_entity_gap", &[]), Some(VERSIONS as f64), "{page}");

    // B gets its broker back while partition 0 refuses: B takes A's claims over, some publishes
    // fail transiently and are retried; then partition 0 accepts again.
    let refusing = refuse_partition_0(&broker, &exchange).await;
    proxy_b.heal();
    // At least A's claims: on a busy host B's own short leases (5 s) may expire while partition
    // 0 refuses, and B takes those over too.
    let what = format!("takeovers (at least A's {held_by_a}) and transient retries on B's page");
    let page = scrape_until(port_b, &what, |p| {
        sample(p, "outbox_lease_takeovers_total", &[]).is_some_and(|n| n >= held_by_a as f64)
            && sample(p, "outbox_publish_retries_total", &["kind=\"transient\""]).is_some_and(|n| n >= 1.0)
    })
    .await;
    assert!(sample(&page, "outbox_publish_failures_total", &["kind=\"transient\""]).is_some_and(|n| n >= 1.0));
    assert_eq!(taken_over_from(&b, "relay-a"), held_by_a, "B's log names every row it took from A");
    broker.channel().queue_delete(refusing.as_str().into(), Default::default()).await.expect("delete");

    // Everything but order-q's three events goes out; the consumer applies it.
    let published = (ORDERS * VERSIONS + 1) as f64;
    let page = scrape_until(port_b, "the wave published, order-q held", |p| {
        sample(p, "outbox_published_total", &[]) == Some(published)
            && sample(p, "outbox_events_waiting", &[]) == Some(2.0)
            && sample(p, "outbox_events_held", &[]) == Some(2.0)
    })
    .await;
    // 1, 2: held behind the quarantined row, with their age; 5: quarantined by kind; 8: one entity
    // behind, by three.
    assert!(sample(&page, "outbox_oldest_held_age_seconds", &[]).is_some_and(|s| s > 0.0), "{page}");
    assert_eq!(sample(&page, "outbox_events_quarantined", &["kind=\"contract\""]), Some(1.0), "{page}");
    assert_eq!(sample(&page, "outbox_entities_behind", &[]), Some(1.0), "{page}");
    assert_eq!(sample(&page, "outbox_largest_entity_gap", &[]), Some(3.0), "{page}");
    assert_eq!(sample(&page, "outbox_expired_leases", &[]), Some(0.0), "{page}");
    // 3: commit-to-publish latency of every published event; 5: attempts and retries.
    assert_eq!(sample(&page, "outbox_commit_to_confirm_seconds_count", &[]), Some(published), "{page}");
    let attempts = sample(&page, "outbox_publish_attempts_total", &[]).expect("attempts");
    let retries = sample(&page, "outbox_publish_retries_total", &["kind=\"transient\""]).expect("retries");
    assert!(attempts >= published + retries, "{attempts} attempts for {published} published and {retries} retries");
    // 4: created (counted by this producer process) against published.
    let created_total = created.snapshot().into_vec().into_iter().find_map(|(k, _, _, v)| match v {
        DebugValue::Counter(n) if k.key().name() == "outbox_events_created_total" => Some(n),
        _ => None,
    });
    assert_eq!(created_total, Some(written as u64), "every event enqueued is counted (not the SQL row)");

    // 7 and 8, consumer side. The wave is applied once per event (the publishes retried after a
    // nack reached the shipping queue too: duplicates, some out of order and parked first); then
    // what a consumer must cope with arrives, and each case is counted once more.
    let shipping = "consumer=\"shipping\"";
    let outcome =
        |p: &str, o: &str| sample(p, "inbox_events_total", &[shipping, &format!("outcome=\"{o}\"")]).unwrap_or(0.0);
    let applied = |p: &str| outcome(p, "applied") + outcome(p, "applied_from_parking");
    let before = scrape_until(consumer_port, "the wave applied", |p| applied(p) == published).await;
    publish_consumer_cases(&broker, &producer_db, &exchange).await;
    let page = scrape_until(consumer_port, "the consumer's outcomes and gap", |p| {
        let more = |o: &str| outcome(p, o) - outcome(&before, o);
        (more("duplicate"), more("stale"), more("parked")) == (1.0, 1.0, 1.0)
            && sample(p, "inbox_entities_with_gap", &[shipping]) == Some(1.0)
            && sample(p, "inbox_dead_letters_total", &[shipping]) == Some(1.0)
    })
    .await;
    assert_eq!(applied(&page), published, "applied once each:\n{page}");
    assert_eq!(sample(&page, "inbox_events_parked", &[shipping]), Some(1.0), "{page}");
    assert!(sample(&page, "inbox_oldest_parked_age_seconds", &[shipping]).is_some_and(|s| s > 0.0), "{page}");

    // The log an operator follows: JSON lines, the takeover named, a summary, never a payload.
    b.signal("-TERM");
    let (status, lines) = b.finish(WAIT).await;
    assert_eq!(status.code(), Some(0), "clean exit:\n{}", lines.join("\n"));
    let logged = json_lines(&lines);
    assert_eq!(logged.len(), lines.len(), "every line is JSON:\n{}", lines.join("\n"));
    let message = |v: &serde_json::Value| v["message"].as_str().unwrap_or_default().to_owned();
    let takeover = logged.iter().find(|v| message(v).starts_with("outbox.takeover")).expect("a takeover line");
    assert_eq!(takeover["from"], "relay-a", "{takeover}");
    assert!(
        logged.iter().any(|v| message(v) == "outbox.summary" && v["published"].as_u64().is_some_and(|n| n > 0)),
        "a summary line with what was published:\n{}",
        lines.join("\n")
    );
    assert!(!lines.iter().any(|l| l.contains("\"status\":\"confirmed\"") || l.contains("order_id")), "no payload");

    finish_host(host).await;
    drop((proxy_a, proxy_b));
    broker.close().await.expect("broker cleanup");
    producer_db.close().await.expect("cleanup");
    consumer_db.close().await.expect("cleanup");
}

/// Ends the consumer host by closing its standard input, and checks it stopped cleanly.
async fn finish_host(mut host: Running) {
    drop(host.child.stdin.take());
    let (status, lines) = host.finish(WAIT).await;
    assert!(status.success(), "the consumer host stopped cleanly:\n{}", lines.join("\n"));
}
