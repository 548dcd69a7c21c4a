//! Reconciliation: does every business change have its event, was every event published once,
//! did the broker deliver it in entity order, and did the consumer apply it?
//!
//! [`Reconciliation`] reads three places (the user's business tables, the outbox, and optionally what
//! a [`Recorder`] saw at the broker and what a consumer's inbox applied) and compares them in memory
//! ([`compare`] is pure). The result is a [`ReconciliationReport`]: a value, never a panic.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::{Error, Recorder, Result};

/// One business change, as the user's query reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Change {
    /// The entity went through versions `1..=version`; version `v` needs the event of sequence `v`.
    Entity {
        /// The entity key, as the events carry it.
        key: String,
        /// The entity's version.
        version: i64,
    },
    /// A change that recorded the id of its event.
    Event(Uuid),
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Entity { key, version } => write!(f, "{key} version {version}"),
            Self::Event(id) => write!(f, "change with event {id}"),
        }
    }
}

/// An event named by its id and, for ordered events, its entity and sequence.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventRef {
    /// The event id.
    pub id: Uuid,
    /// The entity key, for ordered events.
    pub entity: Option<String>,
    /// The entity sequence, for ordered events.
    pub seq: Option<i64>,
}

impl fmt::Display for EventRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.entity, self.seq) {
            (Some(e), Some(s)) => write!(f, "{} ({e}#{s})", self.id),
            _ => write!(f, "{}", self.id),
        }
    }
}

/// An outbox row as the reconciliation reads it (no payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// The event.
    pub event: EventRef,
    /// `pending`, `published`, `quarantined` or `skipped`.
    pub status: String,
    /// Publish attempts started.
    pub attempts: i32,
    /// The classified reason of the last failure.
    pub last_error_kind: Option<String>,
}

impl fmt::Display for OutboxRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}, {} attempts", self.event, self.status, self.attempts)?;
        if let Some(kind) = &self.last_error_kind {
            write!(f, ", last error {kind}")?;
        }
        Ok(())
    }
}

/// An inbox row as the reconciliation reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRow {
    /// The event.
    pub event: EventRef,
    /// `processed`, `parked`, `failed` or `skipped`.
    pub status: String,
}

/// A later sequence of an entity that reached the broker before an earlier one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderViolation {
    /// The entity.
    pub entity: String,
    /// The sequence that arrived.
    pub seq: i64,
    /// The published earlier sequence that had not arrived yet.
    pub expected: i64,
}

/// What the broker delivered, compared with the outbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokerFindings {
    /// Deliveries recorded (duplicates included).
    pub deliveries: usize,
    /// Published events that never arrived.
    pub not_delivered: Vec<EventRef>,
    /// Events that arrived more than once, with their counts. Allowed by at-least-once delivery
    /// (a crash between confirm and mark), so they do not make a report unclean.
    pub duplicates: Vec<(Uuid, usize)>,
    /// Deliveries whose id the outbox does not know (published without a committed row).
    pub unknown: Vec<Uuid>,
    /// Per-entity order violations.
    pub order_violations: Vec<OrderViolation>,
}

/// What a consumer's inbox applied, compared with what was published.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxFindings {
    /// The consumer name.
    pub consumer: String,
    /// Events the inbox records as processed.
    pub applied: usize,
    /// Published events not processed, with the inbox status if it saw them (`parked`, `failed`,
    /// `skipped`) or `None` if it never did.
    pub not_applied: Vec<(EventRef, Option<String>)>,
    /// Processed events the outbox does not know.
    pub unknown_applied: Vec<EventRef>,
    /// Rows of the consumer's effects query, when given.
    pub effects: Option<usize>,
    /// Events whose effect exists more than once, with the count.
    pub applied_twice: Vec<(Uuid, usize)>,
}

