//! The consumer side of the transactional outbox: the inbox that makes a handler's effect happen
//! once per event and in per-entity order.
//!
//! This release ships the inbox tables and their migrations; the middleware follows.

mod migrate;

pub use migrate::{MIGRATIONS_TABLE, migrate, migrator};
