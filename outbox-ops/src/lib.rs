//! The operator side of the transactional outbox: what operators and their tools use to look at
//! the outbox tables, repair them and keep them small, apart from what a producing service links to
//! write events (`outbox-producer`).
//!
//! - [`admin`]: the operator API over the outbox tables: counts by state ([`admin::stats`]), the
//!   backlog the relays' gauges show ([`admin::backlog`]), what the relays are doing
//!   ([`admin::activity`]), an event's record ([`admin::event`]), and the quarantine: list, retry,
//!   skip, release the rows held behind it.
//! - [`horizon()`]: what holds back the database's xmin horizon, so that vacuum cannot remove the
//!   outbox's dead rows: the oldest snapshot another session holds and the oldest replication slot
//!   ([`Horizon`]; the backlog reads it too).
//! - [`Retention`]: deletes old published (and, if asked, skipped) rows in bounded batches, clears
//!   old payloads, forgets expired idempotency keys.
//! - [`reconcile`]: compares the business changes with the outbox, the broker's deliveries and a
//!   consumer's inbox ([`Reconciliation`], a [`ReconciliationReport`]).
//! - [`replay`]: the record of replay jobs (published events sent again) and what they select;
//!   the relay's crate sends them.
//!
//! Its users are the `outbox` command (`status`, `events`, `quarantine`, `cleanup`, `reconcile`, `replay`),
//! the relay (its gauges, the re-check of held rows and the retention it can run) and the testkit
//! (its reconciliation). It reads and writes the tables that `outbox-producer`'s migrations create
//! and has no broker client.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use outbox_ops::{Retention, admin};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//!
//! let stats = admin::stats(&pool).await?;
//! println!("{} waiting, {} quarantined", stats.pending, stats.quarantined);
//! for q in admin::list_quarantined(&pool, 100).await? {
//!     println!("{} {} {:?}", q.id, q.event_type, q.last_error_kind);
//! }
//!
//! let retention = Retention::builder(Duration::from_secs(7 * 24 * 3600)).build()?;
//! let deleted = retention.run(&pool).await?;
//! println!("deleted {deleted} outbox rows");
//! # Ok(()) }
//! ```

mod activity;
pub mod admin;
mod backlog;
mod error;
mod events;
mod horizon;
mod metrics;
pub mod reconcile;
pub mod replay;
mod retention;
mod stats;

pub use error::{Error, Result};
pub use horizon::{HeldSlot, HeldSnapshot, Horizon, horizon};
pub use reconcile::{Reconciliation, ReconciliationReport};
pub use retention::{Retention, RetentionBuilder};
