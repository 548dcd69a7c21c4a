//! The AMQP consumer loop around an [`InboxService`]: prefetch, bounded concurrency, ack after
//! commit only, backoff on transient failures, dead-lettering, reconnection, graceful shutdown.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer};
use outbox_core::{Event, EventId, FailureKind, RetryDecision, RetryPolicy};
use tokio::sync::{Semaphore, watch};
use tower::Service;

use crate::decode::{DeliveryLimits, decode_delivery};
use crate::{Error, InboxRequest, InboxService, Result};

/// Header of a dead letter: the stable reason code (`missing_message_id`, `handler_failed`, ...).
pub const HEADER_DEAD_LETTER_REASON: &str = "x-outbox-dead-letter-reason";
/// Header of a dead letter: a human-readable description (no payload).
pub const HEADER_DEAD_LETTER_DETAIL: &str = "x-outbox-dead-letter-detail";
/// Header of a dead letter: the queue it was consumed from.
pub const HEADER_DEAD_LETTER_QUEUE: &str = "x-outbox-dead-letter-queue";

/// Points where a runner can be made to stop as if its process died, for failure tests. Only with
/// the `fail-points` feature.
#[cfg(feature = "fail-points")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashPoint {
    /// The handler's transaction committed; the delivery is not acked.
    AfterCommitBeforeAck,
}

/// Counts of what a runner did with its deliveries since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
struct Counters {
    applied: std::sync::atomic::AtomicU64,
    duplicates: std::sync::atomic::AtomicU64,
    stale: std::sync::atomic::AtomicU64,
    parked: std::sync::atomic::AtomicU64,
    retried: std::sync::atomic::AtomicU64,
    dead_lettered: std::sync::atomic::AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> RunnerStats {
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        RunnerStats {
            applied: get(&self.applied),
            duplicates: get(&self.duplicates),
            stale: get(&self.stale),
            parked: get(&self.parked),
            retried: get(&self.retried),
            dead_lettered: get(&self.dead_lettered),
        }
    }

    fn bump(c: &std::sync::atomic::AtomicU64) {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Builder of an [`InboxRunner`].
pub struct InboxRunnerBuilder<S> {
    url: String,
    connection_name: String,
    service: InboxService<S>,
    queues: Vec<String>,
    dead_letter_exchange: Option<String>,
    prefetch: u16,
    concurrency: usize,
    batch_size: usize,
    retry: RetryPolicy,
    limits: DeliveryLimits,
    sweep_interval: Duration,
    shutdown_deadline: Duration,
    #[cfg(feature = "fail-points")]
    crash_at: Option<CrashPoint>,
}

impl<S> std::fmt::Debug for InboxRunnerBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxRunnerBuilder").field("queues", &self.queues).finish_non_exhaustive()
    }
}

