//! [`RelayHandle`]: the handle of a relay spawned as a task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::health::HealthState;
use crate::{Error, Health, Result};

/// A running relay task.
#[derive(Debug)]
pub struct RelayHandle {
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<Result<()>>,
    pub(super) probe: RelayProbe,
}

/// A spawned relay's health, to read from anywhere (a clone per HTTP handler): what the service's
/// own `/healthz` and `/readyz` answer from. A relay whose task ended is neither live nor ready.
#[derive(Debug, Clone)]
pub struct RelayProbe {
    pub(super) health: Arc<HealthState>,
    pub(super) liveness_window: Duration,
}

impl RelayProbe {
    /// The relay's health now.
    pub fn health(&self) -> Health {
        self.health.snapshot()
    }

    /// Alive: the task runs and its claim loop went round within the liveness window (see
    /// [`Relay::liveness_window`](crate::Relay::liveness_window)).
    pub fn is_live(&self) -> bool {
        self.health().is_live(self.liveness_window)
    }

    /// Ready: the task runs, its claim loop too, and the database and the broker answer it.
    pub fn is_ready(&self) -> bool {
        self.health().is_ready()
    }
}

/// Marks the relay running while it lives, and stopped when the future that holds it ends or is
/// dropped (aborted, panicked).
pub(super) struct StoppedOnDrop(Arc<HealthState>);

impl StoppedOnDrop {
    pub(super) fn running(health: Arc<HealthState>) -> Self {
        health.running();
        Self(health)
    }
}

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        self.0.stopped();
    }
}

impl RelayHandle {
    /// The relay's health now (see [`RelayProbe`]).
    pub fn health(&self) -> Health {
        self.probe.health()
    }

    /// A probe of this relay's health that outlives borrows of the handle: give a clone to each
    /// HTTP handler, keep the handle for [`RelayHandle::shutdown`].
    pub fn probe(&self) -> RelayProbe {
        self.probe.clone()
    }

    /// Graceful shutdown: stop claiming, await in-flight confirms up to the shutdown deadline,
    /// record what was confirmed, release the rest, and wait for the task to end.
    ///
    /// # Errors
    /// The relay's error if it had failed, or [`Error::Stopped`] if the task panicked or was aborted.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(|_| Error::Stopped)?
    }

    /// Stops the task at once, as if the process died: nothing more is written, claims stay until
    /// their lease expires.
    pub fn abort(&self) {
        self.task.abort();
    }

    /// Whether the task has ended (for example at an armed crash point).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits for the task to end on its own.
    ///
    /// # Errors
    /// The relay's error, or [`Error::Stopped`] if the task panicked or was aborted.
    pub async fn join(self) -> Result<()> {
        self.task.await.map_err(|_| Error::Stopped)?
    }
}
