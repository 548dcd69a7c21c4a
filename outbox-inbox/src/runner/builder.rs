//! [`InboxRunnerBuilder`]: every setting of a runner with its default.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_amqp::Nodes;
use outbox_types::RetryPolicy;
use tower::Service;

use super::run::InboxRunner;
#[cfg(feature = "fail-points")]
use super::settings::CrashPoint;
use super::settings::Settings;
use super::shared::Shared;
use crate::{DeliveryLimits, Error, InboxRequest, InboxService, Result};

impl<S> InboxRunner<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// Starts a builder for the broker at `url`, feeding `service`.
    pub fn builder(url: impl Into<String>, service: InboxService<S>) -> InboxRunnerBuilder<S> {
        InboxRunnerBuilder::new(url.into(), service)
    }
}

/// Builder of an [`InboxRunner`]. Its defaults are the `DEFAULT_*` constants of this type.
pub struct InboxRunnerBuilder<S> {
    service: InboxService<S>,
    settings: Settings,
}

impl<S> std::fmt::Debug for InboxRunnerBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxRunnerBuilder").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl<S> InboxRunnerBuilder<S> {
    /// The connection name shown in RabbitMQ's management UI unless set.
    pub const DEFAULT_CONNECTION_NAME: &'static str = "outbox-inbox";
    /// Unacked deliveries the broker may send ahead unless set.
    pub const DEFAULT_PREFETCH: u16 = 512;
    /// Transactions handled at once unless set.
    pub const DEFAULT_CONCURRENCY: usize = 8;
    /// Deliveries sharing one transaction at most unless set.
    pub const DEFAULT_BATCH_SIZE: usize = 32;
    /// How often parked events are swept unless set.
    pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(5);
    /// Default [`InboxRunnerBuilder::dedup_window`]: 7 days.
    pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
    /// Default [`InboxRunnerBuilder::retention_interval`]: a minute.
    pub const DEFAULT_RETENTION_INTERVAL: Duration = Duration::from_secs(60);
    /// How often the inbox's backlog is read into the gauges unless set.
    pub const DEFAULT_GAUGE_INTERVAL: Duration = Duration::from_secs(10);
    /// How long a graceful shutdown waits for deliveries in hand unless set.
    pub const DEFAULT_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

    /// The retry policy for transient handler failures unless set: 200 ms doubling to 10 s, 8
    /// attempts.
    pub fn default_retry_policy() -> RetryPolicy {
        RetryPolicy::default()
            .initial_delay(Duration::from_millis(200))
            .max_delay(Duration::from_secs(10))
            .max_attempts(8)
    }

    fn new(url: String, service: InboxService<S>) -> Self {
        let settings = Settings {
            nodes: Nodes::one(url),
            connection_name: Self::DEFAULT_CONNECTION_NAME.to_owned(),
            queues: Vec::new(),
            dead_letter_exchange: String::new(),
            topology: None,
            prefetch: Self::DEFAULT_PREFETCH,
            concurrency: Self::DEFAULT_CONCURRENCY,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            retry: Self::default_retry_policy(),
            limits: DeliveryLimits::default(),
            sweep_interval: Self::DEFAULT_SWEEP_INTERVAL,
            gauge_interval: Some(Self::DEFAULT_GAUGE_INTERVAL),
            dedup_window: Some(Self::DEFAULT_DEDUP_WINDOW),
            retention_interval: Self::DEFAULT_RETENTION_INTERVAL,
            shutdown_deadline: Self::DEFAULT_SHUTDOWN_DEADLINE,
            #[cfg(feature = "fail-points")]
            crash_at: None,
        };
        Self { service, settings }
    }

    /// Adds another node of the same broker (a cluster's node, or another address of it). When
    /// the connection drops, the runner connects to the next node that answers, starting after
    /// the node it was connected to; the deliveries in hand come back from the queue and the inbox
    /// drops what was applied.
    #[must_use]
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.settings.nodes.push(url);
        self
    }

    /// Adds every node of `nodes` (see [`InboxRunnerBuilder::node`]).
    #[must_use]
    pub fn nodes(mut self, nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        for url in nodes {
            self.settings.nodes.push(url);
        }
        self
    }

    /// Sets the connection name shown in RabbitMQ's management UI. Defaults to `outbox-inbox`.
    #[must_use]
    pub fn connection_name(mut self, name: impl Into<String>) -> Self {
        self.settings.connection_name = name.into();
        self
    }

    /// Consumes `queue` (call again for more queues, for example every partition). Required.
    #[must_use]
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.settings.queues.push(queue.into());
        self
    }

    /// Consumes the queues of a [`Topology`](crate::Topology), dead-letters to its exchange and
    /// declares all of it (exchange, queues, bindings, dead letters) on every connection, so the
    /// runner may start before or after the relay. Pass the relay the same topology
    /// (`RelayBuilder::topology` in `outbox-relayer`).
    #[must_use]
    pub fn topology(mut self, topology: &crate::Topology) -> Self {
        self.settings.queues.extend(topology.queues.iter().cloned());
        self.settings.dead_letter_exchange.clone_from(&topology.dead_letter_exchange);
        self.settings.topology = Some(topology.clone());
        self
    }

    /// Sets the exchange dead letters are published to. Defaults to `<first queue>.dlx`
    /// (as declared by [`declare_queue`](crate::declare_queue)).
    #[must_use]
    pub fn dead_letter_exchange(mut self, exchange: impl Into<String>) -> Self {
        self.settings.dead_letter_exchange = exchange.into();
        self
    }

    /// Sets how many unacked deliveries the broker may send ahead. Defaults to 512: enough for
    /// [`InboxRunnerBuilder::concurrency`] full batches in hand and as many waiting. The process
    /// holds up to this many messages in memory (512 of 64 KiB are 32 MiB), so lower it for large
    /// payloads.
    #[must_use]
    pub fn prefetch(mut self, n: u16) -> Self {
        self.settings.prefetch = n.max(1);
        self
    }

    /// Sets how many transactions (each a batch of deliveries, see
    /// [`InboxRunnerBuilder::batch_size`]) are handled at once. Defaults to 8.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.settings.concurrency = n.max(1);
        self
    }

    /// Sets how many deliveries at most share one transaction. The runner takes what the broker
    /// has already sent, without waiting for more: deliveries with distinct event ids and entities
    /// are handled together by [`InboxService::call_batch`] and acked after its one commit; if any
    /// of them fails, the batch is rolled back and each is handled on its own, as with a batch
    /// size of 1. Defaults to 32.
    #[must_use]
    pub fn batch_size(mut self, n: usize) -> Self {
        self.settings.batch_size = n.max(1);
        self
    }

    /// Sets the backoff and the limit for transient handler failures: a failed delivery is
    /// redelivered after the policy's delay; when the policy gives up it is dead-lettered (and an
    /// ordered event holds its entity back like a permanent failure). Defaults to 200 ms doubling to
    /// 10 s, 8 attempts.
    #[must_use]
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.settings.retry = policy;
        self
    }

    /// Sets what deliveries are accepted. Defaults to [`DeliveryLimits::default`].
    #[must_use]
    pub fn limits(mut self, limits: DeliveryLimits) -> Self {
        self.settings.limits = limits;
        self
    }

    /// Opens payloads sealed end to end (a relay with `end_to_end(true)`) with `cipher`; a
    /// delivery that does not open is dead-lettered (`sealed_payload`). Set after
    /// [`InboxRunnerBuilder::limits`], which would replace it. Defaults to none.
    #[must_use]
    pub fn cipher(mut self, cipher: outbox_types::PayloadCipher) -> Self {
        self.settings.limits = std::mem::take(&mut self.settings.limits).cipher(cipher);
        self
    }

    /// Sets how often parked events whose gap has filled are swept (a safety net: they are normally
    /// applied right after their predecessor). Defaults to 5 s.
    #[must_use]
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.settings.sweep_interval = interval;
        self
    }

    /// Sets how often the inbox's backlog ([`admin::backlog`](crate::admin::backlog): entities
    /// with a gap, parked and failed events, the oldest parked age) is read into the gauges
    /// `inbox_entities_with_gap`, `inbox_events_parked`, `inbox_oldest_parked_age_seconds` and
    /// `inbox_events_failed` (label `consumer`), or `None` for never. Defaults to 10 s.
    #[must_use]
    pub fn gauge_interval(mut self, every: Option<Duration>) -> Self {
        self.settings.gauge_interval = every.filter(|d| !d.is_zero());
        self
    }

    /// Sets how long the consumer keeps the ids of the events it processed: every
    /// [`retention_interval`](InboxRunnerBuilder::retention_interval) the runner deletes older ones ([`retention::prune`](crate::retention::prune), bounded batches
    /// that several runners share), or `None` to keep them forever. Defaults to 7 days. An ordered
    /// event delivered again after its id is gone is still dropped by its sequence; for unordered
    /// events the window is the time in which a duplicate is caught, so keep it well past the
    /// longest time a redelivery can take.
    #[must_use]
    pub fn dedup_window(mut self, window: Option<Duration>) -> Self {
        self.settings.dedup_window = window.filter(|d| !d.is_zero());
        self
    }

    /// Sets how often the runner deletes processed event ids past the dedup window (at most 100
    /// batches of 5,000 each time). Defaults to a minute.
    #[must_use]
    pub fn retention_interval(mut self, every: Duration) -> Self {
        self.settings.retention_interval = every.max(Duration::from_millis(1));
        self
    }

    /// Sets how long a graceful shutdown waits for deliveries in hand. Defaults to 10 s.
    #[must_use]
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.settings.shutdown_deadline = deadline;
        self
    }

    /// Arms a crash point: the runner stops there as if its process died. For failure tests.
    #[cfg(feature = "fail-points")]
    #[must_use]
    pub fn crash_at(mut self, point: CrashPoint) -> Self {
        self.settings.crash_at = Some(point);
        self
    }

    /// Builds the runner.
    ///
    /// # Errors
    /// [`Error::Config`] if no queue was given; [`Error::Broker`] holding
    /// [`InvalidUrl`](outbox_amqp::Error::InvalidUrl) for a malformed URL (never quoted).
    pub fn build(self) -> Result<InboxRunner<S>> {
        let mut settings = self.settings;
        settings.nodes.check()?;
        let first = settings.queues.first().ok_or(Error::Config("no queue to consume"))?;
        if settings.dead_letter_exchange.is_empty() {
            settings.dead_letter_exchange = format!("{first}.dlx");
        }
        Ok(InboxRunner {
            shared: Arc::new(Shared {
                settings,
                service: self.service,
                attempts: Mutex::new(HashMap::new()),
                counters: Arc::default(),
                crashed: std::sync::atomic::AtomicBool::new(false),
                consuming: Arc::default(),
                stopped: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            }),
        })
    }
}
