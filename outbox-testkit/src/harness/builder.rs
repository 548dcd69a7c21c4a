//! [`HarnessBuilder`]: the test's choices, and [`HarnessBuilder::start`], which creates the
//! databases, exchange and queues and starts the recorder, the consumer and the relay.

use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::{InboxRequest, InboxRunnerBuilder, Topology};
use outbox_producer::Outbox;
use outbox_relayer::{AmqpPublisher, AmqpPublisherBuilder, RelayBuilder};

use super::consumer_factory::{ConsumerFactory, factory};
use super::environment::Harness;
use super::guard::Guard;
use super::relay_config::{HarnessPublisher, RelayConfig};
use super::url::{broker_addr, via};
use crate::{ChaosProxy, FaultyPublisher, Recorder, Result, TestBroker, TestDb};

type PublisherConfig = Arc<dyn Fn(AmqpPublisherBuilder) -> AmqpPublisherBuilder + Send + Sync>;

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
    /// [`InboxRunner`](outbox_inbox::InboxRunner). Defaults to no consumer.
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
        self.consumer = Some(factory(handler, configure));
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
        let (exchange, record_queue, topology) = declare(&broker, &self.bindings).await?;
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
            .build()?,
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

/// Declares the topic exchange, the recorder's queue and the consumer's queue with its dead
/// letters, each bound with `bindings`; returns the exchange, the recorder's queue and the
/// consumer's topology.
async fn declare(broker: &TestBroker, bindings: &[String]) -> Result<(String, String, Topology)> {
    let exchange = broker.declare_exchange("events", lapin::ExchangeKind::Topic).await?;
    let bindings: Vec<&str> = bindings.iter().map(String::as_str).collect();
    let record_queue = broker.declare_queue("recorded").await?;
    for key in &bindings {
        broker.bind(&record_queue, &exchange, key).await?;
    }
    let queue = broker.name("consumer");
    let topology = outbox_inbox::declare_queue(broker.channel(), &exchange, &queue, &bindings).await?;
    for q in topology.queues.iter().chain([&topology.dead_letter_queue]) {
        broker.remember_queue(q);
    }
    broker.remember_exchange(&topology.dead_letter_exchange);
    Ok((exchange, record_queue, topology))
}
