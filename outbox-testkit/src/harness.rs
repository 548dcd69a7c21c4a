//! One call that gives a test everything: an isolated database, exchange and queues, a relay and a
//! consumer wired to them, a recorder at the broker, fault injection, and teardown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use outbox_consumer::{InboxLayer, InboxRequest, InboxRunner, InboxRunnerBuilder, RunnerHandle, Topology};
use outbox_core::{Publisher, RetryPolicy, Status};
use outbox_producer::Outbox;
use outbox_relay::{AmqpPublisher, AmqpPublisherBuilder, RelayBuilder, RelayHandle};
use sqlx::PgPool;
use tower::Layer;

use crate::{ChaosProxy, FaultyPublisher, Reconciliation, Recorder, Result, TestBroker, TestDb};

/// The publisher of the harness's relay: the real one, wrapped so that a test can inject faults.
pub type HarnessPublisher = FaultyPublisher<AmqpPublisher>;

type RelayConfig = Arc<dyn Fn(RelayBuilder<HarnessPublisher>) -> RelayBuilder<HarnessPublisher> + Send + Sync>;
type PublisherConfig = Arc<dyn Fn(AmqpPublisherBuilder) -> AmqpPublisherBuilder + Send + Sync>;
type ConsumerFactory = Arc<dyn Fn(ConsumerStart) -> outbox_consumer::Result<RunnerHandle> + Send + Sync>;

/// What a consumer needs to start; built by the harness.
struct ConsumerStart {
    pool: PgPool,
    name: String,
    url: String,
    connection_name: String,
    topology: Topology,
    crash: Option<ConsumerCrash>,
}

/// A crash point of the consumer runner (with the `fail-points` feature; without it, none exists).
#[cfg(feature = "fail-points")]
type ConsumerCrash = outbox_consumer::CrashPoint;
#[cfg(not(feature = "fail-points"))]
type ConsumerCrash = std::convert::Infallible;

#[cfg(feature = "fail-points")]
fn arm<S>(builder: InboxRunnerBuilder<S>, point: ConsumerCrash) -> InboxRunnerBuilder<S> {
    builder.crash_at(point)
}

#[cfg(not(feature = "fail-points"))]
fn arm<S>(_builder: InboxRunnerBuilder<S>, point: ConsumerCrash) -> InboxRunnerBuilder<S> {
    match point {}
}

/// Builder of a [`Harness`]; see [`Harness::builder`].
pub struct HarnessBuilder {
    relay: RelayConfig,
    publisher: PublisherConfig,
    start_relay: bool,
    consumer: Option<ConsumerFactory>,
    consumer_name: String,
    separate_consumer_db: bool,
    bindings: Vec<String>,
    relay_proxy: bool,
    consumer_proxy: bool,
}

impl std::fmt::Debug for HarnessBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("start_relay", &self.start_relay)
            .field("consumer", &self.consumer.is_some())
            .field("consumer_name", &self.consumer_name)
            .field("bindings", &self.bindings)
            .finish_non_exhaustive()
    }
}

impl HarnessBuilder {
    /// Adjusts the relay's settings (applied to every relay the harness starts, after its test
    /// defaults: lease 3 s, confirm timeout 2 s, poll 200 ms, shutdown deadline 5 s, retries from
    /// 100 ms up to 1 s). Defaults to the test defaults alone.
    #[must_use]
    pub fn relay(
        mut self,
        configure: impl Fn(RelayBuilder<HarnessPublisher>) -> RelayBuilder<HarnessPublisher> + Send + Sync + 'static,
    ) -> Self {
        self.relay = Arc::new(configure);
        self
    }

    /// Adjusts the relay's AMQP publisher (for example `max_message_bytes`). Defaults to a
    /// connect timeout of 2 s.
    #[must_use]
    pub fn publisher(
        mut self,
        configure: impl Fn(AmqpPublisherBuilder) -> AmqpPublisherBuilder + Send + Sync + 'static,
    ) -> Self {
        self.publisher = Arc::new(configure);
        self
    }

