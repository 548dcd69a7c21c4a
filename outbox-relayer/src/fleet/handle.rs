//! [`FleetHandle`]: the handle of a fleet spawned as a task.

use std::sync::Arc;

use tokio::sync::watch;

use super::database::FleetDatabase;
use super::settings::check_list;
use crate::{Error, Result};

/// A running fleet.
#[derive(Debug)]
pub struct FleetHandle {
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<Result<()>>,
    pub(super) databases: Arc<watch::Sender<Vec<FleetDatabase>>>,
    pub(super) fleet_database: Option<String>,
}

impl FleetHandle {
    /// Replaces the list of databases (a file reread on SIGHUP, a catalog read again): the fleet
    /// takes those added at its next look, and gives back those removed (their relays shut down
    /// gracefully) or whose URL changed (restarted with the new one).
    ///
    /// # Errors
    /// [`Error::InvalidList`] if a name is listed twice or the fleet's database is not in the
    /// list; the list in use stays.
    pub fn set_databases(&self, databases: Vec<FleetDatabase>) -> Result<()> {
        check_list(&databases, self.fleet_database.as_deref())?;
        self.databases.send_replace(databases);
        Ok(())
    }

    /// The names of the databases in the list now.
    pub fn databases(&self) -> Vec<String> {
        self.databases.borrow().iter().map(|d| d.name.clone()).collect()
    }

    /// Graceful shutdown of every relay of the process, at once, each as
    /// [`RelayHandle::shutdown`](crate::RelayHandle::shutdown); waits for the fleet's task.
    ///
    /// # Errors
    /// [`Error::Stopped`] if the task panicked or was aborted.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(|_| Error::Stopped)?
    }

    /// Whether the fleet's task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}