impl<S> InboxRunnerBuilder<S> {
    /// Sets the connection name shown in RabbitMQ's management UI. Defaults to `outbox-inbox`.
    #[must_use]
    pub fn connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = name.into();
        self
    }

    /// Consumes `queue` (call again for more queues, for example every partition). Required.
    #[must_use]
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queues.push(queue.into());
        self
    }

    /// Consumes the queues of a [`crate::Topology`] and dead-letters to its exchange.
    #[must_use]
    pub fn topology(mut self, topology: &crate::Topology) -> Self {
        self.queues.extend(topology.queues.iter().cloned());
        self.dead_letter_exchange = Some(topology.dead_letter_exchange.clone());
        self
    }

    /// Sets the exchange dead letters are published to. Defaults to `<first queue>.dlx`
    /// (as declared by [`crate::declare_queue`]).
    #[must_use]
    pub fn dead_letter_exchange(mut self, exchange: impl Into<String>) -> Self {
        self.dead_letter_exchange = Some(exchange.into());
        self
    }

    /// Sets how many unacked deliveries the broker may send ahead. Defaults to 64.
    #[must_use]
    pub fn prefetch(mut self, n: u16) -> Self {
        self.prefetch = n.max(1);
        self
    }

    /// Sets how many transactions (each a batch of deliveries, see
    /// [`InboxRunnerBuilder::batch_size`]) are handled at once. Defaults to 8.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Sets how many deliveries at most share one transaction. The runner takes what the broker
    /// has already sent, without waiting for more: deliveries with distinct event ids and entities
    /// are handled together by [`InboxService::call_batch`] and acked after its one commit; if any
    /// of them fails, the batch is rolled back and each is handled on its own, as with a batch
    /// size of 1. Defaults to 16.
    #[must_use]
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }

    /// Sets the backoff and the limit for transient handler failures: a failed delivery is
    /// redelivered after the policy's delay; when the policy gives up it is dead-lettered (and an
    /// ordered event holds its entity back like a permanent failure). Defaults to 200 ms doubling to
    /// 10 s, 8 attempts.
    #[must_use]
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Sets what deliveries are accepted. Defaults to [`DeliveryLimits::default`].
    #[must_use]
    pub fn limits(mut self, limits: DeliveryLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets how often parked events whose gap has filled are swept (a safety net: they are normally
    /// applied right after their predecessor). Defaults to 5 s.
    #[must_use]
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// Sets how long a graceful shutdown waits for deliveries in hand. Defaults to 10 s.
    #[must_use]
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.shutdown_deadline = deadline;
        self
    }

    /// Arms a crash point: the runner stops there as if its process died. For failure tests.
    #[cfg(feature = "fail-points")]
    #[must_use]
    pub fn crash_at(mut self, point: CrashPoint) -> Self {
        self.crash_at = Some(point);
        self
    }

    /// Builds the runner.
    ///
    /// # Errors
    /// [`Error::Amqp`] if no queue was given.
    pub fn build(self) -> Result<InboxRunner<S>> {
        let first = self.queues.first().ok_or_else(|| Error::Amqp("no queue to consume".to_owned()))?;
        let dlx = self.dead_letter_exchange.clone().unwrap_or_else(|| format!("{first}.dlx"));
        Ok(InboxRunner {
            shared: Arc::new(Shared {
                url: self.url,
                connection_name: self.connection_name,
                service: self.service,
                queues: self.queues,
                dead_letter_exchange: dlx,
                prefetch: self.prefetch,
                concurrency: self.concurrency,
                batch_size: self.batch_size,
                retry: self.retry,
                limits: self.limits,
                sweep_interval: self.sweep_interval,
                shutdown_deadline: self.shutdown_deadline,
                attempts: Mutex::new(HashMap::new()),
                counters: Arc::new(Counters::default()),
                #[cfg(feature = "fail-points")]
                crash_at: self.crash_at,
                crashed: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }
}

struct Shared<S> {
    url: String,
    connection_name: String,
    service: InboxService<S>,
    queues: Vec<String>,
    dead_letter_exchange: String,
    prefetch: u16,
    concurrency: usize,
    batch_size: usize,
    retry: RetryPolicy,
    limits: DeliveryLimits,
    sweep_interval: Duration,
    shutdown_deadline: Duration,
    /// Transient failures per event id, for the backoff and the attempt limit.
    attempts: Mutex<HashMap<EventId, u32>>,
    counters: Arc<Counters>,
    #[cfg(feature = "fail-points")]
    crash_at: Option<CrashPoint>,
    crashed: std::sync::atomic::AtomicBool,
}

/// Consumes one or more queues and feeds every delivery to an [`InboxService`].
///
/// A delivery is acked only after the inbox committed (applied, duplicate, stale or parked). A
/// delivery that does not decode, or whose handler fails permanently or too often, is published to
/// the dead-letter exchange with [`HEADER_DEAD_LETTER_REASON`] and then acked. A transient failure
/// is requeued after a backoff. A lost connection is re-established with backoff; deliveries in
/// hand then come back from the broker and the inbox drops what was already applied.
///
/// ```no_run
/// use outbox_consumer::{HandlerError, InboxLayer, InboxRequest, InboxRunner};
/// use tower::Layer;
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_consumer::Error> {
/// let handler = tower::service_fn(|req: InboxRequest| async move { Ok::<_, HandlerError>(req) });
/// let service = InboxLayer::new(pool, "shipping").layer(handler);
/// let runner = InboxRunner::builder("amqp://guest:guest@127.0.0.1:5672/%2f", service)
///     .queue("shipping.orders")
///     .prefetch(64)
///     .concurrency(8)
///     .batch_size(16)
///     .build()?;
/// let handle = runner.spawn();
/// // ...
/// handle.shutdown().await
/// # }
/// ```
pub struct InboxRunner<S> {
    shared: Arc<Shared<S>>,
}

impl<S> std::fmt::Debug for InboxRunner<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxRunner").field("queues", &self.shared.queues).finish_non_exhaustive()
    }
}

/// A running [`InboxRunner`].
#[derive(Debug)]
pub struct RunnerHandle {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<()>>,
    counters: Arc<Counters>,
}

impl RunnerHandle {
    /// What the runner did so far.
    pub fn stats(&self) -> RunnerStats {
        self.counters.snapshot()
    }

    /// Graceful shutdown: stop taking deliveries, finish and ack those in hand, close.
    ///
    /// # Errors
    /// [`Error::Amqp`] if the task had failed or was aborted.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(|e| Error::Amqp(format!("runner task: {e}")))?
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
    /// The runner's error.
    pub async fn join(self) -> Result<()> {
        self.task.await.map_err(|e| Error::Amqp(format!("runner task: {e}")))?
    }
}

fn amqp(e: &lapin::Error) -> Error {
    Error::Amqp(e.to_string())
}

enum Verdict {
    Ack,
    Requeue(Duration),
    DeadLetter { reason: &'static str, detail: String },
}

impl<S> InboxRunner<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// Starts a builder for the broker at `url`, feeding `service`.
    pub fn builder(url: impl Into<String>, service: InboxService<S>) -> InboxRunnerBuilder<S> {
        InboxRunnerBuilder {
            url: url.into(),
            connection_name: "outbox-inbox".to_owned(),
            service,
            queues: Vec::new(),
            dead_letter_exchange: None,
            prefetch: 64,
            concurrency: 8,
            batch_size: 16,
            retry: RetryPolicy::default()
                .initial_delay(Duration::from_millis(200))
                .max_delay(Duration::from_secs(10))
                .max_attempts(8),
            limits: DeliveryLimits::default(),
            sweep_interval: Duration::from_secs(5),
            shutdown_deadline: Duration::from_secs(10),
            #[cfg(feature = "fail-points")]
            crash_at: None,
        }
    }

    /// Runs as a task of the current runtime.
    pub fn spawn(self) -> RunnerHandle {
        let (stop, mut rx) = watch::channel(false);
        let counters = self.shared.counters.clone();
        let task = tokio::spawn(async move {
            self.run(async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
        });
        RunnerHandle { stop, task, counters }
    }

    /// Runs until `shutdown` completes, reconnecting after every loss, then shuts down gracefully.
    ///
    /// # Errors
    /// [`Error::Amqp`] only for a crash point; broker failures are retried with backoff.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        tokio::pin!(shutdown);
        let mut backoff = outbox_core::Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        loop {
            let session = self.session(&mut shutdown);
            let wait = match session.await {
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

    /// One connection's life. `Ok(true)`: shut down gracefully; `Ok(false)`/`Err`: reconnect.
    async fn session(&self, shutdown: &mut (impl Future<Output = ()> + Unpin)) -> Result<bool> {
        let s = &self.shared;
        let connection = Connection::connect(
            &s.url,
            ConnectionProperties::default().with_connection_name(s.connection_name.as_str().into()),
        )
        .await
        .map_err(|e| amqp(&e))?;
        let channel = connection.create_channel().await.map_err(|e| amqp(&e))?;
        channel.basic_qos(s.prefetch, BasicQosOptions::default()).await.map_err(|e| amqp(&e))?;
        let dead_letters = connection.create_channel().await.map_err(|e| amqp(&e))?;
        dead_letters.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| amqp(&e))?;
        let mut streams: SelectAll<Consumer> = SelectAll::new();
        let mut tags = Vec::new();
        for queue in &s.queues {
            let consumer = channel
                .basic_consume(queue.as_str().into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
                .await
                .map_err(|e| amqp(&e))?;
            tags.push(consumer.tag());
            streams.push(consumer);
        }
        tracing::info!(queues = ?s.queues, "inbox runner consuming");
        let permits = Arc::new(Semaphore::new(s.concurrency));
        let mut tasks = tokio::task::JoinSet::new();
        let mut sweep = tokio::time::interval(s.sweep_interval);
        sweep.tick().await;
        let graceful = loop {
            tokio::select! {
                () = &mut *shutdown => break true,
                _ = sweep.tick() => {
                    match s.service.sweep_parked().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(applied = n, "inbox applied parked events by sweep"),
                        Err(e) => tracing::warn!(error = %e, "inbox sweep failed"),
                    }
                }
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Ok(Err(e)) = done {
                        // A crash point: stop as if dead, without acking anything else.
                        tasks.abort_all();
                        drop(connection);
                        return Err(e);
                    }
                }
                next = streams.next() => match next {
                    Some(Ok(delivery)) => {
                        let permit = permits.clone().acquire_owned().await.map_err(|_| Error::Amqp("semaphore closed".to_owned()))?;
                        // With the permit in hand, take what else the broker has sent meanwhile.
                        let mut batch = vec![delivery];
                        let mut ended = false;
                        while batch.len() < s.batch_size {
                            match streams.next().now_or_never() {
                                Some(Some(Ok(delivery))) => batch.push(delivery),
                                Some(Some(Err(e))) => {
                                    tracing::warn!(error = %e, "delivery stream failed");
                                    ended = true;
                                    break;
                                }
                                Some(None) => {
                                    ended = true;
                                    break;
                                }
                                None => break,
                            }
                        }
                        let this = self.shared.clone();
                        let dead_letters = dead_letters.clone();
                        tasks.spawn(async move {
                            let r = this.handle_batch(batch, &dead_letters).await;
                            drop(permit);
                            r
                        });
                        if ended {
                            break false;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "delivery stream failed");
                        break false;
                    }
                    None => break false,
                },
            }
        };
        if graceful {
            for tag in tags {
                let _ = channel.basic_cancel(tag, BasicCancelOptions::default()).await;
            }
            let finish = async { while tasks.join_next().await.is_some() {} };
            if tokio::time::timeout(s.shutdown_deadline, finish).await.is_err() {
                tracing::warn!("shutdown deadline passed with deliveries in hand; they will be redelivered");
            }
            let _ = channel.close(200, "shutdown".into()).await;
            let _ = connection.close(200, "shutdown".into()).await;
            tracing::info!("inbox runner stopped");
        }
        Ok(graceful)
    }
}

/// Splits events (with their delivery index) into groups without a repeated event id or entity,
/// in delivery order: each event joins the first group after the last one that holds its id or
/// its entity, so the events of one entity keep their order from group to group.
fn distinct_groups(events: Vec<(usize, Event)>) -> Vec<Vec<(usize, Event)>> {
    #[derive(Default)]
    struct Group {
        ids: HashSet<EventId>,
        keys: HashSet<String>,
        members: Vec<(usize, Event)>,
    }
    let mut groups: Vec<Group> = Vec::new();
    for (i, event) in events {
        let key = event.entity.as_ref().map(|e| e.key.clone());
        let after = groups
            .iter()
            .rposition(|g| g.ids.contains(&event.id) || key.as_ref().is_some_and(|k| g.keys.contains(k)))
            .map_or(0, |g| g + 1);
        if after == groups.len() {
            groups.push(Group::default());
        }
        let group = &mut groups[after];
        group.ids.insert(event.id);
        group.keys.extend(key);
        group.members.push((i, event));
    }
    groups.into_iter().map(|g| g.members).collect()
}

fn queue_of(queues: &[String], delivery: &Delivery) -> String {
    // The routing key does not name the queue; with one queue it is that one, with partitions the
    // dead letter names the partition routing key instead.
    if queues.len() == 1 { queues[0].clone() } else { delivery.routing_key.as_str().to_owned() }
}

impl<S> Shared<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// Handles deliveries taken together: those that decode are applied in batches of distinct
    /// event ids and entities ([`InboxService::call_batch`], in delivery order; a delivery that
    /// repeats an id or an entity goes to a later batch), each batch that fails is applied one
    /// delivery at a time, and then every delivery is acked, requeued or dead-lettered.
    async fn handle_batch(&self, deliveries: Vec<Delivery>, dead_letters: &Channel) -> Result<()> {
        let mut verdicts: Vec<Option<Verdict>> = deliveries.iter().map(|_| None).collect();
        let mut events = Vec::new();
        for (i, delivery) in deliveries.iter().enumerate() {
            match decode_delivery(&delivery.properties, &delivery.data, &self.limits) {
                Err(e) => {
                    tracing::warn!(reason = e.code(), detail = %e, "inbox.bad_delivery");
                    metrics::counter!("inbox_bad_deliveries_total", "reason" => e.code()).increment(1);
                    verdicts[i] = Some(Verdict::DeadLetter { reason: e.code(), detail: e.to_string() });
                }
                Ok(event) => events.push((i, event)),
            }
        }
        for group in distinct_groups(events) {
            if group.len() > 1 {
                let batch = group.iter().map(|(_, e)| e.clone()).collect();
                match self.service.call_batch(batch).await {
                    Ok(outcomes) => {
                        for ((i, event), outcome) in group.iter().zip(outcomes) {
                            self.forget(event.id);
                            self.count(outcome);
                            verdicts[*i] = Some(Verdict::Ack);
                        }
                        continue;
                    }
                    Err(e) => tracing::debug!(error = %e, size = group.len(), "inbox.batch_failed; one at a time"),
                }
            }
            for (i, event) in group {
                verdicts[i] = Some(self.apply(event).await?);
            }
        }
        let finishing = deliveries.into_iter().zip(verdicts).map(|(delivery, verdict)| async move {
            let queue = queue_of(&self.queues, &delivery);
            match verdict {
                Some(verdict) => self.finish(delivery, verdict, dead_letters, &queue).await,
                None => Ok(()),
            }
        });
        futures::future::try_join_all(finishing).await?;
        Ok(())
    }

    /// Acks, requeues or dead-letters a delivery as its verdict says.
    async fn finish(&self, delivery: Delivery, verdict: Verdict, dead_letters: &Channel, queue: &str) -> Result<()> {
        match verdict {
            Verdict::Ack => {
                #[cfg(feature = "fail-points")]
                if self.crash_at == Some(CrashPoint::AfterCommitBeforeAck) {
                    self.crashed.store(true, std::sync::atomic::Ordering::SeqCst);
                    tracing::warn!("crash point reached: the runner stops before acking");
                    return Err(Error::Amqp("crashed at AfterCommitBeforeAck".to_owned()));
                }
                let _ = delivery.ack(BasicAckOptions::default()).await;
            }
            Verdict::Requeue(delay) => {
                tokio::time::sleep(delay).await;
                let _ = delivery.nack(BasicNackOptions { requeue: true, ..BasicNackOptions::default() }).await;
            }
            Verdict::DeadLetter { reason, detail } => {
                match self.dead_letter(dead_letters, &delivery, queue, reason, &detail).await {
                    Ok(()) => {
                        let _ = delivery.ack(BasicAckOptions::default()).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not dead-letter; the delivery is requeued");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        let _ = delivery.nack(BasicNackOptions { requeue: true, ..BasicNackOptions::default() }).await;
                    }
                }
            }
        }
        Ok(())
    }

    async fn apply(&self, event: outbox_core::Event) -> Result<Verdict> {
        let id = event.id;
        let mut service = self.service.clone();
        let copy = event.clone();
        match service.call(event).await {
            Ok(outcome) => {
                self.forget(id);
                self.count(outcome);
                Ok(Verdict::Ack)
            }
            Err(e) if e.is_retryable() => {
                let attempts = self.bump(id);
                // Only attempts bound a delivery's retries: an old event (a backlog) is no reason to
                // give up, so its age is not given to the policy.
                let now = SystemTime::now();
                match self.retry.decide(attempts, now, now, FailureKind::Transient) {
                    RetryDecision::RetryAt(at) => {
                        let delay = at.duration_since(SystemTime::now()).unwrap_or_default();
                        tracing::info!(event_id = %id, attempts, delay_ms = delay.as_millis() as u64, error = %e, "inbox.retry");
                        Counters::bump(&self.counters.retried);
                        Ok(Verdict::Requeue(delay))
                    }
                    RetryDecision::Quarantine(reason) => {
                        self.forget(id);
                        // Out of attempts: held like a permanent failure, so that the entity's
                        // later events wait for an operator.
                        self.service.record_failed(&copy, &e).await?;
                        Ok(Verdict::DeadLetter { reason: "attempts_exhausted", detail: format!("{e}; {reason}") })
                    }
                }
            }
            Err(e) => {
                self.forget(id);
                Ok(Verdict::DeadLetter { reason: "handler_failed", detail: e.to_string() })
            }
        }
    }

    fn count(&self, outcome: crate::Outcome) {
        let c = &self.counters;
        Counters::bump(match outcome {
            crate::Outcome::Duplicate => &c.duplicates,
            crate::Outcome::Stale => &c.stale,
            crate::Outcome::Parked => &c.parked,
            _ => &c.applied,
        });
    }

    fn bump(&self, id: EventId) -> u32 {
        let mut map = self.attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(id).or_insert(0);
        *n += 1;
        *n
    }

    fn forget(&self, id: EventId) {
        self.attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
    }

    async fn dead_letter(
        &self,
        channel: &Channel,
        delivery: &Delivery,
        queue: &str,
        reason: &str,
        detail: &str,
    ) -> Result<()> {
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        headers.insert(HEADER_DEAD_LETTER_REASON.into(), AMQPValue::LongString(LongString::from(reason)));
        headers.insert(HEADER_DEAD_LETTER_DETAIL.into(), AMQPValue::LongString(LongString::from(detail)));
        headers.insert(HEADER_DEAD_LETTER_QUEUE.into(), AMQPValue::LongString(LongString::from(queue)));
        let props: BasicProperties = delivery.properties.clone().with_headers(headers);
        let confirm = channel
            .basic_publish(
                self.dead_letter_exchange.as_str().into(),
                queue.into(),
                BasicPublishOptions::default(),
                &delivery.data,
                props,
            )
            .await
            .map_err(|e| amqp(&e))?
            .await
            .map_err(|e| amqp(&e))?;
        if !confirm.is_ack() {
            return Err(Error::Amqp("dead letter not confirmed".to_owned()));
        }
        metrics::counter!("inbox_dead_letters_total", "reason" => reason.to_owned()).increment(1);
        Counters::bump(&self.counters.dead_lettered);
        tracing::warn!(reason, queue, message_id = ?delivery.properties.message_id().as_ref().map(|m| m.as_str()), "inbox.dead_lettered");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{Entity, Headers, Payload};

    fn event(id: u128, entity: Option<(&str, u64)>) -> Event {
        Event {
            id: EventId::from_uuid(uuid::Uuid::from_u128(id)),
            event_type: "t".to_owned(),
            event_version: 1,
            entity: entity.map(|(key, seq)| Entity { key: key.to_owned(), seq }),
            payload: Payload::new(b"{}".to_vec(), "application/json"),
            correlation_id: None,
            causation_id: None,
            traceparent: None,
            headers: Headers::new(),
            created_at: SystemTime::UNIX_EPOCH,
        }
    }

    fn shape(groups: &[Vec<(usize, Event)>]) -> Vec<Vec<usize>> {
        groups.iter().map(|g| g.iter().map(|(i, _)| *i).collect()).collect()
    }

    #[test]
    fn groups_never_repeat_an_id_or_an_entity_and_keep_each_entitys_order() {
        let events = vec![
            (0, event(1, Some(("a", 1)))),
            (1, event(2, Some(("b", 1)))),
            (2, event(3, Some(("a", 2)))),
            (3, event(4, None)),
            (4, event(4, None)),
            (5, event(5, Some(("c", 1)))),
            (6, event(6, Some(("a", 3)))),
            (7, event(7, Some(("b", 2)))),
        ];
        // a2 after a1, a3 after a2; the repeated id 4 goes after its first delivery; c joins the
        // first group; b2 follows b1 in the second group.
        assert_eq!(shape(&distinct_groups(events)), [vec![0, 1, 3, 5], vec![2, 4, 7], vec![6]]);
        assert!(distinct_groups(Vec::new()).is_empty());
    }
}