    /// Does not start the relay in [`HarnessBuilder::start`]; start it with
    /// [`Harness::start_relay`] (for example after writing a backlog). Defaults to starting it.
    #[must_use]
    pub fn defer_relay(mut self) -> Self {
        self.start_relay = false;
        self
    }

    /// Runs a consumer: `handler` wrapped in the inbox, fed from the harness's queue by an
    /// [`InboxRunner`]. Defaults to no consumer.
    #[must_use]
    pub fn consumer<S>(self, handler: S) -> Self
    where
        S: tower::Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<tower::BoxError>,
        S::Future: Send,
    {
        self.consumer_with(handler, |b| b)
    }

    /// Like [`HarnessBuilder::consumer`], adjusting the runner after the test defaults (retries
    /// from 200 ms up to 1 s, 5 attempts, parked sweep every 500 ms).
    #[must_use]
    pub fn consumer_with<S>(
        mut self,
        handler: S,
        configure: impl Fn(InboxRunnerBuilder<S>) -> InboxRunnerBuilder<S> + Send + Sync + 'static,
    ) -> Self
    where
        S: tower::Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<tower::BoxError>,
        S::Future: Send,
    {
        self.consumer = Some(Arc::new(move |start: ConsumerStart| {
            let service = InboxLayer::new(start.pool, start.name).layer(handler.clone());
            let mut builder = InboxRunner::builder(start.url, service)
                .topology(&start.topology)
                .connection_name(start.connection_name)
                .retry_policy(
                    RetryPolicy::default()
                        .initial_delay(Duration::from_millis(200))
                        .max_delay(Duration::from_secs(1))
                        .max_attempts(5),
                )
                .sweep_interval(Duration::from_millis(500));
            builder = configure(builder);
            if let Some(point) = start.crash {
                builder = arm(builder, point);
            }
            Ok(builder.build()?.spawn())
        }));
        self
    }

    /// Names the consumer (its inbox rows are scoped by it). Defaults to `consumer`.
    #[must_use]
    pub fn consumer_name(mut self, name: impl Into<String>) -> Self {
        self.consumer_name = name.into();
        self
    }

    /// Gives the consumer a database of its own, as separate services have. Defaults to sharing
    /// the producer's database.
    #[must_use]
    pub fn separate_consumer_database(mut self) -> Self {
        self.separate_consumer_db = true;
        self
    }

    /// Binds the consumer's queue and the recorder's queue with these routing keys (a message no
    /// queue takes is returned to the relay as unroutable). Defaults to `#` (everything).
    #[must_use]
    pub fn bindings(mut self, keys: &[&str]) -> Self {
        self.bindings = keys.iter().map(|k| (*k).to_owned()).collect();
        self
    }

    /// Routes the relay's broker connection through a [`ChaosProxy`] ([`Harness::relay_proxy`]).
    /// Defaults to a direct connection.
    #[must_use]
    pub fn relay_through_proxy(mut self) -> Self {
        self.relay_proxy = true;
        self
    }

    /// Routes the consumer's broker connection through a [`ChaosProxy`]
    /// ([`Harness::consumer_proxy`]). Defaults to a direct connection.
    #[must_use]
    pub fn consumer_through_proxy(mut self) -> Self {
        self.consumer_proxy = true;
        self
    }