/// Everything the reconciliation found. [`ReconciliationReport::is_clean`] says whether anything
/// is wrong; its `Display` lists what (ids, entities, sequences, statuses; never payloads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconciliationReport {
    /// Business changes the queries returned (one per entity version or per event id).
    pub business_changes: usize,
    /// Rows in the outbox.
    pub outbox_events: usize,
    /// Rows in the outbox with status `published`.
    pub published: usize,
    /// Changes whose event was committed (the entity counter proves it) but whose row is gone:
    /// removed by retention, which deletes only published or skipped rows.
    pub pruned: usize,
    /// Business changes without an event.
    pub changes_without_event: Vec<Change>,
    /// Events of an entity the business queries know, beyond the entity's version.
    pub events_without_change: Vec<EventRef>,
    /// Events not (yet) confirmed by the broker: pending or quarantined.
    pub unpublished: Vec<OutboxRow>,
    /// Events an operator gave up on: never published.
    pub skipped: Vec<EventRef>,
    /// The broker side, if a recorder was given.
    pub broker: Option<BrokerFindings>,
    /// The consumer side, if an inbox was given.
    pub inbox: Option<InboxFindings>,
}

impl ReconciliationReport {
    /// Whether nothing is missing, unpublished, skipped, unknown, out of order or applied twice.
    /// Broker-side duplicates are allowed (at-least-once delivery) and listed only.
    pub fn is_clean(&self) -> bool {
        let broker_clean = self
            .broker
            .as_ref()
            .is_none_or(|b| b.not_delivered.is_empty() && b.unknown.is_empty() && b.order_violations.is_empty());
        let inbox_clean = self
            .inbox
            .as_ref()
            .is_none_or(|i| i.not_applied.is_empty() && i.unknown_applied.is_empty() && i.applied_twice.is_empty());
        self.changes_without_event.is_empty()
            && self.events_without_change.is_empty()
            && self.unpublished.is_empty()
            && self.skipped.is_empty()
            && broker_clean
            && inbox_clean
    }
}

/// At most this many items of each list are printed.
const SHOWN: usize = 10;

fn list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, title: &str, items: &[T]) -> fmt::Result {
    write!(f, "\n  {title}: {}", items.len())?;
    for item in items.iter().take(SHOWN) {
        write!(f, "\n    {item}")?;
    }
    if items.len() > SHOWN {
        write!(f, "\n    ... and {} more", items.len() - SHOWN)?;
    }
    Ok(())
}

struct Counted<'a>(&'a (Uuid, usize));
impl fmt::Display for Counted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} x{}", self.0.0, self.0.1)
    }
}

struct Seen<'a>(&'a (EventRef, Option<String>));
impl fmt::Display for Seen<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0.0, self.0.1.as_deref().unwrap_or("not in the inbox"))
    }
}

impl fmt::Display for OrderViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: seq {} arrived before seq {}", self.entity, self.seq, self.expected)
    }
}

impl fmt::Display for ReconciliationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reconciliation {}: {} business changes, {} outbox events ({} published), {} pruned by retention",
            if self.is_clean() { "clean" } else { "NOT clean" },
            self.business_changes,
            self.outbox_events,
            self.published,
            self.pruned
        )?;
        list(f, "business changes without an event", &self.changes_without_event)?;
        list(f, "events without a business change", &self.events_without_change)?;
        list(f, "events not published", &self.unpublished)?;
        list(f, "events skipped by an operator", &self.skipped)?;
        if let Some(b) = &self.broker {
            write!(f, "\n  broker: {} deliveries", b.deliveries)?;
            list(f, "published but not delivered", &b.not_delivered)?;
            list(f, "delivered more than once (allowed)", &b.duplicates.iter().map(Counted).collect::<Vec<_>>())?;
            list(f, "delivered but unknown to the outbox", &b.unknown)?;
            list(f, "per-entity order violations", &b.order_violations)?;
        }
        if let Some(i) = &self.inbox {
            write!(f, "\n  inbox of consumer {:?}: {} applied", i.consumer, i.applied)?;
            list(f, "published but not applied", &i.not_applied.iter().map(Seen).collect::<Vec<_>>())?;
            list(f, "applied but unknown to the outbox", &i.unknown_applied)?;
            if let Some(n) = i.effects {
                write!(f, "\n  effects: {n}")?;
            }
            list(f, "effects applied more than once", &i.applied_twice.iter().map(Counted).collect::<Vec<_>>())?;
        }
        Ok(())
    }
}

