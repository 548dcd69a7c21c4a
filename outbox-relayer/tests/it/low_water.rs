//! The queue's low water, where a relay's claims start scanning: it passes the published history
//! (so that a snapshot held by another session does not make every claim walk it), passes a row
//! whose transaction stays open and comes back down for it when that transaction ends, and comes
//! back down for a row an operator makes due again.
//! The relays here never look below their low water on their own (`recheck_passed_rows` of an
//! hour): what brings each row out is the mechanism under test.

use std::time::Duration;

use outbox_producer::Outbox;
use outbox_relayer::Relay;
use outbox_testkit::{Harness, wait_for};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{self, enqueue};

/// A relay of `h` that looks below its low water only when told to.
fn relay(h: &Harness) -> Relay<outbox_relayer::AmqpPublisher> {
    support::relay(h).recheck_passed_rows(Duration::from_secs(3600)).build().expect("relay")
}

async fn position(db: impl sqlx::PgExecutor<'_>, id: Uuid) -> i64 {
    sqlx::query_scalar("SELECT position FROM outbox_events WHERE id = $1").bind(id).fetch_one(db).await.expect("row")
}

async fn last_position(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT max(position) FROM outbox_events").fetch_one(pool).await.expect("last position")
}

/// Waits until `relay`'s low water is past `position`.
async fn wait_low_water_past(relay: &Relay<outbox_relayer::AmqpPublisher>, position: i64) {
    wait_for("the low water past the published rows", Duration::from_secs(30), || async {
        let at = relay.low_water();
        if at > position { Ok(()) } else { Err(format!("low water at {at}, want past {position}")) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A transaction that enqueued an event and stays open while 300 later events are published does
/// not hold the low water for long: the low water moves past its row (a session left idle in a
/// transaction must not make every claim walk what was published since). Once it commits, its
/// event is published at once: the relay saw the transaction end and looked below its low water
/// (this relay does not look there on its own).
#[tokio::test]
async fn a_transaction_left_open_does_not_hold_the_low_water_and_its_event_goes_out_when_it_commits() {
    let h = support::env().await;
    let relay = relay(&h);
    let handle = relay.clone().spawn();
    let outbox = Outbox::new();
    let mut late = h.pool().begin().await.expect("begin");
    let late_id = *outbox.enqueue(&mut *late, support::event(Some("late"))).await.expect("enqueue").as_uuid();
    let late_position = position(&mut *late, late_id).await;
    let later = enqueue(h.pool(), 30, 10, 0).await;
    h.recorder().wait_for_count(later.len(), Duration::from_secs(30)).await.expect("later events published");
    assert!(late_position < position(h.pool(), later[0]).await, "the open transaction drew its position first");
    wait_low_water_past(&relay, last_position(h.pool()).await).await;
    assert!(!h.recorder().ids().contains(&late_id), "an event of an open transaction was published");

    late.commit().await.expect("late commit");
    h.recorder().wait_for_count(later.len() + 1, Duration::from_secs(30)).await.expect("the late event published");
    assert!(h.recorder().ids().contains(&late_id));
    let more = enqueue(h.pool(), 30, 1, 0).await;
    support::wait_all_published(h.pool(), (later.len() + 1 + more.len()) as i64, Duration::from_secs(30)).await;
    wait_low_water_past(&relay, last_position(h.pool()).await).await;
    handle.shutdown().await.expect("shutdown");
    h.close().await.expect("cleanup");
}

/// An event quarantined at the front of the queue, with a successor held behind it, stays behind
/// the low water while 300 later events are published; an operator's retry brings both out, in
/// order, without waiting for a periodic look.
#[tokio::test]
async fn an_event_retried_by_an_operator_below_the_low_water_is_published_with_its_successor() {
    let h = support::env().await;
    let outbox = Outbox::new();
    let mut tx = h.pool().begin().await.expect("begin");
    let first = outbox.enqueue_many(&mut *tx, vec![support::event(Some("first")), support::event(Some("first"))]);
    let first: Vec<Uuid> = first.await.expect("enqueue").iter().map(|id| *id.as_uuid()).collect();
    tx.commit().await.expect("commit");
    sqlx::query(
        "UPDATE outbox_events SET status = 'quarantined', quarantined_at = now(), last_error_kind = 'contract',
                last_error = 'a test quarantine'
         WHERE id = $1",
    )
    .bind(first[0])
    .execute(h.pool())
    .await
    .expect("quarantine the first event");
    let relay = relay(&h);
    let handle = relay.clone().spawn();
    let later = enqueue(h.pool(), 30, 10, 0).await;
    support::wait_all_published(h.pool(), later.len() as i64, Duration::from_secs(30)).await;
    wait_low_water_past(&relay, last_position(h.pool()).await).await;

    assert!(outbox_ops::admin::retry(h.pool(), outbox_types::EventId::from_uuid(first[0])).await.expect("retry"));
    support::wait_all_published(h.pool(), (later.len() + 2) as i64, Duration::from_secs(30)).await;
    let arrivals: Vec<Uuid> =
        h.recorder().records().iter().filter_map(|r| r.event_id).filter(|id| first.contains(id)).collect();
    assert_eq!(arrivals, first, "the retried event, then its successor");
    handle.shutdown().await.expect("shutdown");
    h.close().await.expect("cleanup");
}
