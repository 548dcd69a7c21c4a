//! A running runner: its counts, graceful shutdown, abort.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// A runner's health, as [`RunnerHandle::health`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunnerHealth {
    /// Connected to the broker and consuming its queues (false while it reconnects).
    pub consuming: bool,
    /// The runner's task has ended (shut down, crashed or aborted).
    pub stopped: bool,
}

impl RunnerHealth {
    /// Alive: the task runs (reconnecting after a broker outage is alive).
    pub fn is_live(&self) -> bool {
        !self.stopped
    }

    /// Ready: the task runs and consumes.
    pub fn is_ready(&self) -> bool {
        !self.stopped && self.consuming
    }
}

/// A running [`InboxRunner`](crate::InboxRunner).
#[derive(Debug)]
pub struct RunnerHandle {
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<Result<()>>,
    pub(super) counters: Arc<Counters>,
    pub(super) probe: RunnerProbe,
}

/// A spawned runner's health, to read from anywhere (a clone per HTTP handler): what the
/// service's own `/healthz` (`is_live`) and `/readyz` (`is_ready`) answer from.
#[derive(Debug, Clone)]
pub struct RunnerProbe {
    pub(super) consuming: Arc<AtomicBool>,
    pub(super) stopped: Arc<AtomicBool>,
}

impl RunnerProbe {
    /// The runner's health now.
    pub fn health(&self) -> RunnerHealth {
        RunnerHealth {
            consuming: self.consuming.load(Ordering::Relaxed),
            stopped: self.stopped.load(Ordering::Relaxed),
        }
    }
}

/// Marks the runner running while it lives, and stopped when the future that holds it ends or is
/// dropped (aborted, panicked).
pub(super) struct StoppedOnDrop(Arc<AtomicBool>);

impl StoppedOnDrop {
    pub(super) fn running(stopped: Arc<AtomicBool>) -> Self {
        stopped.store(false, Ordering::Relaxed);
        Self(stopped)
    }
}

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl RunnerHandle {
    /// The runner's health now (see [`RunnerProbe`]).
    pub fn health(&self) -> RunnerHealth {
        self.probe.health()
    }

    /// A probe of this runner's health that outlives borrows of the handle: give a clone to each
    /// HTTP handler, keep the handle for [`RunnerHandle::shutdown`].
    pub fn probe(&self) -> RunnerProbe {
        self.probe.clone()
    }

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