/// What [`compare`] compares: everything read, nothing computed yet.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The business changes.
    pub changes: Vec<Change>,
    /// The outbox rows.
    pub outbox: Vec<OutboxRow>,
    /// `outbox_entity_sequences`: the last sequence committed per entity (never reused).
    pub counters: HashMap<String, i64>,
    /// Deliveries at the broker, in arrival order, if recorded.
    pub deliveries: Option<Vec<EventRef>>,
    /// The consumer name and its inbox rows, if given.
    pub inbox: Option<(String, Vec<InboxRow>)>,
    /// The event id of every effect row, if an effects query was given.
    pub effects: Option<Vec<Uuid>>,
}

/// Compares a [`Snapshot`]; pure, so every rule is unit-tested.
pub fn compare(s: &Snapshot) -> ReconciliationReport {
    let by_id: HashMap<Uuid, &OutboxRow> = s.outbox.iter().map(|r| (r.event.id, r)).collect();
    let mut by_entity: HashMap<&str, BTreeMap<i64, &OutboxRow>> = HashMap::new();
    for r in &s.outbox {
        if let (Some(e), Some(seq)) = (&r.event.entity, r.event.seq) {
            by_entity.entry(e.as_str()).or_default().insert(seq, r);
        }
    }
    // A committed event whose row is gone was removed by retention (published or skipped only).
    let pruned = |entity: Option<&str>, seq: Option<i64>| match (entity, seq) {
        (Some(e), Some(q)) => {
            s.counters.get(e).is_some_and(|last| q <= *last)
                && by_entity.get(e).is_none_or(|rows| !rows.contains_key(&q))
        }
        _ => false,
    };

    let mut report = ReconciliationReport {
        outbox_events: s.outbox.len(),
        published: s.outbox.iter().filter(|r| r.status == "published").count(),
        ..ReconciliationReport::default()
    };

    // Business changes against the outbox.
    let mut versions: HashMap<&str, i64> = HashMap::new();
    let mut ids: HashSet<Uuid> = HashSet::new();
    for c in &s.changes {
        match c {
            Change::Entity { key, version } => {
                let v = versions.entry(key.as_str()).or_insert(0);
                *v = (*v).max(*version);
            }
            Change::Event(id) => {
                ids.insert(*id);
            }
        }
    }
    let mut keys: Vec<&str> = versions.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let version = versions[key];
        report.business_changes += usize::try_from(version.max(0)).unwrap_or(0);
        let rows = by_entity.get(key);
        for v in 1..=version {
            if rows.is_some_and(|r| r.contains_key(&v)) {
                continue;
            }
            if pruned(Some(key), Some(v)) {
                report.pruned += 1;
            } else {
                report.changes_without_event.push(Change::Entity { key: key.to_owned(), version: v });
            }
        }
        if let Some(rows) = rows {
            report.events_without_change.extend(rows.range(version + 1..).map(|(_, r)| r.event.clone()));
        }
    }
    let mut ids: Vec<Uuid> = ids.into_iter().collect();
    ids.sort_unstable();
    report.business_changes += ids.len();
    report.changes_without_event.extend(ids.into_iter().filter(|id| !by_id.contains_key(id)).map(Change::Event));

    // The outbox's own state.
    for r in &s.outbox {
        match r.status.as_str() {
            "published" => {}
            "skipped" => report.skipped.push(r.event.clone()),
            _ => report.unpublished.push(r.clone()),
        }
    }
    report.unpublished.sort_by(|a, b| a.event.cmp(&b.event));
    report.skipped.sort();

    let published: Vec<&OutboxRow> = s.outbox.iter().filter(|r| r.status == "published").collect();
    if let Some(deliveries) = &s.deliveries {
        report.broker = Some(compare_broker(deliveries, &by_id, &by_entity, &published, &pruned));
    }
    if let Some((consumer, rows)) = &s.inbox {
        let mut inbox = compare_inbox(rows, &by_id, &published, &pruned);
        inbox.consumer = consumer.clone();
        if let Some(effects) = &s.effects {
            inbox.effects = Some(effects.len());
            inbox.applied_twice = counts_above_one(effects.iter().copied());
        }
        report.inbox = Some(inbox);
    }
    report
}