    /// Creates the database(s), exchange and queues, starts the recorder, the consumer (if any)
    /// and the relay (unless deferred).
    ///
    /// # Errors
    /// If a server cannot be reached or refuses a declaration.
    pub async fn start(self) -> Result<Harness> {
        let db = TestDb::new().await?;
        let consumer_db = if self.separate_consumer_db { Some(TestDb::new().await?) } else { None };
        let broker = TestBroker::new().await?;
        let exchange = broker.declare_exchange("events", lapin::ExchangeKind::Topic).await?;
        let bindings: Vec<&str> = self.bindings.iter().map(String::as_str).collect();
        let record_queue = broker.declare_queue("recorded").await?;
        for key in &bindings {
            broker.bind(&record_queue, &exchange, key).await?;
        }
        let queue = broker.name("consumer");
        let topology = outbox_consumer::declare_queue(broker.channel(), &exchange, &queue, &bindings).await?;
        for q in topology.queues.iter().chain([&topology.dead_letter_queue]) {
            broker.remember_queue(q);
        }
        broker.remember_exchange(&topology.dead_letter_exchange);
        let recorder = Recorder::start(&record_queue).await?;
        let relay_proxy = if self.relay_proxy { Some(ChaosProxy::start(broker_addr().await?).await?) } else { None };
        let consumer_proxy =
            if self.consumer_proxy { Some(ChaosProxy::start(broker_addr().await?).await?) } else { None };
        let suffix = crate::unique_suffix();
        let relay_url = relay_proxy.as_ref().map_or_else(crate::amqp_url, |p| via(&crate::amqp_url(), p.addr()));
        let relay_connection = format!("harness-relay-{suffix}");
        let publisher = FaultyPublisher::new(
            (self.publisher)(
                AmqpPublisher::builder(relay_url.clone())
                    .connect_timeout(Duration::from_secs(2))
                    .connection_name(&relay_connection),
            )
            .build(),
        );
        let mut harness = Harness {
            relay: Guard(None),
            consumer: Guard(None),
            recorder,
            relay_proxy,
            consumer_proxy,
            publisher,
            relay_config: self.relay,
            relay_url,
            relay_connection,
            consumer_factory: self.consumer,
            consumer_name: self.consumer_name,
            consumer_connection: format!("harness-consumer-{suffix}"),
            topology,
            record_queue,
            exchange,
            outbox: Outbox::new(),
            broker,
            consumer_db,
            db,
        };
        if harness.consumer_factory.is_some() {
            harness.start_consumer()?;
        }
        if self.start_relay {
            harness.start_relay().await?;
        }
        Ok(harness)
    }
}

/// The broker's address, for a proxy in front of it.
async fn broker_addr() -> Result<SocketAddr> {
    let url = crate::amqp_url();
    let authority = authority(&url);
    let with_port = if authority.contains(':') { authority.to_owned() } else { format!("{authority}:5672") };
    tokio::net::lookup_host(with_port).await?.next().ok_or_else(|| {
        crate::Error::Io(std::io::Error::new(std::io::ErrorKind::NotFound, "the broker's host does not resolve"))
    })
}

/// The `host:port` part of an AMQP URL.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// `url` with its host and port replaced by `addr` (credentials and vhost kept).
fn via(url: &str, addr: SocketAddr) -> String {
    url.replacen(authority(url), &addr.to_string(), 1)
}

/// Aborts the task it holds when dropped (a test that panics leaves nothing running).
struct Guard<H: Abort>(Option<H>);

trait Abort {
    fn abort_task(&self);
}

impl Abort for RelayHandle {
    fn abort_task(&self) {
        self.abort();
    }
}

impl Abort for RunnerHandle {
    fn abort_task(&self) {
        self.abort();
    }
}

impl<H: Abort> Drop for Guard<H> {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.abort_task();
        }
    }
}

