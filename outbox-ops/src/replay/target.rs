//! Where a replay sends its events: the exchange and routing the relay publishes with (every
//! consumer bound there sees them again), or a named exchange and routing key, or one queue (so
//! only the consumer of that queue sees them). Recorded in the job, so that a resumed job sends
//! the rest where it sent the first.

use serde::{Deserialize, Serialize};

/// How a replayed event's routing key is chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "by")]
#[non_exhaustive]
pub enum ReplayRouting {
    /// The event type, as the relay's default routing.
    EventType,
    /// `<prefix><n>` by a stable hash of the entity key, as the relay's `Partitioned` routing.
    Partitions {
        /// How many partitions.
        count: u32,
        /// The routing keys' prefix (`partition.`).
        prefix: String,
    },
    /// One routing key for every event (for a queue: its name, on the default exchange).
    Key {
        /// The routing key.
        key: String,
    },
    /// A routing strategy of the application's, which the process running the job must be given.
    Custom,
}

/// Where a replay job's events go.
///
/// ```
/// use outbox_ops::replay::{ReplayRouting, ReplayTarget};
///
/// // Only the new read model's queue sees the replay.
/// let target = ReplayTarget::queue("read-model.orders");
/// assert_eq!(target.exchange, "");
/// assert_eq!(target.routing, ReplayRouting::Key { key: "read-model.orders".into() });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReplayTarget {
    /// The exchange (`""`: the default exchange, which routes to the queue named by the key).
    pub exchange: String,
    /// How each event's routing key is chosen.
    pub routing: ReplayRouting,
}

impl ReplayTarget {
    /// The exchange the relay publishes to, routed by event type as the relay routes by default.
    pub fn exchange(exchange: impl Into<String>) -> Self {
        Self { exchange: exchange.into(), routing: ReplayRouting::EventType }
    }

    /// The exchange the relay publishes to, in `count` partitions `<prefix><n>` as the relay's
    /// `Partitioned` routing.
    pub fn partitioned(exchange: impl Into<String>, count: u32, prefix: impl Into<String>) -> Self {
        Self { exchange: exchange.into(), routing: ReplayRouting::Partitions { count, prefix: prefix.into() } }
    }

    /// `exchange` with the fixed routing key `key`.
    pub fn routing_key(exchange: impl Into<String>, key: impl Into<String>) -> Self {
        Self { exchange: exchange.into(), routing: ReplayRouting::Key { key: key.into() } }
    }

    /// Straight into one queue (the default exchange, the queue's name as the key).
    pub fn queue(queue: impl Into<String>) -> Self {
        Self::routing_key("", queue)
    }

    /// `exchange` with the routing strategy the process running the job is given.
    pub fn custom(exchange: impl Into<String>) -> Self {
        Self { exchange: exchange.into(), routing: ReplayRouting::Custom }
    }
}

impl std::fmt::Display for ReplayTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.exchange[..], &self.routing) {
            ("", ReplayRouting::Key { key }) => write!(f, "queue {key}"),
            (exchange, ReplayRouting::EventType) => write!(f, "exchange {exchange}, routed by event type"),
            (exchange, ReplayRouting::Partitions { count, prefix }) => {
                write!(f, "exchange {exchange}, {count} partitions {prefix}<n>")
            }
            (exchange, ReplayRouting::Key { key }) => write!(f, "exchange {exchange}, routing key {key}"),
            (exchange, ReplayRouting::Custom) => write!(f, "exchange {exchange}, the application's routing"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_reads_back_as_written() {
        for target in [
            ReplayTarget::exchange("orders"),
            ReplayTarget::partitioned("orders", 4, "partition."),
            ReplayTarget::queue("read-model"),
            ReplayTarget::custom("orders"),
        ] {
            let json = serde_json::to_value(&target).expect("json");
            assert_eq!(serde_json::from_value::<ReplayTarget>(json).expect("back"), target);
        }
        let json = serde_json::to_value(ReplayTarget::partitioned("orders", 4, "p.")).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"exchange": "orders", "routing": {"by": "partitions", "count": 4, "prefix": "p."}})
        );
        assert_eq!(ReplayTarget::queue("q").to_string(), "queue q");
    }
}