fn counts_above_one(ids: impl Iterator<Item = Uuid>) -> Vec<(Uuid, usize)> {
    let mut counts: HashMap<Uuid, usize> = HashMap::new();
    for id in ids {
        *counts.entry(id).or_default() += 1;
    }
    let mut twice: Vec<(Uuid, usize)> = counts.into_iter().filter(|(_, n)| *n > 1).collect();
    twice.sort_unstable();
    twice
}

fn compare_broker(
    deliveries: &[EventRef],
    by_id: &HashMap<Uuid, &OutboxRow>,
    by_entity: &HashMap<&str, BTreeMap<i64, &OutboxRow>>,
    published: &[&OutboxRow],
    pruned: &dyn Fn(Option<&str>, Option<i64>) -> bool,
) -> BrokerFindings {
    let mut findings = BrokerFindings {
        deliveries: deliveries.len(),
        duplicates: counts_above_one(deliveries.iter().map(|d| d.id)),
        ..BrokerFindings::default()
    };
    let arrived: HashSet<Uuid> = deliveries.iter().map(|d| d.id).collect();
    let mut unknown: HashSet<Uuid> = HashSet::new();
    // Per entity: the published sequences that have not arrived yet, lowest first.
    let mut waiting: HashMap<&str, std::collections::BTreeSet<i64>> = HashMap::new();
    for (entity, rows) in by_entity {
        let seqs = rows.iter().filter(|(_, r)| r.status == "published").map(|(s, _)| *s).collect();
        waiting.insert(entity, seqs);
    }
    for d in deliveries {
        if !by_id.contains_key(&d.id) {
            if !pruned(d.entity.as_deref(), d.seq) && unknown.insert(d.id) {
                findings.unknown.push(d.id);
            }
            continue;
        }
        let (Some(entity), Some(seq)) = (&d.entity, d.seq) else { continue };
        let Some(w) = waiting.get_mut(entity.as_str()) else { continue };
        if let Some(&first) = w.first()
            && first < seq
            && w.contains(&seq)
        {
            findings.order_violations.push(OrderViolation { entity: entity.clone(), seq, expected: first });
        }
        w.remove(&seq);
    }
    findings.not_delivered =
        published.iter().filter(|r| !arrived.contains(&r.event.id)).map(|r| r.event.clone()).collect();
    findings.not_delivered.sort();
    findings
}

fn compare_inbox(
    rows: &[InboxRow],
    by_id: &HashMap<Uuid, &OutboxRow>,
    published: &[&OutboxRow],
    pruned: &dyn Fn(Option<&str>, Option<i64>) -> bool,
) -> InboxFindings {
    let status: HashMap<Uuid, &str> = rows.iter().map(|r| (r.event.id, r.status.as_str())).collect();
    let mut findings = InboxFindings::default();
    for r in rows.iter().filter(|r| r.status == "processed") {
        findings.applied += 1;
        if !by_id.contains_key(&r.event.id) && !pruned(r.event.entity.as_deref(), r.event.seq) {
            findings.unknown_applied.push(r.event.clone());
        }
    }
    findings.unknown_applied.sort();
    findings.not_applied = published
        .iter()
        .filter(|p| status.get(&p.event.id) != Some(&"processed"))
        .map(|p| (p.event.clone(), status.get(&p.event.id).map(|s| (*s).to_owned())))
        .collect();
    findings.not_applied.sort();
    findings
}

/// Compares the user's business changes with the outbox, the broker and a consumer's inbox.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, recorder: &outbox_testkit::Recorder) -> Result<(), outbox_testkit::Error> {
/// use outbox_testkit::Reconciliation;
///
/// let report = Reconciliation::new(&pool)
///     // every order went through versions 1..=version, each with the event of that sequence
///     .entity_versions("SELECT 'order-' || id, version FROM orders")
///     .broker(recorder)
///     .inbox(&pool, "shipping")
///     .effects("SELECT event_id FROM shipments")
///     .run()
///     .await?;
/// assert!(report.is_clean(), "{report}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Reconciliation<'a> {
    pool: PgPool,
    entity_versions: Vec<String>,
    event_ids: Vec<String>,
    recorder: Option<&'a Recorder>,
    inbox: Option<(PgPool, String)>,
    effects: Option<String>,
}

