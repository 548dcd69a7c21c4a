use std::time::Duration;

use outbox_inbox::{HandlerError, InboxRequest};
use outbox_types::NewEvent;
use outbox_testkit::{Fault, Harness, wait_for};

/// The shipping service's handler: one shipment per order event, in the inbox's transaction.
async fn ship(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let id = *req.event().id.as_uuid();
    sqlx::query("INSERT INTO shipments (event_id) VALUES ($1)").bind(id).execute(req.conn()).await?;
    Ok(req)
}

const SCHEMA: &str =
    "CREATE TABLE orders (id bigint PRIMARY KEY, version bigint); CREATE TABLE shipments (event_id uuid)";

#[tokio::test]
async fn an_order_whose_confirm_is_lost_ships_once() -> Result<(), Box<dyn std::error::Error>> {
    let h = Harness::builder().consumer(tower::service_fn(ship)).start().await?;
    sqlx::raw_sql(SCHEMA).execute(h.pool()).await?;
    h.faults().inject(1, Fault::LoseConfirm); // the broker takes the event, the relay never hears back

    let mut tx = h.pool().begin().await?;
    sqlx::query("INSERT INTO orders VALUES (1, 1)").execute(&mut *tx).await?;
    h.outbox().enqueue(&mut *tx, NewEvent::json("order.placed", &1)?.entity("order-1")).await?;
    tx.commit().await?;

    h.recorder().wait_for_count(2, Duration::from_secs(20)).await?; // sent twice, with the same id
    let stats = || h.consumer_handle().map(|c| c.stats()).unwrap_or_default();
    wait_for("the copy dropped", Duration::from_secs(10), || async { outbox_testkit::equal(stats().duplicates, 1) }).await?;
    h.wait_until_no_pending(Duration::from_secs(10)).await?;
    let report = h
        .reconcile()
        .entity_versions("SELECT 'order-' || id, version FROM orders")
        .effects("SELECT event_id FROM shipments")
        .run()
        .await?;
    assert!(report.is_clean(), "{report}"); // one shipment, nothing lost, nothing applied twice
    h.close().await?;
    Ok(())
}
