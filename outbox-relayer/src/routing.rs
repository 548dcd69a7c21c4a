//! Which routing key an event is published with.

use outbox_types::{Event, partition_for};

/// Chooses the routing key of each event. The exchange is the relay's.
///
/// ```
/// use outbox_types::Event;
/// use outbox_relayer::RoutingStrategy;
///
/// /// Routes by tenant header, falling back to the event type.
/// struct ByTenant;
///
/// impl RoutingStrategy for ByTenant {
///     fn routing_key(&self, event: &Event) -> String {
///         match event.headers.get("tenant").and_then(|v| v.as_str()) {
///             Some(tenant) => format!("{tenant}.{}", event.event_type),
///             None => event.event_type.clone(),
///         }
///     }
/// }
/// ```
pub trait RoutingStrategy: Send + Sync + 'static {
    /// The routing key for `event`.
    fn routing_key(&self, event: &Event) -> String;
}

/// The default: the routing key is the event type (`order.placed`), for topic exchanges.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByEventType;

impl RoutingStrategy for ByEventType {
    fn routing_key(&self, event: &Event) -> String {
        event.event_type.clone()
    }
}

/// Spreads entities over `partitions` routing keys `<prefix><n>` by a stable hash of the entity key
/// ([`outbox_types::partition_for`]), so that all events of one entity land in the same partition
/// queue. Bind one queue per partition, each with a single active consumer, and entities are
/// consumed in parallel yet each in order. Unordered events are spread by their event id.
#[derive(Debug, Clone)]
pub struct Partitioned {
    partitions: u32,
    prefix: String,
}

impl Partitioned {
    /// `partitions` routing keys `partition.0` … `partition.{n-1}`.
    pub fn new(partitions: u32) -> Self {
        Self { partitions: partitions.max(1), prefix: "partition.".to_owned() }
    }

    /// Sets the routing key prefix. Defaults to `partition.`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The routing key of partition `n`.
    pub fn key_of(&self, n: u32) -> String {
        format!("{}{n}", self.prefix)
    }
}

impl RoutingStrategy for Partitioned {
    fn routing_key(&self, event: &Event) -> String {
        let n = match &event.entity {
            Some(entity) => partition_for(&entity.key, self.partitions),
            None => partition_for(&event.id.to_string(), self.partitions),
        };
        self.key_of(n)
    }
}