impl<'a> Reconciliation<'a> {
    /// Reconciles against the outbox in `pool` (where the business tables usually are too).
    pub fn new(pool: &PgPool) -> Self {
        Self {
            pool: pool.clone(),
            entity_versions: Vec::new(),
            event_ids: Vec::new(),
            recorder: None,
            inbox: None,
            effects: None,
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

    /// Compares with what `recorder` saw at the broker. Wait for the deliveries first.
    #[must_use]
    pub fn broker(mut self, recorder: &'a Recorder) -> Self {
        self.recorder = Some(recorder);
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
    /// [`Error::Database`] if a query fails, [`Error::InvalidQuery`] if a business or effects
    /// query does not return the documented columns.
    pub async fn run(&self) -> Result<ReconciliationReport> {
        Ok(compare(&self.snapshot().await?))
    }

    /// Reads everything without comparing.
    ///
    /// # Errors
    /// As [`Self::run`].
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        for sql in &self.entity_versions {
            for row in fetch(&self.pool, sql).await? {
                let key: String = row.try_get(0).map_err(|e| invalid("entity_versions", &e))?;
                let version = int(&row, 1).map_err(|e| invalid("entity_versions", &e))?;
                snapshot.changes.push(Change::Entity { key, version });
            }
        }
        for sql in &self.event_ids {
            for row in fetch(&self.pool, sql).await? {
                snapshot.changes.push(Change::Event(row.try_get(0).map_err(|e| invalid("event_ids", &e))?));
            }
        }
        type Outbox = (Uuid, Option<String>, Option<i64>, String, i32, Option<String>);
        let rows: Vec<Outbox> =
            sqlx::query_as("SELECT id, entity_key, seq, status, attempts, last_error_kind FROM outbox_events")
                .fetch_all(&self.pool)
                .await?;
        snapshot.outbox = rows
            .into_iter()
            .map(|(id, entity, seq, status, attempts, last_error_kind)| OutboxRow {
                event: EventRef { id, entity, seq },
                status,
                attempts,
                last_error_kind,
            })
            .collect();
        let counters: Vec<(String, i64)> =
            sqlx::query_as("SELECT entity_key, last_seq FROM outbox_entity_sequences").fetch_all(&self.pool).await?;
        snapshot.counters = counters.into_iter().collect();
        if let Some(recorder) = self.recorder {
            snapshot.deliveries = Some(
                recorder
                    .records()
                    .into_iter()
                    .filter_map(|r| Some(EventRef { id: r.event_id?, entity: r.entity, seq: r.seq }))
                    .collect(),
            );
        }
        if let Some((pool, consumer)) = &self.inbox {
            type Inbox = (Uuid, Option<String>, Option<i64>, String);
            let rows: Vec<Inbox> =
                sqlx::query_as("SELECT event_id, entity_key, seq, status FROM inbox_events WHERE consumer = $1")
                    .bind(consumer)
                    .fetch_all(pool)
                    .await?;
            let rows = rows
                .into_iter()
                .map(|(id, entity, seq, status)| InboxRow { event: EventRef { id, entity, seq }, status })
                .collect();
            snapshot.inbox = Some((consumer.clone(), rows));
            if let Some(sql) = &self.effects {
                let ids = fetch(pool, sql)
                    .await?
                    .iter()
                    .map(|r| r.try_get::<Uuid, _>(0).map_err(|e| invalid("effects", &e)))
                    .collect::<Result<Vec<Uuid>>>()?;
                snapshot.effects = Some(ids);
            }
        }
        Ok(snapshot)
    }
}

async fn fetch(pool: &PgPool, sql: &str) -> Result<Vec<sqlx::postgres::PgRow>> {
    Ok(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).fetch_all(pool).await?)
}

/// An integer column of any width.
fn int(row: &sqlx::postgres::PgRow, i: usize) -> std::result::Result<i64, sqlx::Error> {
    row.try_get::<i64, _>(i).or_else(|_| row.try_get::<i32, _>(i).map(i64::from))
}

fn invalid(query: &'static str, e: &sqlx::Error) -> Error {
    Error::InvalidQuery { query, reason: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(n: u128, entity: Option<&str>, seq: Option<i64>) -> EventRef {
        EventRef { id: Uuid::from_u128(n), entity: entity.map(str::to_owned), seq }
    }

    fn row(n: u128, entity: &str, seq: i64, status: &str) -> OutboxRow {
        OutboxRow {
            event: ev(n, Some(entity), Some(seq)),
            status: status.to_owned(),
            attempts: 1,
            last_error_kind: None,
        }
    }

    fn change(key: &str, version: i64) -> Change {
        Change::Entity { key: key.to_owned(), version }
    }

    /// Orders a (3 versions) and b (1), all published, delivered once, applied once.
    fn healthy() -> Snapshot {
        let outbox = vec![
            row(1, "a", 1, "published"),
            row(2, "a", 2, "published"),
            row(3, "a", 3, "published"),
            row(4, "b", 1, "published"),
        ];
        let deliveries = outbox.iter().map(|r| r.event.clone()).collect();
        let inbox = outbox.iter().map(|r| InboxRow { event: r.event.clone(), status: "processed".into() }).collect();
        Snapshot {
            changes: vec![change("a", 3), change("b", 1)],
            counters: [("a".to_owned(), 3), ("b".to_owned(), 1)].into(),
            effects: Some(outbox.iter().map(|r| r.event.id).collect()),
            outbox,
            deliveries: Some(deliveries),
            inbox: Some(("shipping".into(), inbox)),
        }
    }

    #[test]
    fn a_healthy_flow_is_clean() {
        let r = compare(&healthy());
        assert!(r.is_clean(), "{r}");
        assert_eq!((r.business_changes, r.outbox_events, r.published, r.pruned), (4, 4, 4, 0));
        assert_eq!(r.inbox.as_ref().map(|i| (i.applied, i.effects)), Some((4, Some(4))));
        assert!(r.to_string().starts_with("reconciliation clean"));
    }

    #[test]
    fn a_change_without_its_event_and_an_event_without_its_change() {
        let mut s = healthy();
        s.changes = vec![change("a", 4), change("b", 0)];
        let r = compare(&s);
        assert_eq!(r.changes_without_event, [change("a", 4)]);
        assert_eq!(r.events_without_change, [ev(4, Some("b"), Some(1))]);
        assert!(!r.is_clean());
        let text = r.to_string();
        assert!(text.contains("a version 4") && text.contains("NOT clean"), "{text}");
    }

    #[test]
    fn changes_by_event_id() {
        let mut s = healthy();
        s.changes = vec![Change::Event(Uuid::from_u128(1)), Change::Event(Uuid::from_u128(99))];
        let r = compare(&s);
        assert_eq!(r.business_changes, 2);
        assert_eq!(r.changes_without_event, [Change::Event(Uuid::from_u128(99))]);
    }

    #[test]
    fn pending_quarantined_and_skipped_events_are_listed() {
        let mut s = healthy();
        s.outbox[2].status = "pending".into();
        s.outbox[3].status = "quarantined".into();
        s.outbox[3].last_error_kind = Some("rejected".into());
        s.outbox.push(row(5, "c", 1, "skipped"));
        s.deliveries = Some(s.outbox[..2].iter().map(|r| r.event.clone()).collect());
        s.inbox.as_mut().expect("inbox").1.truncate(2);
        s.effects = Some(vec![Uuid::from_u128(1), Uuid::from_u128(2)]);
        let r = compare(&s);
        let statuses: Vec<_> = r.unpublished.iter().map(|u| (u.event.id, u.status.as_str())).collect();
        assert_eq!(statuses, [(Uuid::from_u128(3), "pending"), (Uuid::from_u128(4), "quarantined")]);
        assert_eq!(r.skipped, [ev(5, Some("c"), Some(1))]);
        // What is not published is not expected at the broker or the consumer.
        let b = r.broker.as_ref().expect("broker");
        assert!(b.not_delivered.is_empty() && b.order_violations.is_empty());
        assert!(r.inbox.as_ref().expect("inbox").not_applied.is_empty());
        assert!(r.to_string().contains("last error rejected"));
    }

    #[test]
    fn broker_duplicates_are_listed_but_allowed() {
        let mut s = healthy();
        s.deliveries.as_mut().expect("deliveries").push(ev(2, Some("a"), Some(2)));
        let r = compare(&s);
        assert_eq!(r.broker.as_ref().expect("broker").duplicates, [(Uuid::from_u128(2), 2)]);
        assert!(r.is_clean(), "{r}");
    }

    #[test]
    fn lost_unknown_and_out_of_order_deliveries() {
        let mut s = healthy();
        s.deliveries = Some(vec![
            ev(2, Some("a"), Some(2)), // before 1
            ev(1, Some("a"), Some(1)),
            ev(1, Some("a"), Some(1)),  // a duplicate is not a violation
            ev(77, Some("z"), Some(1)), // no such event
        ]);
        let r = compare(&s);
        let b = r.broker.as_ref().expect("broker");
        assert_eq!(b.order_violations, [OrderViolation { entity: "a".into(), seq: 2, expected: 1 }]);
        assert_eq!(b.unknown, [Uuid::from_u128(77)]);
        assert_eq!(b.not_delivered, [ev(3, Some("a"), Some(3)), ev(4, Some("b"), Some(1))]);
        assert!(!r.is_clean());
    }

    #[test]
    fn a_skipped_predecessor_is_no_order_violation() {
        let mut s = healthy();
        s.outbox[0].status = "skipped".into();
        s.deliveries = Some(vec![ev(2, Some("a"), Some(2)), ev(3, Some("a"), Some(3)), ev(4, Some("b"), Some(1))]);
        let b = compare(&s).broker.expect("broker");
        assert!(b.order_violations.is_empty() && b.not_delivered.is_empty(), "{b:?}");
    }

    #[test]
    fn inbox_missing_unknown_and_double_effects() {
        let mut s = healthy();
        let inbox = &mut s.inbox.as_mut().expect("inbox").1;
        inbox[1].status = "parked".into();
        inbox.remove(3);
        inbox.push(InboxRow { event: ev(88, Some("x"), Some(1)), status: "processed".into() });
        s.effects = Some(vec![Uuid::from_u128(1), Uuid::from_u128(1), Uuid::from_u128(3)]);
        let r = compare(&s);
        let i = r.inbox.as_ref().expect("inbox");
        assert_eq!(
            i.not_applied,
            [(ev(2, Some("a"), Some(2)), Some("parked".into())), (ev(4, Some("b"), Some(1)), None)]
        );
        assert_eq!(i.unknown_applied, [ev(88, Some("x"), Some(1))]);
        assert_eq!(i.applied_twice, [(Uuid::from_u128(1), 2)]);
        let text = r.to_string();
        assert!(text.contains("not in the inbox") && text.contains("x2"), "{text}");
    }

    #[test]
    fn rows_removed_by_retention_are_pruned_not_missing() {
        let mut s = healthy();
        s.outbox.remove(0); // a#1, published, deleted by retention
        let r = compare(&s);
        assert_eq!(r.pruned, 1);
        assert!(r.changes_without_event.is_empty());
        // Its earlier delivery and application are not "unknown".
        assert!(r.broker.as_ref().expect("broker").unknown.is_empty());
        assert!(r.inbox.as_ref().expect("inbox").unknown_applied.is_empty());
        assert!(r.is_clean(), "{r}");
        // Beyond the counter, a missing row is missing.
        s.changes.push(change("a", 5));
        assert_eq!(compare(&s).changes_without_event, [change("a", 4), change("a", 5)]);
    }

    #[test]
    fn long_lists_are_cut_in_the_display() {
        let mut s = healthy();
        s.changes = vec![change("a", 25)];
        let text = compare(&s).to_string();
        assert!(text.contains("business changes without an event: 22") && text.contains("... and 12 more"), "{text}");
    }
}
