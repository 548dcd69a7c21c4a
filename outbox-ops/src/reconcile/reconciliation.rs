//! The [`Reconciliation`] builder and its entry points: what to read, then
//! [`snapshot`](Reconciliation::snapshot) (read) and [`run`](Reconciliation::run) (read and
//! compare).

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::compare::compare;
use super::report::ReconciliationReport;
use super::rows::EventRef;
use super::snapshot::{self, Snapshot};
use crate::Result;

/// Compares the user's business changes with the outbox, the broker and a consumer's inbox.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_ops::Error> {
/// use outbox_ops::reconcile::Reconciliation;
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

    /// Reads everything without comparing.
    ///
    /// # Errors
    /// As [`Self::run`].
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let changes = snapshot::read_changes(&self.pool, &self.entity_versions, &self.event_ids, self.since).await?;
        let mut snapshot = Snapshot { changes, since: self.since.is_some(), ..Snapshot::default() };
        snapshot.outbox = snapshot::read_outbox(&self.pool, self.since).await?;
        snapshot.counters = snapshot::read_counters(&self.pool).await?;
        snapshot.deliveries.clone_from(&self.deliveries);
        if let Some((pool, consumer)) = &self.inbox {
            snapshot.inbox = Some((consumer.clone(), snapshot::read_inbox(pool, consumer).await?));
            if let Some(sql) = &self.effects {
                snapshot.effects = Some(snapshot::read_effects(pool, sql).await?);
            }
        }
        Ok(snapshot)
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
