//! The relay's horizon gauges on the real PostgreSQL: while another session of the database holds
//! a snapshot, `outbox_oldest_snapshot_seconds` and `outbox_horizon_xid_age` rise above zero; once
//! it commits, the snapshot gauge is back to zero; and the relay leaves out the vacuums such a
//! snapshot makes useless. Read through a local recorder, like the takeover counter.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, Snapshotter};
use outbox_testkit::{SnapshotHolder, wait_for};

use crate::support::{self, enqueue, wait_all_published};

const WAIT: Duration = Duration::from_secs(30);

/// The unlabelled gauge `name`, if it was recorded.
fn gauge(snapshotter: &Snapshotter, name: &str) -> Option<f64> {
    snapshotter.snapshot().into_vec().into_iter().find_map(|(key, _, _, value)| match value {
        DebugValue::Gauge(v) if key.key().name() == name => Some(v.0),
        _ => None,
    })
}

/// The relay's unlabelled counters, summed over snapshots (a snapshot takes a counter's value and
/// sets it back to zero).
#[derive(Default)]
struct Counters(std::collections::HashMap<String, u64>);

impl Counters {
    /// The counter `name` so far: 0 until it was recorded.
    fn get(&mut self, snapshotter: &Snapshotter, name: &str) -> u64 {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            if let DebugValue::Counter(v) = value {
                *self.0.entry(key.key().name().to_owned()).or_default() += v;
            }
        }
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Waits until the counter `name` reaches `at_least`.
    async fn wait(&mut self, snapshotter: &Snapshotter, name: &str, at_least: u64) {
        let what = format!("{name} at {at_least}");
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.get(snapshotter, name) < at_least {
            assert!(tokio::time::Instant::now() < deadline, "{what}: {:?}", self.0);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// Waits until the gauge `name` satisfies `holds`; returns its value.
async fn wait_gauge(snapshotter: &Snapshotter, name: &str, what: &str, holds: impl Fn(f64) -> bool) -> f64 {
    wait_for(what, WAIT, || async {
        match gauge(snapshotter, name) {
            Some(v) if holds(v) => Ok(v),
            seen => Err(format!("{name} = {seen:?}")),
        }
    })
    .await
    .expect(what)
}

async fn scenario(snapshotter: &Snapshotter) {
    let h = support::env().await;
    let relay = support::relay(&h).gauge_interval(Some(Duration::from_millis(200))).build().expect("relay").spawn();
    let holder = SnapshotHolder::hold(h.db()).await.expect("hold a snapshot");
    for _ in 0..3 {
        sqlx::query("SELECT pg_current_xact_id()").execute(h.pool()).await.expect("a transaction id");
    }

    // A second at least: longer than any claim of the relay's own, so it is the held snapshot.
    let seconds =
        wait_gauge(snapshotter, "outbox_oldest_snapshot_seconds", "the snapshot gauge at a second", |v| v >= 1.0).await;
    let xids =
        wait_gauge(snapshotter, "outbox_horizon_xid_age", "the horizon three transactions old", |v| v >= 3.0).await;
    let held_for = holder.held_for().as_secs_f64();
    let later =
        wait_gauge(snapshotter, "outbox_oldest_snapshot_seconds", "the snapshot gauge to follow", |v| v >= held_for)
            .await;
    assert!(later >= seconds, "the age grows while held: {seconds} then {later}; {xids} transactions");

    holder.release().await.expect("commit");
    wait_gauge(snapshotter, "outbox_oldest_snapshot_seconds", "the snapshot gauge back to zero", |v| v == 0.0).await;
    relay.shutdown().await.expect("graceful shutdown");
    h.close().await.expect("cleanup");
}

#[test]
fn the_relay_gauges_a_held_snapshot_and_drops_to_zero_once_it_commits() {
    support::with_recorder(|snapshotter| async move { scenario(&snapshotter).await });
}

/// While another session holds an old snapshot a vacuum removes nothing, yet reads every page
/// written since the snapshot began. 1,200 events published at `vacuum_after = 300` under a held
/// snapshot make one vacuum and then skipped ones; once the snapshot ends, 600 more make a second
/// vacuum. Every event arrives once, in order.
async fn vacuums_scenario(snapshotter: &Snapshotter) {
    const VACUUMS: &str = "outbox_relay_vacuums_total";
    let h = support::env().await;
    sqlx::query("ALTER TABLE outbox_events SET (autovacuum_enabled = off)").execute(h.pool()).await.expect("off");
    let holder = SnapshotHolder::hold(h.db()).await.expect("hold a snapshot");
    let relay = support::relay(&h).batch_size(100).vacuum_after(Some(300)).build().expect("relay").spawn();

    let mut ids = enqueue(h.pool(), 20, 60, 0).await;
    wait_all_published(h.pool(), ids.len() as i64, WAIT).await;
    let mut counters = Counters::default();
    counters.wait(snapshotter, "outbox_relay_vacuums_skipped_total", 1).await;
    assert_eq!(counters.get(snapshotter, VACUUMS), 1, "vacuums under the held snapshot");

    holder.release().await.expect("commit");
    ids.extend(enqueue(h.pool(), 20, 30, 0).await);
    wait_all_published(h.pool(), ids.len() as i64, WAIT).await;
    counters.wait(snapshotter, VACUUMS, 2).await;

    relay.shutdown().await.expect("graceful shutdown");
    // Confirmed by the broker is not yet delivered to the recorder's consumer: wait for it.
    h.recorder().wait_all_delivered(ids.iter().copied(), WAIT).await.expect("nothing lost");
    assert!(h.recorder().duplicates().is_empty(), "{:?}", h.recorder().duplicates());
    h.recorder().in_entity_order().expect("per-entity order");
    h.close().await.expect("cleanup");
}

#[test]
fn the_relay_leaves_out_vacuums_while_the_horizon_stands_still() {
    support::with_recorder(|snapshotter| async move { vacuums_scenario(&snapshotter).await });
}
