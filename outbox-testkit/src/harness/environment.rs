//! [`Harness`]: the environment a test gets, its accessors and its teardown.

use outbox_inbox::{RunnerHandle, Topology};
use outbox_producer::Outbox;
use outbox_relayer::RelayHandle;
use sqlx::PgPool;

use super::consumer_factory::ConsumerFactory;
use super::guard::Guard;
use super::relay_config::{HarnessPublisher, RelayConfig};
use crate::{ChaosProxy, Reconciliation, Recorder, RecorderDeliveries, Result, TestBroker, TestDb};

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
///
/// [`HarnessBuilder::relay`]: crate::HarnessBuilder::relay
pub struct Harness {
    // Declared first: dropped (tasks aborted) before the database and broker go away.
    pub(super) relay: Guard<RelayHandle>,
    pub(super) consumer: Guard<RunnerHandle>,
    pub(super) recorder: Recorder,
    pub(super) relay_proxy: Option<ChaosProxy>,
    pub(super) consumer_proxy: Option<ChaosProxy>,
    pub(super) publisher: HarnessPublisher,
    pub(super) relay_config: RelayConfig,
    pub(super) relay_url: String,
    pub(super) relay_connection: String,
    pub(super) consumer_factory: Option<ConsumerFactory>,
    pub(super) consumer_name: String,
    pub(super) consumer_connection: String,
    pub(super) topology: Topology,
    pub(super) record_queue: String,
    pub(super) exchange: String,
    pub(super) outbox: Outbox,
    pub(super) broker: TestBroker,
    pub(super) consumer_db: Option<TestDb>,
    pub(super) db: TestDb,
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

    /// The pool of the consumer's database: its own if
    /// [`HarnessBuilder::separate_consumer_database`](crate::HarnessBuilder::separate_consumer_database),
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

    /// The relay's publisher: queue faults on it with [`FaultyPublisher::inject`](crate::FaultyPublisher::inject).
    pub fn faults(&self) -> &HarnessPublisher {
        &self.publisher
    }

    /// The proxy between the relay and the broker, if
    /// [`HarnessBuilder::relay_through_proxy`](crate::HarnessBuilder::relay_through_proxy).
    pub fn relay_proxy(&self) -> Option<&ChaosProxy> {
        self.relay_proxy.as_ref()
    }

    /// The proxy between the consumer and the broker, if
    /// [`HarnessBuilder::consumer_through_proxy`](crate::HarnessBuilder::consumer_through_proxy).
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
