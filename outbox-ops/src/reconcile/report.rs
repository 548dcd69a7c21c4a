//! The reconciliation's findings: the report and the report's readable `Display` (ids, entities,
//! sequences, statuses; never payloads).

use std::fmt;

use uuid::Uuid;

use super::rows::{Change, EventRef, OutboxRow};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_are_cut_in_the_display() {
        let report = ReconciliationReport {
            changes_without_event: (4..=25).map(|version| Change::Entity { key: "a".into(), version }).collect(),
            ..ReconciliationReport::default()
        };
        let text = report.to_string();
        assert!(text.contains("business changes without an event: 22") && text.contains("... and 12 more"), "{text}");
    }
}