/// A complete, isolated test environment on the real servers.
///
/// - its own database with the outbox and inbox migrations ([`Harness::pool`]; optionally a second
///   one for the consumer, [`Harness::consumer_pool`]);
/// - a topic exchange ([`Harness::exchange`]) and the consumer's queue with its dead letters
///   ([`Harness::queue`]), named with a random suffix;
/// - a [`Recorder`] on a queue of its own with the same bindings ([`Harness::recorder`]): what the
///   broker delivered, independent of the consumer;
/// - a relay whose publisher can be made to fail ([`Harness::faults`]), optionally behind a
///   [`ChaosProxy`], with crash points through [`HarnessBuilder::relay`] or
///   [`Harness::start_relay_with`];
/// - a consumer running the test's handler in the inbox, optionally;
/// - [`Harness::reconcile`], a [`Reconciliation`] wired to all of the above.
///
/// [`Harness::close`] stops everything and deletes what was created; if the test panics, `Drop`
/// aborts the relay and consumer tasks and deletes the database, queues and exchanges.
pub struct Harness {
    // Declared first: dropped (tasks aborted) before the database and broker go away.
    relay: Guard<RelayHandle>,
    consumer: Guard<RunnerHandle>,
    recorder: Recorder,
    relay_proxy: Option<ChaosProxy>,
    consumer_proxy: Option<ChaosProxy>,
    publisher: HarnessPublisher,
    relay_config: RelayConfig,
    relay_url: String,
    relay_connection: String,
    consumer_factory: Option<ConsumerFactory>,
    consumer_name: String,
    consumer_connection: String,
    topology: Topology,
    record_queue: String,
    exchange: String,
    outbox: Outbox,
    broker: TestBroker,
    consumer_db: Option<TestDb>,
    db: TestDb,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("database", &self.db.name())
            .field("exchange", &self.exchange)
            .field("queue", &self.topology.queues)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Starts a builder.
    pub fn builder() -> HarnessBuilder {
        HarnessBuilder {
            relay: Arc::new(|b| b),
            publisher: Arc::new(|b| b),
            start_relay: true,
            consumer: None,
            consumer_name: "consumer".to_owned(),
            separate_consumer_db: false,
            bindings: vec!["#".to_owned()],
            relay_proxy: false,
            consumer_proxy: false,
        }
    }

    /// The test database (outbox and business tables).
    pub fn db(&self) -> &TestDb {
        &self.db
    }

    /// The pool of the test database.
    pub fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// The pool of the consumer's database: its own if [`HarnessBuilder::separate_consumer_database`],
    /// otherwise [`Harness::pool`].
    pub fn consumer_pool(&self) -> &PgPool {
        self.consumer_db.as_ref().map_or(self.db.pool(), TestDb::pool)
    }

    /// The consumer name (its inbox rows are scoped by it).
    pub fn consumer_name(&self) -> &str {
        &self.consumer_name
    }

    /// An [`Outbox`] to enqueue with.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// The broker environment (for more queues or exchanges, deleted at the end).
    pub fn broker(&self) -> &TestBroker {
        &self.broker
    }

    /// The exchange the relay publishes to.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The consumer's queue.
    pub fn queue(&self) -> &str {
        self.topology.queues.first().map_or("", String::as_str)
    }

    /// The consumer's queues and dead letters.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The recorder's queue (bound like the consumer's queue).
    pub fn recorder_queue(&self) -> &str {
        &self.record_queue
    }

    /// What the broker delivered (a queue of its own, bound like the consumer's).
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The relay's publisher: queue faults on it with [`FaultyPublisher::inject`].
    pub fn faults(&self) -> &HarnessPublisher {
        &self.publisher
    }

    /// The proxy between the relay and the broker, if [`HarnessBuilder::relay_through_proxy`].
    pub fn relay_proxy(&self) -> Option<&ChaosProxy> {
        self.relay_proxy.as_ref()
    }

    /// The proxy between the consumer and the broker, if [`HarnessBuilder::consumer_through_proxy`].
    pub fn consumer_proxy(&self) -> Option<&ChaosProxy> {
        self.consumer_proxy.as_ref()
    }

    /// The AMQP connection name of the relay's publisher, for [`crate::close_connections_named`].
    pub fn relay_connection_name(&self) -> &str {
        &self.relay_connection
    }

