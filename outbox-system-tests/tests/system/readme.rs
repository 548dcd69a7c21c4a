//! The README's walk-through, run as written: its producer, relay, consumer and `ship_orders`
//! blocks, pasted one after the other into this module by this crate's build script (from
//! README.md, never a copy), so they must compile together as a new user's `src/main.rs` does;
//! then `ship_orders` runs on a fresh database and a topology named for this test. What a new user
//! pastes must ship every order.

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use outbox_testkit::{TestBroker, TestDb};

include!(concat!(env!("OUT_DIR"), "/readme.rs"));

#[tokio::test]
async fn the_readme_pieces_pasted_together_ship_every_order_once() {
    let db = TestDb::empty().await.expect("database");
    let broker = TestBroker::new().await.expect("broker");
    let topology = broker.topology("orders", "shipping.orders");
    // The README's `main` connects to its own database and names: not run here, only compiled.
    let _ = main;

    ship_orders(db.pool(), &topology, 20).await.expect("the README's flow ships every order");

    let pool = db.pool();
    let count = |sql: &'static str| async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await.expect(sql) };
    assert_eq!(count("SELECT count(*) FROM orders").await, 20, "orders placed");
    assert_eq!(
        count("SELECT count(*) FROM orders o JOIN shipments s ON s.order_id = o.id").await,
        20,
        "every order shipped once (shipments' primary key is the order)"
    );
    assert_eq!(count("SELECT count(*) FROM outbox_events WHERE status = 'published'").await, 20, "events published");
    assert_eq!(count("SELECT count(*) FROM outbox_events WHERE status <> 'published'").await, 0, "none quarantined");
    assert_eq!(
        count("SELECT count(*) FROM inbox_events WHERE consumer = 'shipping' AND status = 'processed'").await,
        20,
        "every event applied by the inbox"
    );
    for queue in [&topology.queues[0], &topology.dead_letter_queue] {
        let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        let state = broker.channel().queue_declare(queue.as_str().into(), passive, FieldTable::default()).await;
        assert_eq!(state.expect("the topology's queue exists").message_count(), 0, "{queue} is empty");
    }
    broker.close().await.expect("broker cleanup");
    db.close().await.expect("database cleanup");
}
