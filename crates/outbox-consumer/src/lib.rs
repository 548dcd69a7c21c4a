//! The consumer side of the transactional outbox: the inbox that makes a handler's effect happen
//! once per event and in per-entity order (guarantee G5).
//!
//! - [`InboxLayer`] wraps any tower service that handles an [`InboxRequest`] (the decoded event and
//!   the consumer's open transaction). Duplicates are dropped by event id, stale events dropped,
//!   early events parked until their gap fills, all in the handler's own transaction.
//! - The inbox tables are applied with [`migrate`], tracked apart from the application's own
//!   migrations.

mod error;
mod inbox;
mod migrate;

pub use error::{Error, HandlerError, HandlerErrorKind, Result};
pub use inbox::{InboxLayer, InboxRequest, InboxService, Outcome, StartPolicy};
pub use migrate::{MIGRATIONS_TABLE, migrate, migrator};