    /// The AMQP connection name of the consumer, for [`crate::close_connections_named`].
    pub fn consumer_connection_name(&self) -> &str {
        &self.consumer_connection
    }

    /// A relay builder with the harness's settings and `publisher`, for more relays of the test's
    /// own (the test owns their handles).
    pub fn relay_builder_with<P: Publisher>(&self, publisher: P) -> RelayBuilder<P> {
        outbox_relay::Relay::builder(self.db().connect_options().clone(), publisher)
            .exchange(&self.exchange)
            .declare_exchange(false)
            .lease(Duration::from_secs(3))
            .confirm_timeout(Duration::from_secs(2))
            .poll_interval(Duration::from_millis(200))
            .shutdown_deadline(Duration::from_secs(5))
            .retry_policy(
                RetryPolicy::default().initial_delay(Duration::from_millis(100)).max_delay(Duration::from_secs(1)),
            )
    }

    /// A publisher to the harness's broker (through the relay proxy, if any), for
    /// [`Harness::relay_builder_with`].
    pub fn new_publisher(&self) -> AmqpPublisher {
        AmqpPublisher::builder(self.relay_url.clone()).connect_timeout(Duration::from_secs(2)).build()
    }

    /// Starts the relay (after stopping the one running, if any).
    ///
    /// # Errors
    /// If the relay's settings are invalid, or the previous relay had failed.
    pub async fn start_relay(&mut self) -> Result<()> {
        self.start_relay_with(|b| b).await
    }

    /// Starts the relay with `configure` applied after the harness's settings, for example
    /// `|b| b.crash_at(CrashPoint::AfterClaim)` (after stopping the one running, if any).
    ///
    /// # Errors
    /// If the relay's settings are invalid, or the previous relay had failed.
    pub async fn start_relay_with(
        &mut self,
        configure: impl FnOnce(RelayBuilder<HarnessPublisher>) -> RelayBuilder<HarnessPublisher>,
    ) -> Result<()> {
        self.stop_relay().await?;
        let builder = configure((self.relay_config)(self.relay_builder_with(self.publisher.clone())));
        self.relay.0 = Some(builder.build()?.spawn());
        Ok(())
    }

    /// The running relay's handle.
    pub fn relay_handle(&self) -> Option<&RelayHandle> {
        self.relay.0.as_ref()
    }

    /// Shuts the relay down gracefully (nothing to do if none runs).
    ///
    /// # Errors
    /// The relay's error, if it had failed or stopped at a crash point.
    pub async fn stop_relay(&mut self) -> Result<()> {
        match self.relay.0.take() {
            Some(h) if !h.is_finished() => Ok(h.shutdown().await?),
            _ => Ok(()),
        }
    }

    /// Stops the relay at once, as if its process died: its claims stay until their lease expires.
    pub fn kill_relay(&mut self) {
        if let Some(h) = self.relay.0.take() {
            h.abort();
        }
    }

    /// Waits for the relay to end on its own (at an armed crash point) and returns how it ended;
    /// `None` if no relay runs.
    pub async fn join_relay(&mut self) -> Option<outbox_relay::Result<()>> {
        Some(self.relay.0.take()?.join().await)
    }

    /// Starts the consumer (after killing the one running, if any). Nothing happens without
    /// [`HarnessBuilder::consumer`].
    ///
    /// # Errors
    /// If the runner cannot be built.
    pub fn start_consumer(&mut self) -> Result<()> {
        self.spawn_consumer(None)
    }

    /// Starts the consumer with a crash point armed (after killing the one running, if any).
    ///
    /// # Errors
    /// If the runner cannot be built.
    #[cfg(feature = "fail-points")]
    pub fn start_consumer_crashing_at(&mut self, point: outbox_consumer::CrashPoint) -> Result<()> {
        self.spawn_consumer(Some(point))
    }

