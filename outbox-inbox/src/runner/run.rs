//! [`InboxRunner`]: runs sessions one after another, reconnecting after every loss, with the
//! gauges and the retention beside them, until shut down.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tower::Service;

use super::handle::{RunnerHandle, RunnerProbe, StoppedOnDrop};
use super::shared::Shared;
use super::{gauges, retention};
use crate::{InboxRequest, Result};

/// Consumes one or more queues and feeds every delivery to an [`InboxService`](crate::InboxService).
///
/// A delivery is acked only after the inbox committed (applied, duplicate, stale or parked). A
/// delivery that does not decode, or whose handler fails permanently or too often, is published to
/// the dead-letter exchange with
/// [`HEADER_DEAD_LETTER_REASON`](crate::HEADER_DEAD_LETTER_REASON) and then acked. A transient
/// failure is requeued after a backoff. A lost connection is re-established with backoff;
/// deliveries in hand then come back from the broker and the inbox drops what was already applied.
///
/// ```no_run
/// use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner};
/// use tower::Layer;
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
/// let handler = tower::service_fn(|req: InboxRequest| async move { Ok::<_, HandlerError>(req) });
/// let service = InboxLayer::new(pool, "shipping").layer(handler);
/// let runner = InboxRunner::builder("amqp://guest:guest@127.0.0.1:5672/%2f", service)
///     .queue("shipping.orders")
///     .prefetch(512)
///     .concurrency(8)
///     .batch_size(32)
///     .build()?;
/// let handle = runner.spawn();
/// // ...
/// handle.shutdown().await
/// # }
/// ```
pub struct InboxRunner<S> {
    pub(super) shared: Arc<Shared<S>>,
}

impl<S> std::fmt::Debug for InboxRunner<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxRunner").field("settings", &self.shared.settings).finish_non_exhaustive()
    }
}

impl<S> InboxRunner<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// Runs as a task of the current runtime.
    pub fn spawn(self) -> RunnerHandle {
        let (stop, mut rx) = watch::channel(false);
        let counters = self.shared.counters.clone();
        let probe = RunnerProbe { consuming: self.shared.consuming.clone(), stopped: self.shared.stopped.clone() };
        // Running from here: a probe read before the task first runs is not "stopped".
        self.shared.stopped.store(false, std::sync::atomic::Ordering::Relaxed);
        let task = tokio::spawn(async move {
            self.run(async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
        });
        RunnerHandle { stop, task, counters, probe }
    }

    /// Runs until `shutdown` completes, reconnecting after every loss, then shuts down gracefully.
    ///
    /// # Errors
    /// [`Error::Crashed`](crate::Error::Crashed) only, at an armed crash point; broker failures
    /// are retried with backoff.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        tokio::pin!(shutdown);
        // Stopped when this future ends or is dropped (aborted, panicked), however it ends.
        let _stopped = StoppedOnDrop::running(self.shared.stopped.clone());
        crate::metrics::initialise(self.shared.service.consumer());
        let gauges = tokio::spawn(gauges::gauges(self.shared.clone()));
        let _stop_gauges = AbortOnDrop(gauges);
        let retention = tokio::spawn(retention::retention(self.shared.clone()));
        let _stop_retention = AbortOnDrop(retention);
        let mut backoff = outbox_types::Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        loop {
            let wait = match self.shared.session(&mut shutdown).await {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    backoff.reset();
                    backoff.fail()
                }
                Err(e) => {
                    if self.shared.crashed.load(std::sync::atomic::Ordering::SeqCst) {
                        return Err(e);
                    }
                    let wait = backoff.fail();
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "inbox runner lost the broker; reconnecting");
                    wait
                }
            };
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// Aborts a background task when the runner's `run` ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
