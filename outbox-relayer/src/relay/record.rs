//! Recording a batch's outcomes, fenced by its claim token, each statement tried again through a
//! database blip while the claim's lease lasts.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use outbox_types::{Backoff, FailureKind};
use tokio::sync::watch;
use uuid::Uuid;

use super::outcome::{BatchReport, Outcomes};
use super::shared::Shared;
use crate::store;
use crate::{Error, Result};

/// Records a batch's outcomes, fenced by its claim token, into `report`. A statement the database
/// does not answer (a restart, a dropped connection) is tried again until it does, while the
/// claim's lease lasts: the confirms are kept, so confirmed rows are not published again and the
/// entities' successors move on as soon as the database is back, instead of after the lease.
pub(super) async fn record<P>(
    shared: &Shared<P>,
    sorted: &Outcomes<'_>,
    token: Uuid,
    report: &mut BatchReport,
    mut r: Recording,
) -> Result<()> {
    let pool = &shared.pool;
    let published: Vec<&str> = sorted.published.iter().map(|c| c.tid.as_str()).collect();
    let started = Instant::now();
    let owned = r.retry("mark published", || store::mark_published(pool, &published, token)).await?;
    report.published = published.len();
    report.lost_claims += r.lost(published.len(), owned);
    shared.tally.published(owned);
    if owned > 0 {
        // Rows left the queue: the low water may move past them, and no claim may follow soon to
        // say so (a look while they were in flight found them pending and kept the low water).
        shared.low_water.rows_moved();
    }
    if let Some(every) = shared.settings.vacuum_after
        && shared.published_since_vacuum.fetch_add(owned, Ordering::Relaxed) + owned >= every
    {
        shared.vacuum_due.notify_one();
    }
    report.quarantined = sorted.failures.iter().filter(|f| f.quarantine).count();
    report.retried = sorted.failures.len() - report.quarantined;
    let owned = r.retry("record failures", || store::mark_failed(pool, &sorted.failures, token)).await?;
    report.lost_claims += r.lost(sorted.failures.len(), owned);
    let released = r.retry("release", || store::release(pool, &sorted.released, token, false)).await?;
    report.released = usize::try_from(released).unwrap_or(0);
    let unsent = r.retry("give back unsent", || store::release(pool, &sorted.unsent, token, true)).await?;
    report.unavailable = sorted.unavailable;
    report.held_back = usize::try_from(unsent).unwrap_or(0).saturating_sub(sorted.unavailable);
    metrics::histogram!(crate::metrics::RECORD_SECONDS, shared.labels.clone()).record(started.elapsed().as_secs_f64());
    Ok(())
}

/// How long a batch's recording may keep trying, and what cuts it short.
pub(super) struct Recording {
    lease_ends: tokio::time::Instant,
    hard: watch::Receiver<bool>,
    /// The last statement had to be sent again: an attempt whose answer was lost may have been
    /// applied.
    retried: bool,
}

impl Recording {
    /// A recording that may keep trying until `lease_ends`, unless `hard` (a hard stop) cuts it
    /// short.
    pub(super) fn new(lease_ends: tokio::time::Instant, hard: watch::Receiver<bool>) -> Self {
        Self { lease_ends, hard, retried: false }
    }

    /// Of `sent` rows, how many the claim no longer owned when `owned` were recorded. After a
    /// statement was sent again the rows not found may have been recorded by the attempt whose
    /// answer was lost, so they do not count as taken over.
    fn lost(&self, sent: usize, owned: u64) -> usize {
        if self.retried { 0 } else { sent.saturating_sub(usize::try_from(owned).unwrap_or(0)) }
    }

    /// Runs `statement` until the database answers, backing off from 50 ms to 1 s, while the lease
    /// lasts and no hard stop came; a statement fenced by the claim token may run again safely.
    async fn retry<T, F, Fut>(&mut self, what: &'static str, mut statement: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        let mut failed = false;
        self.retried = false;
        loop {
            let outcome = tokio::select! {
                outcome = statement() => outcome,
                // A hard stop does not wait for a database that does not answer.
                _ = self.hard.wait_for(|h| *h), if failed => return Err(Error::Stopped),
            };
            let e = match outcome {
                Ok(v) => {
                    if failed {
                        tracing::info!(step = what, "the database answers again; the batch's outcome is recorded");
                    }
                    return Ok(v);
                }
                Err(e) => e,
            };
            let wait = backoff.fail();
            if tokio::time::Instant::now() + wait >= self.lease_ends || e.kind() == FailureKind::Contract {
                return Err(e);
            }
            self.retried = true;
            if !failed {
                tracing::warn!(step = what, error = %e, kind = %e.kind(), "cannot record a batch's outcome yet; retrying while its lease lasts");
                failed = true;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = self.hard.wait_for(|h| *h) => return Err(e),
            }
        }
    }
}
