//! One connection's life: subscribe, hand batches of deliveries to tasks within the concurrency
//! limit (two batches in hand never share an entity, see `schedule`), sweep parked events now and
//! then, and on shutdown finish what is in hand.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use outbox_amqp::{Delivery, Subscription};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tower::Service;

use super::batch::Hold;
use super::schedule::{self, Schedule};
use super::shared::Shared;
use crate::{InboxRequest, Result};

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
            &self.settings.nodes,
            &self.settings.connection_name,
            self.settings.prefetch,
            &self.settings.queues,
            &self.settings.dead_letter_exchange,
            self.settings.topology.as_ref(),
        )
        .await?;
        tracing::info!(queues = ?self.settings.queues, "inbox runner consuming");
        let mut tasks = Tasks::new();
        self.consuming.store(true, Ordering::Relaxed);
        // The sweep runs beside the deliveries (a multi-tenant inbox's sweep may wait on a
        // tenant's database that is down); a sweep under way when the session ends finishes within
        // the shutdown deadline, so that no handler is cut short by it.
        let (stop_sweep, stopped) = tokio::sync::watch::channel(false);
        let mut sweeper = tokio::spawn(self.clone().sweep_every(stopped));
        // On an error (a crash point) the subscription is dropped with nothing else acked, and the
        // sweep stops at once, as if the process had died.
        let consumed = self.consume(&mut subscription, &mut tasks, shutdown).await;
        let _ = stop_sweep.send(true);
        if consumed.is_err() || tokio::time::timeout(self.settings.shutdown_deadline, &mut sweeper).await.is_err() {
            sweeper.abort();
        }
        self.consuming.store(false, Ordering::Relaxed);
        let graceful = consumed?;
        if graceful {
            self.finish_and_close(subscription, tasks).await;
        }
        Ok(graceful)
    }

    /// Takes deliveries until shutdown (`Ok(true)`) or until the subscription ends (`Ok(false)`).
    /// Deliveries wait in a [`Schedule`] until a permit is free and their entity is not in hand.
    async fn consume(
        self: &Arc<Self>,
        subscription: &mut Subscription,
        tasks: &mut Tasks,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<bool> {
        let permits = Arc::new(Semaphore::new(self.settings.concurrency));
        let mut schedule = Schedule::default();
        // The entities each batch in hand holds, by task.
        let mut holding: HashMap<tokio::task::Id, Vec<String>> = HashMap::new();
        // A batch done with the database says which entities it still holds (its retries').
        let (done_with, mut still_held) = mpsc::unbounded_channel();
        loop {
            while !schedule.is_empty() {
                let Ok(permit) = permits.clone().try_acquire_owned() else { break };
                let (batch, entities) = schedule.next_batch(self.settings.batch_size);
                if batch.is_empty() {
                    break;
                }
                let id = self.spawn_batch(tasks, batch, subscription, Hold { permit, done_with: done_with.clone() });
                holding.insert(id, entities);
            }
            tokio::select! {
                () = &mut *shutdown => return Ok(true),
                Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    let id = match &done {
                        Ok((id, _)) => *id,
                        Err(e) => e.id(),
                    };
                    schedule.release(&holding.remove(&id).unwrap_or_default());
                    if let Ok((_, Err(e))) = done {
                        // A crash point: stop as if dead, without acking anything else.
                        tasks.abort_all();
                        return Err(e);
                    }
                }
                Some((id, kept)) = still_held.recv() => {
                    if let Some(held) = holding.get_mut(&id) {
                        let (kept, freed): (Vec<String>, Vec<String>) = held.drain(..).partition(|k| kept.contains(k));
                        schedule.release(&freed);
                        *held = kept;
                    }
                }
                next = subscription.next() => {
                    let first = match next {
                        Some(Ok(delivery)) => delivery,
                        Some(Err(e)) => return Ok(ended(Some(&e))),
                        None => return Ok(ended(None)),
                    };
                    // Take what else the broker has sent meanwhile.
                    let mut received = vec![first];
                    let more = subscription.take_ready(&mut received, usize::from(self.settings.prefetch));
                    for delivery in received {
                        schedule.push(self.schedule_key(&delivery), delivery);
                    }
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
        hold: Hold,
    ) -> tokio::task::Id {
        let this = self.clone();
        let dead_letters = subscription.dead_letters();
        tasks.spawn(async move { this.handle_batch(batch, &dead_letters, hold).await }).id()
    }

    /// The key the schedule holds a delivery's entity by ([`schedule::key`]); `None` for an
    /// event of no entity.
    pub(super) fn schedule_key(&self, delivery: &Delivery) -> Option<String> {
        let tenant = self.service.tenants().and_then(crate::Tenants::header).and_then(|h| delivery.header(h));
        Some(schedule::key(delivery.entity()?, tenant))
    }

    /// Sweeps parked events every `sweep_interval` until `stopped` turns true (a sweep under way
    /// finishes first).
    async fn sweep_every(self: Arc<Self>, mut stopped: tokio::sync::watch::Receiver<bool>) {
        let mut sweep = tokio::time::interval(self.settings.sweep_interval);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        sweep.tick().await;
        loop {
            tokio::select! {
                _ = sweep.tick() => {}
                _ = stopped.changed() => return,
            }
            if *stopped.borrow() {
                return;
            }
            match self.service.sweep_parked().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(applied = n, "inbox applied parked events by sweep"),
                Err(e) => tracing::warn!(error = %e, "inbox sweep failed"),
            }
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
