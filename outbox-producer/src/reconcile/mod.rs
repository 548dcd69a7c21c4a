//! Reconciliation: does every business change have its event, was every event published once,
//! did the broker deliver it in entity order, and did the consumer apply it?
//!
//! [`Reconciliation`] reads the user's business tables and the outbox, and optionally takes what
//! was seen at the broker and reads what a consumer's inbox applied, and compares them in memory
//! ([`compare`](fn@compare) is pure). The result is a [`ReconciliationReport`]: a value, never a
//! panic. `outbox reconcile` runs it for an operator; the testkit adds the deliveries its recorder
//! saw.
//!
//! This file holds the [`Reconciliation`] builder and its entry point; `report.rs` the findings
//! and their `Display`, `snapshot.rs` the reading of the tables, `compare.rs` the comparison.

mod compare;
#[cfg(test)]
mod fixtures;
mod report;
mod snapshot;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

pub use compare::compare;
pub use report::{
    BrokerFindings, Change, EventRef, InboxFindings, InboxRow, OrderViolation, OutboxRow, ReconciliationReport,
};
pub use snapshot::Snapshot;

use crate::Result;

/// Compares the user's business changes with the outbox, the broker and a consumer's inbox.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_producer::Error> {
/// use outbox_producer::reconcile::Reconciliation;
///
/// let report = Reconciliation::new(&pool)
///     // every order went through versions 1..=version, each with the event of that sequence
///     .entity_versions("SELECT 'order-' || id, version FROM orders")
///     .inbox(&pool, "shipping")
///     .effects("SELECT event_id FROM shipments")
///     .run()
///     .await?;
/// assert!(report.is_clean(), "{report}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Reconciliation {
    pool: PgPool,
    entity_versions: Vec<String>,
    event_ids: Vec<String>,
    deliveries: Option<Vec<EventRef>>,
    inbox: Option<(PgPool, String)>,
    effects: Option<String>,
    since: Option<DateTime<Utc>>,
}

impl Reconciliation {
    /// Reconciles against the outbox in `pool` (where the business tables usually are too).
    pub fn new(pool: &PgPool) -> Self {
        Self {
            pool: pool.clone(),
            entity_versions: Vec::new(),
            event_ids: Vec::new(),
            deliveries: None,
            inbox: None,
            effects: None,
            since: None,
        }
    }

    /// Adds a business query returning `(entity_key text, version bigint)` rows: the entity went
    /// through versions `1..=version`, and version `v` must have the entity's event of sequence `v`.
    /// Returning every version (a history table) or only the latest gives the same check.
    #[must_use]
    pub fn entity_versions(mut self, sql: impl Into<String>) -> Self {
        self.entity_versions.push(sql.into());
        self
    }

    /// Adds a business query returning one `uuid` per change: the id of the event the change
    /// enqueued (for flows that store it).
    #[must_use]
    pub fn event_ids(mut self, sql: impl Into<String>) -> Self {
        self.event_ids.push(sql.into());
        self
    }

    /// Compares with what was delivered at the broker, in arrival order (the testkit's recorder
    /// gives them).
    #[must_use]
    pub fn deliveries(mut self, deliveries: Vec<EventRef>) -> Self {
        self.deliveries = Some(deliveries);
        self
    }

    /// Reconciles only what happened from `since` on: the business queries get it as `$1` and must
    /// return the changes made since then (for `entity_versions`, a row per version made since
    /// then, as a history table has them: each entity is checked from its lowest listed version to
    /// its highest), and only outbox rows created since then are read.
    #[must_use]
    pub fn since(mut self, since: DateTime<Utc>) -> Self {
        self.since = Some(since);
        self
    }

    /// Compares with the inbox of `consumer` in `pool` (which may be another database).
    #[must_use]
    pub fn inbox(mut self, pool: &PgPool, consumer: impl Into<String>) -> Self {
        self.inbox = Some((pool.clone(), consumer.into()));
        self
    }

    /// A query on the inbox's database returning the event id (`uuid`) of every effect the
    /// consumer's handler wrote, to find effects applied more than once. Needs [`Self::inbox`].
    #[must_use]
    pub fn effects(mut self, sql: impl Into<String>) -> Self {
        self.effects = Some(sql.into());
        self
    }

    /// Reads everything and compares.
    ///
    /// # Errors
    /// [`Error::Database`](crate::Error::Database) if a query fails,
    /// [`Error::InvalidQuery`](crate::Error::InvalidQuery) if a business or effects query does
    /// not return the documented columns.
    pub async fn run(&self) -> Result<ReconciliationReport> {
        Ok(compare(&self.snapshot().await?))
    }
}
