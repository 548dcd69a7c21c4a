//! The chaos proxy really does what it says: cuts live connections, refuses and stalls new
//! traffic, and heals; and a relay behind it survives a cut.

use std::net::SocketAddr;
use std::time::Duration;

use outbox_testkit::{ChaosProxy, Harness, TestDb};
use outbox_types::NewEvent;
use sqlx::{Connection, PgConnection};

fn pg_addr() -> SocketAddr {
    "127.0.0.1:5432".parse().expect("addr")
}

#[tokio::test]
async fn cut_refuse_stall_and_heal_on_a_postgres_connection() {
    let db = TestDb::empty().await.expect("db");
    let proxy = ChaosProxy::start(pg_addr()).await.expect("proxy");
    let through = db.connect_options().clone().host("127.0.0.1").port(proxy.addr().port());

    let mut conn = PgConnection::connect_with(&through).await.expect("connect through the proxy");
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut conn).await.expect("query");
    assert_eq!(one, 1);

    proxy.cut();
    assert!(sqlx::query("SELECT 1").execute(&mut conn).await.is_err(), "a cut connection fails");

    proxy.refuse();
    assert!(PgConnection::connect_with(&through).await.is_err(), "new connections are refused");

    proxy.heal();
    let mut conn = PgConnection::connect_with(&through).await.expect("healed");
    proxy.stall();
    let stalled = tokio::time::timeout(Duration::from_millis(300), sqlx::query("SELECT 1").execute(&mut conn)).await;
    assert!(stalled.is_err(), "no bytes pass while stalled");
    drop(conn);
    proxy.heal();
    proxy.latency(Duration::from_millis(50));
    let mut conn = PgConnection::connect_with(&through).await.expect("connect with latency");
    let started = std::time::Instant::now();
    sqlx::query("SELECT 1").execute(&mut conn).await.expect("query");
    assert!(started.elapsed() >= Duration::from_millis(100), "a round trip pays the latency both ways");
    drop(conn);
    drop(proxy);
    db.close().await.expect("cleanup");
}

/// A relay talking to RabbitMQ through the proxy: the proxy cuts its connection mid-stream; the
/// relay reconnects through it and every event arrives, in order.
#[tokio::test]
async fn a_relay_survives_a_cut_broker_connection() {
    let h = Harness::builder()
        .relay_through_proxy()
        .relay(|r| {
            r.retry_policy(
                outbox_types::RetryPolicy::default()
                    .initial_delay(Duration::from_millis(100))
                    .max_delay(Duration::from_millis(500)),
            )
            .confirm_timeout(Duration::from_secs(1))
        })
        .start()
        .await
        .expect("harness");
    let proxy = h.relay_proxy().expect("the relay's proxy");
    let mut ids = Vec::new();
    for round in 0..2 {
        for i in 0..50 {
            let mut tx = h.pool().begin().await.expect("begin");
            let event =
                NewEvent::json("t.e", &serde_json::json!({ "i": i })).expect("json").entity(format!("e-{}", i % 10));
            ids.push(*h.outbox().enqueue(&mut *tx, event).await.expect("enqueue").as_uuid());
            tx.commit().await.expect("commit");
        }
        if round == 0 {
            h.recorder().wait_for_count(50, Duration::from_secs(20)).await.expect("first half through the proxy");
            proxy.cut();
        }
    }
    outbox_testkit::wait_for("every event", Duration::from_secs(30), || async {
        h.recorder().all_delivered(ids.iter().copied()).ok()
    })
    .await
    .expect("delivered after the cut");
    h.recorder().in_entity_order().expect("order");
    assert!(proxy.connections() >= 2, "the relay reconnected through the proxy after the cut");
    h.close().await.expect("cleanup");
}
