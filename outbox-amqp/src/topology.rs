//! What the relay publishes to and what a consumer reads, described once ([`Topology`]) and
//! declared by whichever side starts first: the exchange, the consumer's queues and their bindings
//! (one queue, or ordered partitions), and the dead-letter exchange and queue.

use lapin::Channel;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use outbox_types::ExchangeKind;

use crate::Error;

/// Everything the relay and a consumer must agree on: the exchange (durable, topic), the
/// consumer's queues and how events reach them, and where its dead letters go.
///
/// Build it once and hand it to both sides: the relay (`RelayBuilder::topology` in
/// `outbox-relayer`) publishes to its exchange with the routing it implies and declares all of it
/// on every connection; the consumer (`InboxRunnerBuilder::topology` in `outbox-inbox`)
/// consumes its queues, dead-letters to its exchange and declares all of it on every connection.
/// So either may start first, and no event is returned as unroutable because the consumer's queue
/// did not exist yet. Declaring is idempotent; a queue already declared with other arguments (for
/// example another [`QueueType`]) is refused by the broker.
///
/// ```
/// use outbox_amqp::Topology;
///
/// // One queue for every event of the exchange `orders`.
/// let shipping = Topology::queue("orders", "shipping.orders");
/// assert_eq!(shipping.queues, ["shipping.orders"]);
/// assert_eq!(shipping.dead_letter_queue, "shipping.orders.dead");
///
/// // Four ordered partitions: the relay spreads entities over `partition.0` .. `partition.3`.
/// let partitions = Topology::partitioned("orders", "billing.orders", 4);
/// assert_eq!(partitions.queues[3], "billing.orders.3");
/// assert_eq!(partitions.partitions(), Some(("partition.", 4)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Topology {
    /// The exchange the relay publishes to (durable, topic).
    pub exchange: String,
    /// Queues to consume.
    pub queues: Vec<String>,
    /// Exchange the runner publishes dead letters to (fanout).
    pub dead_letter_exchange: String,
    /// Durable queue bound to the dead-letter exchange.
    pub dead_letter_queue: String,
    /// The type of every queue, the dead-letter queue included.
    pub queue_type: QueueType,
    /// How events reach the queues.
    pub layout: Layout,
}

/// How a [`Topology`]'s events reach its queues.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// One queue, bound with each of these routing-key patterns (`#`: every event). The relay
    /// routes by event type.
    Queue {
        /// The queue's bindings.
        bindings: Vec<String>,
    },
    /// Queue `n` bound with `<prefix><n>`, each with a single active consumer. The relay routes
    /// each entity to one partition by a stable hash of its key, so several consumer processes
    /// share the partitions while each entity's events are handled in order.
    Partitioned {
        /// The routing key's prefix (`partition.` by default).
        prefix: String,
        /// The number of partitions.
        partitions: u32,
    },
}

/// The kind of queue the topology helpers declare.
///
/// - **Classic** queues live on one node: when that node stops, the queue and its messages are
///   unavailable until it returns. Right for a single node.
/// - **Quorum** queues are replicated over three nodes of a cluster (or all, if fewer) with Raft:
///   a queue stays available, with every confirmed message, while a majority of its replicas run,
///   and a publisher confirm means the majority stored the message. Right for a cluster. They
///   also count redeliveries: a message returned [`QUORUM_DELIVERY_LIMIT`] times (a consumer that
///   crashes on it each time) is dead-lettered by the broker to the queue's dead-letter exchange
///   (with RabbitMQ's `x-death` header instead of the runner's reason headers); the runner's own
///   retry policy gives up long before (8 attempts by default).
///
/// Streams are not offered: a stream keeps messages for any number of readers, with no per-message
/// ack, requeue or dead-lettering, while the runner settles each delivery once. A queue's type is
/// fixed when it is declared: declaring an existing queue with another type fails
/// (`PRECONDITION_FAILED`), so a move to quorum queues declares new ones (see docs/scaling.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum QueueType {
    /// A queue on one node (RabbitMQ's default).
    #[default]
    Classic,
    /// A replicated queue (`x-queue-type = quorum`).
    Quorum,
}

/// How many times a quorum queue delivers a message before the broker dead-letters it
/// (`x-delivery-limit`).
pub const QUORUM_DELIVERY_LIMIT: i64 = 50;

