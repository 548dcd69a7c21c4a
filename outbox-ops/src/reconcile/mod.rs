//! Reconciliation: does every business change have its event, was every event published once,
//! did the broker deliver it in entity order, and did the consumer apply it?
//!
//! [`Reconciliation`] reads the user's business tables and the outbox, and optionally takes what
//! was seen at the broker and reads what a consumer's inbox applied, and compares them in memory
//! ([`compare`](fn@compare) is pure). The result is a [`ReconciliationReport`]: a value, never a
//! panic. `outbox reconcile` runs it for an operator; the testkit adds the deliveries its recorder
//! saw.
//!
//! The data flows one way: `reconciliation.rs` holds the [`Reconciliation`] builder and its entry
//! points, `snapshot.rs` reads the tables into a [`Snapshot`], `compare.rs` compares it into a
//! [`ReconciliationReport`] (`report.rs`, the findings and their `Display`); `rows.rs` holds what
//! they all name (changes, events, outbox and inbox rows).

mod compare;
#[cfg(test)]
mod fixtures;
mod reconciliation;
mod report;
mod rows;
mod snapshot;

pub use compare::compare;
pub use reconciliation::Reconciliation;
pub use report::{BrokerFindings, InboxFindings, OrderViolation, ReconciliationReport};
pub use rows::{Change, EventRef, InboxRow, OutboxRow};
pub use snapshot::Snapshot;
