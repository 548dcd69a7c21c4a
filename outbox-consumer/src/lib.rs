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

pub mod admin;
mod decode;
mod error;
mod inbox;
mod migrate;
mod runner;
mod topology;

pub use decode::{DeliveryError, DeliveryLimits, decode_delivery};
pub use error::{Error, HandlerError, HandlerErrorKind, Result};
pub use inbox::{InboxLayer, InboxRequest, InboxService, Outcome, StartPolicy};
pub use migrate::{MIGRATIONS_TABLE, migrate, migrator};
#[cfg(feature = "fail-points")]
pub use runner::CrashPoint;
pub use runner::{
    HEADER_DEAD_LETTER_DETAIL, HEADER_DEAD_LETTER_QUEUE, HEADER_DEAD_LETTER_REASON, InboxRunner, InboxRunnerBuilder,
    RunnerHandle, RunnerStats,
};
pub use topology::{Topology, declare_partitions, declare_queue};
