//! A running runner: its counts, graceful shutdown, abort.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use crate::{Error, Outcome, Result};

/// Counts of what a runner did with its deliveries since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunnerStats {
    /// Applied by the handler (not counting parked successors applied with them).
    pub applied: u64,
    /// Dropped as duplicates of an event already seen.
    pub duplicates: u64,
    /// Dropped as stale.
    pub stale: u64,
    /// Parked ahead of a gap.
    pub parked: u64,
    /// Requeued after a transient failure.
    pub retried: u64,
    /// Dead-lettered (bad delivery, permanent failure, attempts exhausted).
    pub dead_lettered: u64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    applied: AtomicU64,
    duplicates: AtomicU64,
    stale: AtomicU64,
    parked: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) dead_lettered: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> RunnerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RunnerStats {
            applied: get(&self.applied),
            duplicates: get(&self.duplicates),
            stale: get(&self.stale),
            parked: get(&self.parked),
            retried: get(&self.retried),
            dead_lettered: get(&self.dead_lettered),
        }
    }

    pub(super) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts what the inbox did with an event.
    pub(super) fn count(&self, outcome: Outcome) {
        Self::bump(match outcome {
            Outcome::Duplicate => &self.duplicates,
            Outcome::Stale => &self.stale,
            Outcome::Parked => &self.parked,
            _ => &self.applied,
        });
    }
}

/// A running [`InboxRunner`](crate::InboxRunner).
#[derive(Debug)]
pub struct RunnerHandle {
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<Result<()>>,
    pub(super) counters: Arc<Counters>,
}

impl RunnerHandle {
    /// What the runner did so far.
    pub fn stats(&self) -> RunnerStats {
        self.counters.snapshot()
    }

    /// Graceful shutdown: stop taking deliveries, finish and ack those in hand, close.
    ///
    /// # Errors
    /// [`Error::Stopped`] if the task had panicked or was aborted; the runner's own error (a
    /// crash point).
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(|_| Error::Stopped)?
    }

    /// Stops at once, as if the process died: nothing in hand is acked.
    pub fn abort(&self) {
        self.task.abort();
    }

    /// Whether the task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits for the task to end on its own (for example at a crash point).
    ///
    /// # Errors
    /// The runner's error, or [`Error::Stopped`] if the task panicked or was aborted.
    pub async fn join(self) -> Result<()> {
        self.task.await.map_err(|_| Error::Stopped)?
    }
}
