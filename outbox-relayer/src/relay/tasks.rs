//! The relay's background tasks: LISTEN for commits, housekeeping (rows held behind formerly
//! quarantined events), the vacuum of the outbox table, the gauges, retention, and the summary
//! line at `info` once a minute (what the relay published, what failed by kind and what it took
//! over since the last line, and the backlog, so an operator following the log sees the relay work
//! without turning on `debug`); and the wait for a task that failed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use outbox_types::{Backoff, Publisher};
use tokio::task::JoinSet;

use super::shared::Shared;
use crate::Result;
use crate::store;

/// Waits for the first worker that ends with an error (a crash point), or forever.
pub(super) async fn join_next_error(tasks: &mut JoinSet<Result<()>>) -> Result<()> {
    while let Some(done) = tasks.join_next().await {
        if let Ok(Err(e)) = done {
            return Err(e);
        }
    }
    std::future::pending().await
}

/// A task's failures in a row: the first is said at WARN, the next ones at DEBUG, and the first
/// success after them at INFO, so that a database down or unmigrated for hours is reported, not
/// repeated at every retry.
#[derive(Debug, Default)]
struct Failing(bool);

impl Failing {
    /// A failure: whether it follows another (said at DEBUG, not WARN).
    fn again(&mut self) -> bool {
        std::mem::replace(&mut self.0, true)
    }

    /// A success: whether it ends a run of failures (said at INFO).
    fn cleared(&mut self) -> bool {
        std::mem::take(&mut self.0)
    }
}

/// Periodic housekeeping: release rows held behind events that are no longer quarantined.
pub(super) async fn maintain<P: Publisher>(shared: Arc<Shared<P>>) {
    // Every 30 polls (30 s by default).
    let mut tick = tokio::time::interval(shared.settings.poll_interval * 30);
    let mut failing = Failing::default();
    loop {
        tick.tick().await;
        match outbox_ops::admin::release_held(&shared.pool).await {
            Ok(n) => {
                if failing.cleared() {
                    tracing::info!("held rows are re-checked again");
                }
                if n > 0 {
                    tracing::info!(released = n, "rows held behind a formerly quarantined event are due again");
                    shared.low_water.ask_below();
                    shared.wake.notify_waiters();
                }
            }
            Err(e) if failing.again() => tracing::debug!(error = %e, "still cannot re-check held rows"),
            Err(e) => tracing::warn!(error = %e, every_ms = tick.period().as_millis() as u64,
                "could not re-check held rows; trying again"),
        }
    }
}

/// Vacuums the outbox table whenever this relay marked `vacuum_after` rows published since the
/// last time (see [`RelayBuilder::vacuum_after`](super::RelayBuilder::vacuum_after)), unless the
/// xmin horizon is where it was at the last vacuum: while another session holds an old snapshot,
/// a vacuum removes nothing and yet reads every page written since the snapshot began, a cost
/// that grows with every minute the snapshot stays.
pub(super) async fn vacuum<P: Publisher>(shared: Arc<Shared<P>>) {
    let Some(every) = shared.settings.vacuum_after else {
        return;
    };
    let mut last_horizon = None;
    loop {
        shared.vacuum_due.notified().await;
        if shared.published_since_vacuum.load(Ordering::Relaxed) < every {
            continue;
        }
        shared.published_since_vacuum.store(0, Ordering::Relaxed);
        let horizon = store::horizon(&shared.pool).await.unwrap_or(None);
        if horizon.is_some() && horizon == last_horizon {
            metrics::counter!(crate::metrics::VACUUMS_SKIPPED, shared.labels.clone()).increment(1);
            tracing::debug!("outbox table not vacuumed: the xmin horizon has not moved since the last vacuum");
            continue;
        }
        if vacuum_once(&shared.pool, &shared.labels).await {
            last_horizon = horizon;
        }
    }
}

