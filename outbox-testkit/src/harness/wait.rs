//! Reading the outbox's state, and waiting for the relay and the broker to settle.

use std::time::Duration;

use outbox_types::Status;

use super::Harness;
use crate::Result;

impl Harness {
    /// Outbox rows with `status` (from [`outbox_ops::admin::stats`]).
    ///
    /// # Errors
    /// A database error.
    pub async fn count_status(&self, status: Status) -> Result<i64> {
        let stats = outbox_ops::admin::stats(self.pool()).await?;
        Ok(match status {
            Status::Pending => stats.pending,
            Status::Published => stats.published,
            Status::Quarantined => stats.quarantined,
            _ => stats.skipped,
        })
    }

    /// Waits until no outbox row is pending (each is published, quarantined or skipped).
    ///
    /// # Errors
    /// [`crate::Error::Timeout`] with the number still pending.
    pub async fn wait_until_no_pending(&self, deadline: Duration) -> Result<()> {
        crate::wait_for("no pending outbox row", deadline, || async {
            match self.count_status(Status::Pending).await {
                Ok(0) => Ok(()),
                Ok(n) => Err(format!("{n} pending")),
                Err(e) => Err(format!("no count ({e})")),
            }
        })
        .await
    }

    /// Waits until the recorder has received every event the outbox marks published (the
    /// recorder's queue is read apart from the consumer's, so it may lag behind it).
    ///
    /// # Errors
    /// [`crate::Error::Timeout`] if an event is still missing at the deadline.
    pub async fn wait_delivered(&self, deadline: Duration) -> Result<()> {
        crate::wait_for("every published event at the recorder", deadline, || async {
            let ids: Vec<uuid::Uuid> =
                match sqlx::query_scalar("SELECT id FROM outbox_events WHERE status = 'published'")
                    .fetch_all(self.pool())
                    .await
                {
                    Ok(ids) => ids,
                    Err(e) => return Err(format!("no published ids ({e})")),
                };
            let published = ids.len();
            self.recorder.all_delivered(ids).map_err(|missing| {
                format!("{} of {published} published events missing, e.g. {:?}", missing.len(), missing.first())
            })
        })
        .await
    }
}
