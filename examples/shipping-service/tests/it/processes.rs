//! Three `shipping-service` processes on four partition queues: 1,000 orders, their events
//! published in a shuffled order across orders, one process SIGKILLed half-way. Every change is
//! applied once and in order.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use outbox_relayer::{Partitioned, RoutingStrategy};
use outbox_testkit::{TestBroker, TestDb, wait_for};
use outbox_types::{Event, NewEvent};
use rand::seq::SliceRandom;

fn spawn(db: &TestDb, exchange: &str, base: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_shipping-service"))
        .env("DATABASE_URL", db.url())
        .env("AMQP_URL", outbox_testkit::amqp_url())
        .env("EXCHANGE", exchange)
        .env("QUEUE_BASE", base)
        .env("PARTITIONS", "4")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn shipping-service")
}

async fn applied(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM shipments").fetch_one(db.pool()).await.unwrap_or(0)
}

#[tokio::test]
async fn three_processes_on_four_partitions_apply_every_change_once_in_order() {
    let db = TestDb::new().await.expect("db");
    shipping_service::migrate(db.pool()).await.expect("migrate");
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("orders", outbox_amqp::lapin::ExchangeKind::Topic).await.expect("exchange");
    let base = broker.name("shipping");
    let topology = outbox_inbox::declare_partitions(broker.channel(), &exchange, &base, "partition.", 4)
        .await
        .expect("partitions");
    for q in topology.queues.iter().chain([&topology.dead_letter_queue]) {
        broker.remember_queue(q);
    }
    broker.remember_exchange(&topology.dead_letter_exchange);

    let mut slots: Vec<i64> = (1..=1000).flat_map(|o| std::iter::repeat_n(o, 5)).collect();
    slots.shuffle(&mut rand::rng());
    let mut version = vec![0i64; 1001];
    let routing = Partitioned::new(4);
    let events: Vec<(String, Event)> = slots
        .into_iter()
        .map(|order| {
            version[order as usize] += 1;
            let v = version[order as usize];
            let payload = serde_json::json!({ "order_id": order, "version": v, "status": "paid", "total_cents": 100 });
            let event = NewEvent::json("order.changed", &payload)
                .expect("json")
                .entity(format!("order-{order}"))
                .into_event(Some(v as u64), SystemTime::now());
            (routing.routing_key(&event), event)
        })
        .collect();

    let mut processes: Vec<Child> = (0..3).map(|_| spawn(&db, &exchange, &base)).collect();
    let (first, second) = events.split_at(events.len() / 2);
    broker.publish_routed(&exchange, first).await.expect("publish");
    wait_for("a quarter applied", Duration::from_secs(60), || async {
        outbox_testkit::at_least(applied(&db).await, 1250)
    })
    .await
    .expect("progress");
    // SIGKILL the first process (the one active on every partition, since it registered first).
    processes[0].kill().expect("kill");
    let _ = processes[0].wait();
    broker.publish_routed(&exchange, second).await.expect("publish");
    let done = wait_for("every change applied", Duration::from_secs(120), || async {
        outbox_testkit::at_least(applied(&db).await, 5000)
    })
    .await;
    for p in processes.iter_mut().skip(1) {
        let _ = Command::new("kill").args(["-TERM", &p.id().to_string()]).status();
        let _ = p.wait();
    }
    done.expect("all applied");

    let wrong: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT version, lag(version) OVER (PARTITION BY order_id ORDER BY n) AS prev FROM shipments) s
         WHERE version <> coalesce(prev, 0) + 1",
    )
    .fetch_one(db.pool())
    .await
    .expect("order check");
    assert_eq!(wrong, 0, "changes applied out of order or twice");
    assert_eq!(applied(&db).await, 5000, "every change applied exactly once");
    let orders: i64 = sqlx::query_scalar("SELECT count(DISTINCT order_id) FROM shipments")
        .fetch_one(db.pool())
        .await
        .expect("orders");
    assert_eq!(orders, 1000);
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}
