//! Declaring what the relay publishes to and what a consumer reads: the exchange, the consumer's
//! queues, their dead-letter exchange and queue, and ordered partitions.

use lapin::Channel;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use outbox_types::ExchangeKind;

use crate::Error;

/// The queues a consumer reads and where its dead letters go.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Topology {
    /// Queues to consume.
    pub queues: Vec<String>,
    /// Exchange the runner publishes dead letters to (fanout).
    pub dead_letter_exchange: String,
    /// Durable queue bound to the dead-letter exchange.
    pub dead_letter_queue: String,
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

async fn declare_dead_letters(channel: &Channel, base: &str, kind: QueueType) -> Result<(String, String), Error> {
    let dlx = format!("{base}.dlx");
    let dlq = format!("{base}.dead");
    declare_exchange(channel, &dlx, ExchangeKind::Fanout).await?;
    // Nothing consumes the dead-letter queue but an operator: no delivery limit there.
    durable_queue(channel, &dlq, kind.arguments(false)).await?;
    bind(channel, &dlq, &dlx, "").await?;
    Ok((dlx, dlq))
}

/// Declares the durable queue `queue`, bound to `exchange` with each of `bindings`, plus its
/// dead-letter exchange `<queue>.dlx` and queue `<queue>.dead`. The queue's own
/// `x-dead-letter-exchange` points there too, so a message the broker rejects (for example by TTL)
/// is kept as well.
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
    let (dlx, dlq) = declare_dead_letters(channel, queue, kind).await?;
    let mut args = kind.arguments(true);
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(dlx.as_str().into()));
    durable_queue(channel, queue, args).await?;
    for key in bindings {
        bind(channel, queue, exchange, key).await?;
    }
    Ok(Topology { queues: vec![queue.to_owned()], dead_letter_exchange: dlx, dead_letter_queue: dlq })
}

/// Declares `partitions` durable queues `<base>.<n>`, each bound to `exchange` with the routing key
/// `<prefix><n>` of the relay's `Partitioned` routing (prefix `partition.` by default) and each with
/// `x-single-active-consumer`, plus one dead-letter exchange and queue for all of them.
///
/// Several consumer processes can then consume every partition queue: RabbitMQ delivers each queue
/// to one consumer at a time and fails over when it goes, so each entity's events are handled in
/// order while the partitions are spread over the processes. No broker plugin is needed.
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
    let (dlx, dlq) = declare_dead_letters(channel, base, kind).await?;
    let mut queues = Vec::new();
    for n in 0..partitions {
        let queue = format!("{base}.{n}");
        let mut args = kind.arguments(true);
        args.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(dlx.as_str().into()));
        durable_queue(channel, &queue, args).await?;
        bind(channel, &queue, exchange, &format!("{prefix}{n}")).await?;
        queues.push(queue);
    }
    Ok(Topology { queues, dead_letter_exchange: dlx, dead_letter_queue: dlq })
}