/// One vacuum of the outbox table, measured; false if it failed.
async fn vacuum_once(pool: &sqlx::PgPool, labels: &[metrics::Label]) -> bool {
    let started = std::time::Instant::now();
    match store::vacuum(pool).await {
        Ok(()) => {
            let took = started.elapsed();
            metrics::counter!(crate::metrics::VACUUMS, labels.to_vec()).increment(1);
            metrics::histogram!(crate::metrics::VACUUM_SECONDS, labels.to_vec()).record(took.as_secs_f64());
            tracing::debug!(took_ms = took.as_millis(), "outbox table vacuumed");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not vacuum the outbox table; autovacuum must keep it lean");
            false
        }
    }
}

/// LISTEN for commits; wake the claim loop on each notification, and after every reconnect (when
/// notifications may have been lost).
pub(super) async fn listen<P: Publisher>(shared: Arc<Shared<P>>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(&shared.pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for outbox notifications; polling meanwhile");
                tokio::time::sleep(backoff.fail()).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(outbox_producer::NOTIFY_CHANNEL).await {
            tracing::warn!(error = %e, "LISTEN failed; polling meanwhile");
            tokio::time::sleep(backoff.fail()).await;
            continue;
        }
        backoff.reset();
        // Notifications may have been lost before this connection listened.
        shared.low_water.ask_below();
        shared.wake.notify_waiters();
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => {
                    if n.payload() == outbox_ops::admin::NOTIFY_REQUEUED {
                        shared.low_water.ask_below();
                    }
                    shared.wake.notify_waiters();
                }
                Ok(None) => {
                    // The connection was lost and is re-established on the next call; whatever was
                    // notified meanwhile is lost, so look at the table now.
                    tracing::debug!("LISTEN connection lost; reconnecting");
                    shared.low_water.ask_below();
                    shared.wake.notify_waiters();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "LISTEN connection failed; reconnecting");
                    shared.low_water.ask_below();
                    shared.wake.notify_waiters();
                    break;
                }
            }
        }
    }
}

/// Reads the backlog into the gauges every `gauge_interval`, from the queue's low water on (see
/// [`outbox_ops::admin::backlog_from`]).
pub(super) async fn gauges<P: Publisher>(shared: Arc<Shared<P>>) {
    let Some(every) = shared.settings.gauge_interval else {
        return;
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Every kind from the start, so each shows 0 rather than no series until its first event.
    let mut kinds_seen = outbox_types::FailureKind::ALL.iter().map(|k| k.as_str().to_owned()).collect();
    loop {
        tick.tick().await;
        match outbox_ops::admin::backlog_from(&shared.pool, shared.low_water.position()).await {
            Ok(backlog) => crate::gauges::record(&backlog, &mut kinds_seen, &shared.labels),
            Err(e) => tracing::debug!(error = %e, "could not read the backlog for the gauges"),
        }
    }
}

/// Deletes old final rows every `retention_interval`, if the relay runs retention. A failure is
/// tried again at the next interval (said at WARN once, see [`Failing`]).
pub(super) async fn retention<P: Publisher>(shared: Arc<Shared<P>>) {
    let Some(retention) = shared.settings.retention.clone() else {
        return;
    };
    let mut tick = tokio::time::interval(shared.settings.retention_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = Failing::default();
    loop {
        tick.tick().await;
        match retention.run(&shared.pool).await {
            Ok(n) => {
                if failing.cleared() {
                    tracing::info!("outbox retention runs again");
                }
                if n > 0 {
                    tracing::info!(deleted = n, "outbox.retention: old final rows deleted");
                }
            }
            Err(e) if failing.again() => tracing::debug!(error = %e, "outbox retention failed again"),
            Err(e) => tracing::warn!(error = %e, "outbox retention failed; trying again at the next interval"),
        }
    }
}

/// Logs the summary every `summary_interval`, until aborted.
pub(super) async fn summarize<P: Publisher>(shared: Arc<Shared<P>>) {
    let Some(every) = shared.settings.summary_interval else {
        return;
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (published, taken_over, failed) = shared.tally.take();
        match outbox_ops::admin::backlog_from(&shared.pool, shared.low_water.position()).await {
            Ok(b) => tracing::info!(published, failed = %failed, taken_over, waiting = b.waiting, held = b.held,
                oldest_waiting_secs = b.oldest_waiting_age.as_secs(), "outbox.summary"),
            Err(e) => tracing::info!(published, failed = %failed, taken_over, backlog = %e, "outbox.summary"),
        }
    }
}
