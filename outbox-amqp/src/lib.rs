//! RabbitMQ for the transactional outbox: every line that knows lapin, the AMQP client.
//!
//! - Wire contract v1 on AMQP 0-9-1: [`to_properties`] and [`to_wire`] map the broker-neutral
//!   [`WireMessage`](outbox_types::wire::WireMessage) of `outbox-types` onto lapin's properties and
//!   headers and back.
//! - [`AmqpPublisher`]: the relay's [`Publisher`](outbox_types::Publisher), with publisher confirms,
//!   `mandatory`, reconnection with back-off and failures classified for the relay.
//! - [`Subscription`], [`Delivery`] and [`DeadLetters`]: what the consumer runner reads, acks,
//!   requeues and dead-letters.
//! - [`declare_exchange`], [`declare_queue`] and [`declare_partitions`]: the topology.
//! - [`Nodes`]: the URLs of a cluster's nodes; the publisher and the subscription connect to the
//!   next node that answers when their connection drops.
//!
//! A second broker would be one more crate beside this one, implementing the same `Publisher`.
//!
//! ```no_run
//! use outbox_amqp::{connect, declare_partitions};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), outbox_amqp::Error> {
//! let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
//! let connection = connect(url, "shipping-setup", Duration::from_secs(5)).await?;
//! let channel = connection.create_channel().await?;
//! // Four ordered partitions of the exchange `orders`, with their dead letters.
//! let topology = declare_partitions(&channel, "orders", "shipping.orders", "partition.", 4).await?;
//! assert_eq!(topology.queues.len(), 4);
//! # Ok(()) }
//! ```

mod acks;
mod classify;
mod connection;
mod dead_letters;
mod delivery;
mod error;
mod nodes;
mod properties;
mod publisher;
mod subscription;
mod topology;
mod url;

pub use connection::{CLOSE_TIMEOUT, close, connect};
pub use dead_letters::{DeadLetters, HEADER_DEAD_LETTER_DETAIL, HEADER_DEAD_LETTER_QUEUE, HEADER_DEAD_LETTER_REASON};
pub use delivery::Delivery;
pub use error::Error;
/// The AMQP client underneath, for what this crate does not wrap (a channel of one's own).
pub use lapin;
pub use nodes::Nodes;
pub use properties::{from_table, to_properties, to_table, to_wire};
pub use publisher::{AmqpPublisher, AmqpPublisherBuilder};
pub use subscription::Subscription;
pub use topology::{
    Layout, QUORUM_DELIVERY_LIMIT, QueueType, Topology, declare_exchange, declare_partitions, declare_partitions_as,
    declare_queue, declare_queue_as,
};
pub use url::check_url;
