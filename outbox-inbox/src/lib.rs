//! The consumer side of the transactional outbox: the inbox that makes a handler's effect happen
//! once per event and in per-entity order (guarantee G5).
//!
//! - [`InboxLayer`] wraps any tower service that handles an [`InboxRequest`] (the decoded event and
//!   the consumer's open transaction). Duplicates are dropped by event id, stale events dropped,
//!   early events parked until their gap fills, all in the handler's own transaction.
//! - [`InboxRunner`] consumes RabbitMQ queues into the inbox: prefetch, bounded concurrency, ack
//!   after commit, backoff, dead-lettering with a reason header, reconnection, graceful shutdown.
//! - [`declare_queue`] and [`declare_partitions`] declare queues, dead letters and ordered partitions.
//! - The inbox tables are applied with [`migrate`], tracked apart from the application's own
//!   migrations.
//!
//! With the cargo feature `otel` (off by default), the span `inbox.handle` of an event that
//! carries a W3C `traceparent` has that span context as its OpenTelemetry parent (with
//! `outbox-relayer`'s `otel`, the relay's `outbox.publish` span): with a `tracing-opentelemetry`
//! layer, the consumer's effect joins the trace of the request that enqueued the event. A batch
//! handled at once (`inbox.handle_batch`) keeps its own parent.
//!
//! ```no_run
//! use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner, declare_partitions};
//! use tower::Layer;
//!
//! /// One shipment per event, written in the inbox's transaction: it commits with the record of
//! /// the event, or not at all.
//! async fn ship(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
//!     let order: serde_json::Value = req.event().payload.json().map_err(|_| HandlerError::permanent("not JSON"))?;
//!     sqlx::query("INSERT INTO shipments (order_id) VALUES ($1)")
//!         .bind(order["order_id"].as_i64())
//!         .execute(req.conn())
//!         .await?;
//!     Ok(req)
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/shipping").await?;
//! outbox_inbox::migrate(&pool).await?; // tracked in `_inbox_migrations`
//!
//! // Four ordered partitions of the exchange the relay publishes to, with their dead letters.
//! let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
//! let connection = outbox_amqp::connect(url, "shipping-setup", std::time::Duration::from_secs(5)).await?;
//! let channel = connection.create_channel().await?;
//! let topology = declare_partitions(&channel, "orders", "shipping.orders", "partition.", 4).await?;
//!
//! let service = InboxLayer::new(pool, "shipping").layer(tower::service_fn(ship));
//! let runner = InboxRunner::builder(url, service).topology(&topology).build()?.spawn();
//! // ... until the service stops:
//! runner.shutdown().await?; // finishes the deliveries in hand, acks after their commits
//! # Ok(()) }
//! ```

pub mod admin;
mod decode;
mod error;
mod inbox;
mod metrics;
mod migrate;
#[cfg(feature = "otel")]
mod otel;
pub mod retention;
mod runner;

pub use decode::{DeliveryError, DeliveryLimits, SealedError, decode_delivery};
pub use error::{Error, HandlerError, HandlerErrorKind, Result};
pub use inbox::{InboxLayer, InboxRequest, InboxService, Outcome, StartPolicy, Tenants};
pub use migrate::{MIGRATIONS_TABLE, migrate, migrator};
/// The topology and the dead-letter headers, from `outbox-amqp`.
pub use outbox_amqp::{
    HEADER_DEAD_LETTER_DETAIL, HEADER_DEAD_LETTER_QUEUE, HEADER_DEAD_LETTER_REASON, Layout, Nodes,
    QUORUM_DELIVERY_LIMIT, QueueType, Topology, declare_partitions, declare_partitions_as, declare_queue,
    declare_queue_as,
};
#[cfg(feature = "fail-points")]
pub use runner::CrashPoint;
pub use runner::{InboxRunner, InboxRunnerBuilder, RunnerHandle, RunnerHealth, RunnerProbe, RunnerStats};
