//! The relay of the transactional outbox: publishes the committed rows of `outbox_events` to the
//! broker with publisher confirms, in per-entity order, crash-safe, with any number of instances
//! on one database.
//!
//! A producing service depends on `outbox-producer` to enqueue; the relay runs in the same service
//! ([`Relay::spawn`]) or as the `outbox relay` process, and is the only part that knows a broker.
//!
//! ```no_run
//! use outbox_relayer::{AmqpPublisher, Relay};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! outbox_producer::migrate(&pool).await?;
//! let publisher = AmqpPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f").build()?;
//! let database = pool.connect_options().as_ref().clone();
//! let relay = Relay::builder(database, publisher).exchange("orders").build()?.spawn();
//! // ... serve requests; every event committed with `Outbox::enqueue` is published ...
//! relay.shutdown().await?; // stops claiming, awaits confirms, records them, releases the rest
//! # Ok(()) }
//! ```
//!
//! With the cargo feature `otel` (off by default), each event is published in a span
//! `outbox.publish` (event id, type, entity, sequence, correlation id; never the payload) whose
//! OpenTelemetry parent is the event's W3C `traceparent` (without one, the batch's span
//! `outbox.publish_batch`), and its message carries the publish span's own context in the header
//! `traceparent`: with `outbox-producer`'s and `outbox-inbox`'s `otel` and a
//! `tracing-opentelemetry` layer, one trace runs from the request that enqueued an event to the
//! consumer that applied it.
//!
//! See `docs/architecture.md` for how claiming, ordering and recovery work.

pub mod defaults;
mod error;
pub mod fleet;
mod gauges;
mod metrics;
#[cfg(feature = "otel")]
mod otel;
mod relay;
pub mod replay;
mod routing;
mod store;

pub use error::{Error, Result};
/// The RabbitMQ publisher the relay is usually built with (from `outbox-amqp`).
pub use outbox_amqp::{AmqpPublisher, AmqpPublisherBuilder, Layout, Nodes, QueueType, Topology};
#[cfg(feature = "fail-points")]
pub use relay::CrashPoint;
pub use relay::{BatchReport, Health, IntoConnectOptions, Relay, RelayBuilder, RelayHandle, RelayProbe};
pub use routing::{ByEventType, Partitioned, RoutingStrategy};

/// Not part of the API: the claim's statement and the session settings of the relay's own
/// connections, reachable only for the tests of the claim's plan (`tests/it/store.rs`), which must
/// EXPLAIN the very statement the relay runs in a session set up as the relay's.
#[doc(hidden)]
pub mod claim_plan {
    pub use crate::store::{CLAIM, MARK_PUBLISHED, SESSION};
}

/// The README's code blocks, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}