impl QueueType {
    /// The declaration arguments of this queue type, to which a queue's own are added; a queue
    /// that is consumed gets the delivery limit.
    fn arguments(self, consumed: bool) -> FieldTable {
        let mut args = FieldTable::default();
        if self == Self::Quorum {
            args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
            if consumed {
                args.insert("x-delivery-limit".into(), AMQPValue::LongLongInt(QUORUM_DELIVERY_LIMIT));
            }
        }
        args
    }
}

fn lapin_kind(kind: ExchangeKind) -> lapin::ExchangeKind {
    match kind {
        ExchangeKind::Direct => lapin::ExchangeKind::Direct,
        ExchangeKind::Fanout => lapin::ExchangeKind::Fanout,
        ExchangeKind::Headers => lapin::ExchangeKind::Headers,
        _ => lapin::ExchangeKind::Topic,
    }
}

/// Declares the durable exchange `name` of `kind`.
///
/// # Errors
/// The broker's refusal (for example an exchange already declared with another kind).
pub async fn declare_exchange(channel: &Channel, name: &str, kind: ExchangeKind) -> Result<(), Error> {
    let options = ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() };
    channel.exchange_declare(name.into(), lapin_kind(kind), options, FieldTable::default()).await?;
    Ok(())
}

async fn durable_queue(channel: &Channel, queue: &str, args: FieldTable) -> Result<(), Error> {
    let options = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    channel.queue_declare(queue.into(), options, args).await?;
    Ok(())
}

async fn bind(channel: &Channel, queue: &str, exchange: &str, key: &str) -> Result<(), Error> {
    let options = QueueBindOptions::default();
    channel.queue_bind(queue.into(), exchange.into(), key.into(), options, FieldTable::default()).await?;
    Ok(())
}

impl Topology {
    /// The durable queue `queue`, bound to the topic exchange `exchange` with `#` (every event),
    /// with its dead-letter exchange `<queue>.dlx` and queue `<queue>.dead`. The queue's own
    /// `x-dead-letter-exchange` points there too, so a message the broker rejects (for example by
    /// TTL) is kept as well.
    pub fn queue(exchange: impl Into<String>, queue: impl Into<String>) -> Self {
        let queue = queue.into();
        Self {
            exchange: exchange.into(),
            dead_letter_exchange: format!("{queue}.dlx"),
            dead_letter_queue: format!("{queue}.dead"),
            queues: vec![queue],
            queue_type: QueueType::Classic,
            layout: Layout::Queue { bindings: vec!["#".to_owned()] },
        }
    }

    /// `partitions` durable queues `<base>.<n>` (at least one), bound to the topic exchange
    /// `exchange` with the routing keys `partition.<n>` and each with `x-single-active-consumer`,
    /// plus one dead-letter exchange `<base>.dlx` and queue `<base>.dead` for all of them.
    ///
    /// Several consumer processes can then consume every partition queue: RabbitMQ delivers each
    /// queue to one consumer at a time and fails over when it goes, so each entity's events are
    /// handled in order while the partitions are spread over the processes. No broker plugin is
    /// needed.
    pub fn partitioned(exchange: impl Into<String>, base: &str, partitions: u32) -> Self {
        let partitions = partitions.max(1);
        Self {
            exchange: exchange.into(),
            queues: (0..partitions).map(|n| format!("{base}.{n}")).collect(),
            dead_letter_exchange: format!("{base}.dlx"),
            dead_letter_queue: format!("{base}.dead"),
            queue_type: QueueType::Classic,
            layout: Layout::Partitioned { prefix: "partition.".to_owned(), partitions },
        }
    }

    /// Binds the queue with these routing-key patterns in place of `#` (for example
    /// `["order.*"]`). Has no effect on partitions, which are bound by their number.
    #[must_use]
    pub fn bindings(mut self, keys: impl IntoIterator<Item = impl Into<String>>) -> Self {
        if let Layout::Queue { bindings } = &mut self.layout {
            *bindings = keys.into_iter().map(Into::into).collect();
        }
        self
    }

