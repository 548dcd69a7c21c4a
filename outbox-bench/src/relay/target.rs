//! Where every phase publishes and consumes, and the purge of its queue between phases.

use lapin::Channel;
use lapin::options::QueuePurgeOptions;

use crate::error::BoxError;
use crate::wait::{FLOOR, within};

/// Where every phase publishes and consumes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) url: &'a str,
    pub(crate) exchange: &'a str,
    pub(crate) queue: &'a str,
    /// The test broker's channel, for purging.
    pub(crate) admin: &'a Channel,
}

impl Target<'_> {
    pub(crate) async fn purge(&self) -> Result<(), BoxError> {
        let purge = self.admin.queue_purge(self.queue.into(), QueuePurgeOptions::default());
        within(format_args!("the purge of queue {}", self.queue), FLOOR, purge).await?;
        Ok(())
    }
}
