//! One connection's life: subscribe, hand batches of deliveries to tasks within the concurrency
//! limit, sweep parked events now and then, and on shutdown finish what is in hand.

use std::future::Future;
use std::sync::Arc;

use outbox_amqp::{Delivery, Subscription};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::Service;

use super::Shared;
use crate::{Error, InboxRequest, Result};

type Tasks = JoinSet<Result<()>>;

impl<S> Shared<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// One connection's life. `Ok(true)`: shut down gracefully; `Ok(false)`/`Err`: reconnect.
    pub(super) async fn session(self: &Arc<Self>, shutdown: &mut (impl Future<Output = ()> + Unpin)) -> Result<bool> {
        let mut subscription = Subscription::open(
            &self.settings.url,
            &self.settings.connection_name,
            self.settings.prefetch,
            &self.settings.queues,
            &self.settings.dead_letter_exchange,
        )
        .await?;
        tracing::info!(queues = ?self.settings.queues, "inbox runner consuming");
        let mut tasks = Tasks::new();
        // On an error (a crash point) the subscription is dropped with nothing else acked.
        let graceful = self.consume(&mut subscription, &mut tasks, shutdown).await?;
        if graceful {
            self.finish_and_close(subscription, tasks).await;
        }
        Ok(graceful)
    }

    /// Takes deliveries until shutdown (`Ok(true)`) or until the subscription ends (`Ok(false)`).
    async fn consume(
        self: &Arc<Self>,
        subscription: &mut Subscription,
        tasks: &mut Tasks,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<bool> {
        let permits = Arc::new(Semaphore::new(self.settings.concurrency));
        let mut sweep = tokio::time::interval(self.settings.sweep_interval);
        sweep.tick().await;
        loop {
            tokio::select! {
                () = &mut *shutdown => return Ok(true),
                _ = sweep.tick() => self.sweep().await,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Ok(Err(e)) = done {
                        // A crash point: stop as if dead, without acking anything else.
                        tasks.abort_all();
                        return Err(e);
                    }
                }
                next = subscription.next() => {
                    let first = match next {
                        Some(Ok(delivery)) => delivery,
                        Some(Err(e)) => return Ok(ended(Some(&e))),
                        None => return Ok(ended(None)),
                    };
                    let permit = permits.clone().acquire_owned().await.map_err(|_| Error::Stopped)?;
                    // With the permit in hand, take what else the broker has sent meanwhile.
                    let mut batch = vec![first];
                    let more = subscription.take_ready(&mut batch, self.settings.batch_size);
                    self.spawn_batch(tasks, batch, subscription, permit);
                    if let Err(e) = more {
                        return Ok(ended(e.as_ref()));
                    }
                }
            }
        }
    }

    fn spawn_batch(
        self: &Arc<Self>,
        tasks: &mut Tasks,
        batch: Vec<Delivery>,
        subscription: &Subscription,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let this = self.clone();
        let dead_letters = subscription.dead_letters();
        tasks.spawn(async move {
            let r = this.handle_batch(batch, &dead_letters).await;
            drop(permit);
            r
        });
    }

    async fn sweep(&self) {
        match self.service.sweep_parked().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(applied = n, "inbox applied parked events by sweep"),
            Err(e) => tracing::warn!(error = %e, "inbox sweep failed"),
        }
    }

    /// Stops taking deliveries, waits (up to the deadline) for those in hand, and closes.
    async fn finish_and_close(&self, subscription: Subscription, mut tasks: Tasks) {
        subscription.cancel().await;
        let finish = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(self.settings.shutdown_deadline, finish).await.is_err() {
            tracing::warn!("shutdown deadline passed with deliveries in hand; they will be redelivered");
        }
        subscription.close().await;
        tracing::info!("inbox runner stopped");
    }
}

/// The subscription ended: `false`, after a WARN line if it failed.
fn ended(error: Option<&outbox_amqp::Error>) -> bool {
    if let Some(e) = error {
        tracing::warn!(error = %e, "delivery stream failed");
    }
    false
}
