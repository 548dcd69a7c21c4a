//! The relay's store: its statements over `outbox_events` and `outbox_relay_listeners`, every one
//! index-bound (see `docs/architecture.md`) and fenced by the claim token. One concern per file:
//! - `session.rs`: the planner settings of the relay's own sessions, which the statements rely on;
//! - `sql.rs`: the text of every statement, each a documented constant;
//! - `decode.rs`: the rows a claim returned, decoded into events or set aside as corrupt;
//! - `exec.rs`: the functions that bind the statements and run them.

mod decode;
mod exec;
mod session;
mod sql;

pub(crate) use decode::{Claimed, Corrupt, Sealed, Taken, replayed};
pub(crate) use exec::{
    Ask, Failure, busy, claim, first_pending, horizon, leave, mark_failed, mark_published, pending_below,
    position_cache, present, release, release_claim, still, vacuum, wait, writers,
};
pub use session::SESSION;
pub use sql::{CLAIM, MARK_PUBLISHED};
