//! The producer side of the transactional outbox.
//!
//! A service writes its business change and its events in one PostgreSQL transaction with
//! [`Outbox::enqueue`]; the [`Relay`] publishes them to RabbitMQ with [`AmqpPublisher`].
//!
//! ```no_run
//! use outbox_core::NewEvent;
//! use outbox_producer::{migrate, Outbox};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! migrate(&pool).await?; // tracked in `_outbox_migrations`, not in `_sqlx_migrations`
//!
//! let outbox = Outbox::new();
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id, total_cents) VALUES ($1, $2)")
//!     .bind(42_i64)
//!     .bind(1999_i64)
//!     .execute(&mut *tx)
//!     .await?;
//! outbox
//!     .enqueue(&mut *tx, NewEvent::json("order.placed", &serde_json::json!({ "id": 42 }))?.entity("order-42"))
//!     .await?;
//! tx.commit().await?; // the event exists if and only if this commit succeeds
//! # Ok(()) }
//! ```

mod enqueue;
mod error;
mod migrate;
mod relay;
mod retention;

pub use enqueue::{Outbox, OutboxBuilder};
pub use error::{DbMessage, Error, Result};
pub use migrate::{MIGRATIONS_TABLE, migrate, migrator};
#[cfg(feature = "fail-points")]
pub use relay::CrashPoint;
pub use relay::{
    AmqpPublisher, AmqpPublisherBuilder, BatchReport, ByEventType, Partitioned, Relay, RelayBuilder, RelayHandle,
    RoutingStrategy, admin,
};
pub use retention::{Retention, RetentionBuilder};

/// The channel on which the outbox notifies the relay after a commit that enqueued events.
pub const NOTIFY_CHANNEL: &str = "outbox_events";

/// The README's code blocks, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}
