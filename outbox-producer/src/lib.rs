//! The producer side of the transactional outbox.
//!
//! A service writes its business change and its events in one PostgreSQL transaction with
//! [`Outbox::enqueue`]; the relay (crate `outbox-relayer`) publishes them to the broker. This crate
//! holds what a producing service links to write events, and no broker client: enqueueing
//! (idempotency keys, sealed payloads) and the outbox migrations. The operator side (the operator
//! API over the outbox tables, retention, reconciliation) is the crate `outbox-ops`.
//!
//! With the cargo feature `otel` (off by default), an event enqueued without a `traceparent` gets
//! the W3C trace context of its `outbox.enqueue` span when that span has an OpenTelemetry context
//! (a `tracing-opentelemetry` layer is installed), so the trace of the request that wrote it goes
//! on through the relay (`outbox-relayer`'s `otel`) to the consumer (`outbox-inbox`'s `otel`). A
//! `traceparent` set with [`NewEvent::traceparent`](outbox_types::NewEvent::traceparent) is kept.
//!
//! ```no_run
//! use outbox_types::NewEvent;
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
mod idempotency;
mod metrics;
mod migrate;
#[cfg(feature = "otel")]
mod otel;

pub use enqueue::{DEFAULT_IDEMPOTENCY_WINDOW, Outbox, OutboxBuilder};
pub use error::{Error, Result};
pub use migrate::{MIGRATIONS_TABLE, migrate, migrator};

/// The channel on which the outbox notifies the relay after a commit that enqueued events.
pub const NOTIFY_CHANNEL: &str = "outbox_events";
