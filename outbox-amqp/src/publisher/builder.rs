//! [`AmqpPublisherBuilder`]: every setting of a publisher with its default.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::publish::AmqpPublisher;
use super::shared::{Inner, State};
use crate::{Error, Nodes, Topology};

impl AmqpPublisher {
    /// Starts a builder for the broker at `url` (`amqp://` or `amqps://`).
    pub fn builder(url: impl Into<String>) -> AmqpPublisherBuilder {
        AmqpPublisherBuilder::new(url.into())
    }

    /// Declares `topology` on every channel opened from now on, and whenever the relay declares
    /// its exchange (see [`AmqpPublisherBuilder::topology`]).
    pub fn declare_on_connect(&self, topology: &Topology) {
        let mut topologies = self.inner.topologies.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !topologies.contains(topology) {
            topologies.push(topology.clone());
            self.inner.topologies_pending.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Builder of an [`AmqpPublisher`]. Its defaults are the `DEFAULT_*` constants of this type.
#[derive(Debug, Clone)]
pub struct AmqpPublisherBuilder {
    nodes: Nodes,
    connection_name: String,
    connect_timeout: Duration,
    max_message_bytes: usize,
    topologies: Vec<Topology>,
}

impl AmqpPublisherBuilder {
    /// The connection name shown in RabbitMQ's management UI unless set.
    pub const DEFAULT_CONNECTION_NAME: &'static str = "outbox-relay";
    /// How long one connection attempt may take unless set.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The largest message body unless set: RabbitMQ's default `max_message_size`, 128 MiB.
    pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

    fn new(url: String) -> Self {
        Self {
            nodes: Nodes::one(url),
            connection_name: Self::DEFAULT_CONNECTION_NAME.to_owned(),
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            max_message_bytes: Self::DEFAULT_MAX_MESSAGE_BYTES,
            topologies: Vec::new(),
        }
    }

    /// Adds another node of the same broker (a cluster's node, or another address of it). Every
    /// connection attempt tries the nodes in turn, starting after the node last connected to.
    #[must_use]
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.nodes.push(url);
        self
    }

    /// Adds every node of `nodes` (see [`AmqpPublisherBuilder::node`]).
    #[must_use]
    pub fn nodes(mut self, nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        for url in nodes {
            self.nodes.push(url);
        }
        self
    }

    /// Sets the connection name shown in RabbitMQ's management UI. Defaults to `outbox-relay`.
    #[must_use]
    pub fn connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = name.into();
        self
    }

    /// Sets how long one connection attempt may take. Defaults to 5 s.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the largest message body the broker accepts (its `max_message_size`); a larger event
    /// is rejected without being sent, and quarantined. Defaults to 128 MiB, RabbitMQ's default.
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Declares `topology` (its exchange, queues, bindings and dead letters) on every channel the
    /// publisher opens, so a consumer's queue exists before the first event is published to it,
    /// whichever side starts first. `RelayBuilder::topology` in `outbox-relayer` calls this for you.
    #[must_use]
    pub fn topology(mut self, topology: &Topology) -> Self {
        self.topologies.push(topology.clone());
        self
    }

    /// Builds the publisher after checking the URL, so that a malformed one fails here instead of
    /// on every connection attempt. It connects on first use (or on
    /// [`Publisher::connect`](outbox_types::Publisher::connect)).
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] with a reason that does not quote the URL (and names the node's
    /// place when there are several).
    pub fn build(self) -> Result<AmqpPublisher, Error> {
        self.nodes.check()?;
        Ok(self.build_unchecked())
    }

    /// Builds the publisher without checking the URL: a malformed one shows only as a failure to
    /// connect, on every attempt. [`AmqpPublisherBuilder::build`] refuses it at once.
    pub fn build_unchecked(self) -> AmqpPublisher {
        AmqpPublisher {
            inner: Arc::new(Inner {
                nodes: self.nodes,
                connection_name: self.connection_name,
                connect_timeout: self.connect_timeout,
                max_message_bytes: self.max_message_bytes,
                topologies: std::sync::Mutex::new(self.topologies),
                topologies_pending: std::sync::atomic::AtomicBool::new(false),
                state: Mutex::new(State::default()),
            }),
        }
    }
}