    fn spawn_consumer(&mut self, crash: Option<ConsumerCrash>) -> Result<()> {
        let Some(factory) = self.consumer_factory.clone() else { return Ok(()) };
        self.kill_consumer();
        let url = self.consumer_proxy.as_ref().map_or_else(crate::amqp_url, |p| via(&crate::amqp_url(), p.addr()));
        let start = ConsumerStart {
            pool: self.consumer_pool().clone(),
            name: self.consumer_name.clone(),
            url,
            connection_name: self.consumer_connection.clone(),
            topology: self.topology.clone(),
            crash,
        };
        self.consumer.0 = Some(factory(start)?);
        Ok(())
    }

    /// The running consumer's handle (for its [`outbox_consumer::RunnerStats`]).
    pub fn consumer_handle(&self) -> Option<&RunnerHandle> {
        self.consumer.0.as_ref()
    }

    /// Shuts the consumer down gracefully (nothing to do if none runs).
    ///
    /// # Errors
    /// The runner's error, if it had failed or stopped at a crash point.
    pub async fn stop_consumer(&mut self) -> Result<()> {
        match self.consumer.0.take() {
            Some(h) if !h.is_finished() => Ok(h.shutdown().await?),
            _ => Ok(()),
        }
    }

    /// Stops the consumer at once, as if its process died: unacked deliveries come back.
    pub fn kill_consumer(&mut self) {
        if let Some(h) = self.consumer.0.take() {
            h.abort();
        }
    }

    /// Waits for the consumer to end on its own (at an armed crash point); `None` if none runs.
    pub async fn join_consumer(&mut self) -> Option<outbox_consumer::Result<()>> {
        Some(self.consumer.0.take()?.join().await)
    }

    /// Outbox rows with `status` (from [`outbox_producer::admin::stats`]).
    ///
    /// # Errors
    /// A database error.
    pub async fn count_status(&self, status: Status) -> Result<i64> {
        let stats = outbox_producer::admin::stats(self.pool()).await?;
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
            (self.count_status(Status::Pending).await.ok()? == 0).then_some(())
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
            let ids: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM outbox_events WHERE status = 'published'")
                .fetch_all(self.pool())
                .await
                .ok()?;
            self.recorder.all_delivered(ids).ok()
        })
        .await
    }

    /// A [`Reconciliation`] over the outbox, the recorder and (with a consumer) its inbox; add the
    /// business query and the effects query, then `run()`.
    pub fn reconcile(&self) -> Reconciliation<'_> {
        let r = Reconciliation::new(self.pool()).broker(&self.recorder);
        if self.consumer_factory.is_some() { r.inbox(self.consumer_pool(), self.consumer_name.clone()) } else { r }
    }

    /// Stops the relay and the consumer gracefully, then deletes the databases, queues and
    /// exchanges.
    ///
    /// # Errors
    /// The first failure; everything is still torn down.
    pub async fn close(mut self) -> Result<()> {
        let relay = self.stop_relay().await;
        let consumer = self.stop_consumer().await;
        let Self { recorder, relay_proxy, consumer_proxy, broker, consumer_db, db, .. } = self;
        drop((recorder, relay_proxy, consumer_proxy));
        let broker = broker.close().await;
        let consumer_db = match consumer_db {
            Some(d) => d.close().await,
            None => Ok(()),
        };
        let db = db.close().await;
        relay.and(consumer).and(broker).and(consumer_db).and(db)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_url_keeps_credentials_and_vhost() {
        let addr: SocketAddr = "127.0.0.1:40001".parse().expect("addr");
        assert_eq!(via("amqp://guest:guest@127.0.0.1:5672/%2f", addr), "amqp://guest:guest@127.0.0.1:40001/%2f");
        assert_eq!(via("amqp://localhost/%2f", addr), "amqp://127.0.0.1:40001/%2f");
        assert_eq!(authority("amqp://u:p@rabbit:5673"), "rabbit:5673");
    }
}