    /// Sets the partitions' routing-key prefix. Defaults to `partition.`. Has no effect on a
    /// single queue.
    #[must_use]
    pub fn partition_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        if let Layout::Partitioned { prefix, .. } = &mut self.layout {
            *prefix = key_prefix.into();
        }
        self
    }

    /// Sets the type of every queue. Defaults to [`QueueType::Classic`]; a cluster wants
    /// [`QueueType::Quorum`].
    #[must_use]
    pub fn queue_type(mut self, kind: QueueType) -> Self {
        self.queue_type = kind;
        self
    }

    /// The partitions' routing-key prefix and number, or `None` for a single queue.
    pub fn partitions(&self) -> Option<(&str, u32)> {
        match &self.layout {
            Layout::Partitioned { prefix, partitions } => Some((prefix, *partitions)),
            Layout::Queue { .. } => None,
        }
    }

    /// Declares all of it on `channel`: the exchange, the dead-letter exchange and queue, every
    /// queue and its bindings. Idempotent.
    ///
    /// # Errors
    /// The broker's refusal (for example a queue already declared with other arguments, or the
    /// exchange with another kind).
    pub async fn declare(&self, channel: &Channel) -> Result<(), Error> {
        declare_exchange(channel, &self.exchange, ExchangeKind::Topic).await?;
        declare_exchange(channel, &self.dead_letter_exchange, ExchangeKind::Fanout).await?;
        // Nothing consumes the dead-letter queue but an operator: no delivery limit there.
        durable_queue(channel, &self.dead_letter_queue, self.queue_type.arguments(false)).await?;
        bind(channel, &self.dead_letter_queue, &self.dead_letter_exchange, "").await?;
        for (n, queue) in self.queues.iter().enumerate() {
            let mut args = self.queue_type.arguments(true);
            args.insert(
                "x-dead-letter-exchange".into(),
                AMQPValue::LongString(self.dead_letter_exchange.as_str().into()),
            );
            match &self.layout {
                Layout::Queue { bindings } => {
                    durable_queue(channel, queue, args).await?;
                    for key in bindings {
                        bind(channel, queue, &self.exchange, key).await?;
                    }
                }
                Layout::Partitioned { prefix, .. } => {
                    args.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
                    durable_queue(channel, queue, args).await?;
                    bind(channel, queue, &self.exchange, &format!("{prefix}{n}")).await?;
                }
            }
        }
        Ok(())
    }
}

/// Declares [`Topology::queue`] with `bindings` in place of `#`, the exchange included.
///
/// # Errors
/// The broker's refusal (for example a queue already declared with other arguments).
pub async fn declare_queue(
    channel: &Channel,
    exchange: &str,
    queue: &str,
    bindings: &[&str],
) -> Result<Topology, Error> {
    declare_queue_as(channel, QueueType::Classic, exchange, queue, bindings).await
}

/// [`declare_queue`] with queues of type `kind`: the queue and its dead-letter queue.
///
/// # Errors
/// The broker's refusal (for example a queue already declared with another type).
pub async fn declare_queue_as(
    channel: &Channel,
    kind: QueueType,
    exchange: &str,
    queue: &str,
    bindings: &[&str],
) -> Result<Topology, Error> {
    let topology = Topology::queue(exchange, queue).bindings(bindings.iter().copied()).queue_type(kind);
    topology.declare(channel).await?;
    Ok(topology)
}

/// Declares [`Topology::partitioned`] with the routing-key prefix `prefix`, the exchange included.
///
/// # Errors
/// The broker's refusal.
pub async fn declare_partitions(
    channel: &Channel,
    exchange: &str,
    base: &str,
    prefix: &str,
    partitions: u32,
) -> Result<Topology, Error> {
    declare_partitions_as(channel, QueueType::Classic, exchange, base, prefix, partitions).await
}

/// [`declare_partitions`] with queues of type `kind`: the partition queues (single active consumer
/// works the same on quorum queues) and the dead-letter queue.
///
/// # Errors
/// The broker's refusal (for example a queue already declared with another type).
pub async fn declare_partitions_as(
    channel: &Channel,
    kind: QueueType,
    exchange: &str,
    base: &str,
    prefix: &str,
    partitions: u32,
) -> Result<Topology, Error> {
    let topology = Topology::partitioned(exchange, base, partitions).partition_prefix(prefix).queue_type(kind);
    topology.declare(channel).await?;
    Ok(topology)
}
