//! Whether commits notify a relay: while it waits, a session of its own holds a lock that the
//! commit trigger tries. Waiting and working write nothing, so a snapshot held by another session
//! cannot make the trigger's probe grow with the relay's pauses.

use std::time::Duration;

use outbox_testkit::{Harness, SnapshotHolder, equal, wait_for};
use sqlx::PgPool;

use crate::support;
use crate::support::relay;

/// How long a relay may take to start waiting, and an event to arrive once committed.
const WAIT: Duration = Duration::from_secs(20);
/// Pauses of the traffic, each a wait for a notification and a wake-up.
const PAUSES: usize = 20;

/// The rows of `outbox_relay_listeners` with the version each one is: name, tuple id, inserting
/// transaction.
async fn listeners(pool: &PgPool) -> Vec<(String, String, String)> {
    let sql = "SELECT relay_id, ctid::text, xmin::text FROM outbox_relay_listeners ORDER BY relay_id";
    sqlx::query_as(sql).fetch_all(pool).await.expect("listeners")
}

/// Relays waiting for a notification now.
async fn waiting(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT outbox_relays_waiting()").fetch_one(pool).await.expect("relays waiting")
}

async fn wait_until_waiting(h: &Harness, n: i64) {
    wait_for(&format!("{n} relay(s) waiting for a notification"), WAIT, || async { equal(waiting(h.pool()).await, n) })
        .await
        .expect("relays waiting");
}

/// Commits one event of entity `k`; returns how long it took to reach the queue.
async fn commit_and_time(h: &Harness, k: &str, expected: usize) -> Duration {
    let started = std::time::Instant::now();
    let mut tx = h.pool().begin().await.expect("begin");
    outbox_producer::Outbox::new().enqueue(&mut *tx, support::event(Some(k))).await.expect("enqueue");
    tx.commit().await.expect("commit");
    h.recorder().wait_for_count(expected, WAIT).await.expect("delivered");
    started.elapsed()
}

/// A relay that polls only every minute pauses twenty times while a snapshot is held: each event
/// after a pause is delivered at once (the commit notified the waiting relay), and the relay's row
/// is the same row version throughout: nothing was written per pause. It is gone after a graceful
/// stop.
#[tokio::test]
async fn a_relay_woken_after_each_of_twenty_pauses_writes_its_row_once() {
    let h = support::env().await;
    let holder = SnapshotHolder::hold(h.db()).await.expect("snapshot held");
    let handle = relay(&h)
        .poll_interval(Duration::from_secs(60))
        .linger(Duration::from_millis(20))
        .build()
        .expect("relay")
        .spawn();
    wait_until_waiting(&h, 1).await;
    let first = listeners(h.pool()).await;
    assert_eq!(first.len(), 1, "one row for the relay: {first:?}");
    for pause in 1..=PAUSES {
        wait_until_waiting(&h, 1).await;
        let took = commit_and_time(&h, "k", pause).await;
        assert!(
            took < Duration::from_secs(5),
            "event {pause} waited {took:?}: the poll (60 s), not a notification, woke the relay"
        );
    }
    wait_until_waiting(&h, 1).await;
    assert_eq!(listeners(h.pool()).await, first, "the relay's row was written again");
    handle.shutdown().await.expect("shutdown");
    assert!(listeners(h.pool()).await.is_empty(), "the stopped relay's row is deleted");
    assert_eq!(waiting(h.pool()).await, 0);
    holder.release().await.expect("release the snapshot");
    h.recorder().in_entity_order().expect("order");
    h.close().await.expect("cleanup");
}

/// A relay killed while it waits (its task aborted, as if the process died) stops commits from
/// notifying at once: its session is gone and its lock with it. The next relay to wait deletes the
/// dead relay's row and is woken by the next commit.
#[tokio::test]
async fn a_killed_relay_stops_commits_from_notifying_and_the_next_relay_deletes_its_row() {
    let h = support::env().await;
    let fast =
        |b: outbox_relayer::RelayBuilder<_>| b.poll_interval(Duration::from_secs(60)).linger(Duration::from_millis(20));
    let killed = fast(relay(&h)).build().expect("relay").spawn();
    wait_until_waiting(&h, 1).await;
    let dead = listeners(h.pool()).await;
    killed.abort();
    wait_until_waiting(&h, 0).await;

    let mut listener = sqlx::postgres::PgListener::connect_with(h.pool()).await.expect("listener");
    listener.listen(outbox_producer::NOTIFY_CHANNEL).await.expect("listen");
    let mut tx = h.pool().begin().await.expect("begin");
    outbox_producer::Outbox::new().enqueue(&mut *tx, support::event(Some("k"))).await.expect("enqueue");
    tx.commit().await.expect("commit");
    assert!(
        tokio::time::timeout(Duration::from_millis(500), listener.recv()).await.is_err(),
        "a commit notified although the only relay was dead"
    );

    let next = fast(relay(&h)).build().expect("relay").spawn();
    h.recorder().wait_for_count(1, WAIT).await.expect("the event the next relay found");
    wait_until_waiting(&h, 1).await;
    let rows = listeners(h.pool()).await;
    assert_eq!(rows.len(), 1, "only the live relay's row: {rows:?}");
    assert_ne!(rows, dead, "the dead relay's row is deleted");
    let took = commit_and_time(&h, "k", 2).await;
    assert!(took < Duration::from_secs(5), "the next relay was not notified: {took:?}");
    next.shutdown().await.expect("shutdown");
    drop(listener);
    h.close().await.expect("cleanup");
}
