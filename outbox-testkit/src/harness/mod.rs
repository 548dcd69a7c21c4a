//! One call that gives a test everything: an isolated database, exchange and queues, a relay and a
//! consumer wired to them, a recorder at the broker, fault injection, and teardown.
//!
//! This file holds [`Harness`], its accessors and its teardown; `builder.rs` the
//! [`HarnessBuilder`] and the start, `relay.rs` and `consumer.rs` the relay's and the consumer's
//! life cycles, `wait.rs` the waits on the outbox and the recorder, `guard.rs` the guard that
//! aborts their tasks, `url.rs` the broker's address behind a proxy.

mod builder;
mod consumer;
mod guard;
mod relay;
mod url;
mod wait;

use outbox_consumer::{RunnerHandle, Topology};
use outbox_producer::Outbox;
use outbox_relay::{AmqpPublisher, RelayHandle};
use sqlx::PgPool;

pub use builder::HarnessBuilder;
use consumer::ConsumerFactory;
use guard::Guard;
use relay::RelayConfig;

use crate::{ChaosProxy, FaultyPublisher, Reconciliation, Recorder, RecorderDeliveries, Result, TestBroker, TestDb};

/// The publisher of the harness's relay: the real one, wrapped so that a test can inject faults.
pub type HarnessPublisher = FaultyPublisher<AmqpPublisher>;

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

    /// A [`Reconciliation`] over the outbox, the recorder and (with a consumer) its inbox; add the
    /// business query and the effects query, then `run()`.
    pub fn reconcile(&self) -> Reconciliation {
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
