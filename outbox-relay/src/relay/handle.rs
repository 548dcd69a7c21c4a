//! [`RelayHandle`]: the handle of a relay spawned as a task.

use tokio::sync::watch;

use crate::{Error, Result};

/// A running relay task.
#[derive(Debug)]
pub struct RelayHandle {
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<Result<()>>,
}

impl RelayHandle {
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
