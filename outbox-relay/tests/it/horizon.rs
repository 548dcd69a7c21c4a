//! The relay's horizon gauges on the real PostgreSQL: while another session of the database holds
//! a snapshot, `outbox_oldest_snapshot_seconds` and `outbox_horizon_xid_age` rise above zero; once
//! it commits, the snapshot gauge is back to zero. Read through a local recorder, like the
//! takeover counter.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use outbox_testkit::{SnapshotHolder, wait_for};

use crate::support;

const WAIT: Duration = Duration::from_secs(30);

/// The unlabelled gauge `name`, if it was recorded.
fn gauge(snapshotter: &Snapshotter, name: &str) -> Option<f64> {
    snapshotter.snapshot().into_vec().into_iter().find_map(|(key, _, _, value)| match value {
        DebugValue::Gauge(v) if key.key().name() == name => Some(v.0),
        _ => None,
    })
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
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    metrics::with_local_recorder(&recorder, || runtime.block_on(scenario(&snapshotter)));
}
