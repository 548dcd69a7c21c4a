use std::future::Future;
use std::pin::Pin;

use crate::wire::WireMessage;
use crate::{EventId, FailureKind};

/// One message for the broker: where it goes and what it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingMessage {
    /// The event it carries, for logs and outcomes.
    pub event_id: EventId,
    /// The exchange to publish to (`""` is the default exchange).
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
    /// Properties, headers and body, as the wire contract encodes the event.
    pub message: WireMessage,
}

/// Why a message was not confirmed. `reason` names the cause (reply codes, error classes), never
/// the message content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishFailure {
    /// The class of failure, which decides retry or quarantine.
    pub kind: FailureKind,
    /// A short description for operators.
    pub reason: String,
}

impl PublishFailure {
    /// A failure of `kind` with `reason`.
    pub fn new(kind: FailureKind, reason: impl Into<String>) -> Self {
        Self { kind, reason: reason.into() }
    }
}

/// The outcome of one published message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The broker confirmed the message (and did not return it as unroutable).
    Confirmed,
    /// The message was not confirmed.
    Failed(PublishFailure),
}

/// The broker's answer for one message, resolved when its confirm (or failure) arrives.
pub type ConfirmFuture = Pin<Box<dyn Future<Output = PublishOutcome> + Send + 'static>>;

/// Sends messages to a broker with publisher confirms.
///
/// [`Publisher::publish`] sends the whole batch (pipelined: many messages in flight) and returns
/// one [`ConfirmFuture`] per message, in order. The caller decides how long to wait for them; a
/// confirm it stops waiting for counts as "outcome unknown" and the message is sent again later
/// with the same event id.
///
/// ```
/// use outbox_types::{ConfirmFuture, OutgoingMessage, PublishOutcome, Publisher};
///
/// /// Confirms everything at once: a stand-in for unit tests of code that takes a publisher.
/// struct AlwaysConfirm;
///
/// impl Publisher for AlwaysConfirm {
///     fn publish(&self, batch: Vec<OutgoingMessage>) -> impl Future<Output = Vec<ConfirmFuture>> + Send {
///         async move {
///             batch
///                 .into_iter()
///                 .map(|_| Box::pin(async { PublishOutcome::Confirmed }) as ConfirmFuture)
///                 .collect()
///         }
///     }
/// }
/// ```
pub trait Publisher: Send + Sync + 'static {
    /// Sends `batch` and returns one confirm future per message, in the same order.
    fn publish(&self, batch: Vec<OutgoingMessage>) -> impl Future<Output = Vec<ConfirmFuture>> + Send;

    /// Makes sure `exchange` exists (declared durable, of `kind`), now and after every reconnect.
    /// The default does nothing, for publishers that have no such notion.
    fn declare_exchange(
        &self,
        exchange: &str,
        kind: ExchangeKind,
    ) -> impl Future<Output = Result<(), PublishFailure>> + Send {
        let _ = (exchange, kind);
        async { Ok(()) }
    }

    /// Makes sure the publisher can send: opens its connection now if it has none, or says why it
    /// cannot (the failure's kind and reason as classified for a connection: `auth` when the broker
    /// refused the credentials). The relay calls it while paused by an outage, before it claims
    /// again. The default says yes, for publishers that have no connection.
    fn connect(&self) -> impl Future<Output = Result<(), PublishFailure>> + Send {
        async { Ok(()) }
    }
}

/// The type of an AMQP exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExchangeKind {
    /// Routes by exact routing key.
    Direct,
    /// Routes by routing-key pattern (`order.*`, `#`).
    Topic,
    /// Routes to every bound queue.
    Fanout,
    /// Routes by header values.
    Headers,
}

/// A stable partition of an entity key: FNV-1a (64 bit) of its bytes, modulo `partitions`. The same
/// key maps to the same partition in every process and every release.
///
/// ```
/// assert_eq!(outbox_types::partition_for("order-42", 8), outbox_types::partition_for("order-42", 8));
/// assert!(outbox_types::partition_for("order-42", 8) < 8);
/// ```
pub fn partition_for(key: &str, partitions: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(partitions.max(1))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_stable_and_spread() {
        // Fixed values: changing the hash would move every entity to another partition.
        assert_eq!(partition_for("", 1024), (0xcbf2_9ce4_8422_2325u64 % 1024) as u32);
        assert_eq!(partition_for("a", 1_000_000), (0xaf63_dc4c_8601_ec8cu64 % 1_000_000) as u32);
        let mut counts = [0u32; 4];
        for i in 0..4000 {
            counts[partition_for(&format!("order-{i}"), 4) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "uneven spread {counts:?}");
        assert_eq!(partition_for("x", 0), 0);
    }
}
