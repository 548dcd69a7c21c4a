//! The comparison itself: pure, in memory, one step per place compared (the business changes,
//! the outbox's own state, the broker's deliveries, a consumer's inbox and effects).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use uuid::Uuid;

use super::report::{BrokerFindings, InboxFindings, OrderViolation, ReconciliationReport};
use super::rows::{Change, EventRef, InboxRow, OutboxRow};
use super::snapshot::Snapshot;

/// Compares a [`Snapshot`]; pure, so every rule is unit-tested.
pub fn compare(s: &Snapshot) -> ReconciliationReport {
    let outbox = Outbox::new(s);
    let mut report = ReconciliationReport {
        outbox_events: s.outbox.len(),
        published: s.outbox.iter().filter(|r| r.status == "published").count(),
        ..ReconciliationReport::default()
    };
    compare_changes(&s.changes, s.since, &outbox, &mut report);
    outbox_state(&s.outbox, &mut report);

    let published: Vec<&OutboxRow> = s.outbox.iter().filter(|r| r.status == "published").collect();
    if let Some(deliveries) = &s.deliveries {
        report.broker = Some(compare_broker(deliveries, &outbox, &published));
    }
    if let Some((consumer, rows)) = &s.inbox {
        let mut inbox = compare_inbox(rows, &outbox, &published);
        inbox.consumer = consumer.clone();
        if let Some(effects) = &s.effects {
            inbox.effects = Some(effects.len());
            inbox.applied_twice = counts_above_one(effects.iter().copied());
        }
        report.inbox = Some(inbox);
    }
    report
}

/// The outbox rows by id and by entity and sequence, with the entity counters.
struct Outbox<'a> {
    by_id: HashMap<Uuid, &'a OutboxRow>,
    by_entity: HashMap<&'a str, BTreeMap<i64, &'a OutboxRow>>,
    counters: &'a HashMap<String, i64>,
}

impl<'a> Outbox<'a> {
    fn new(s: &'a Snapshot) -> Self {
        let by_id = s.outbox.iter().map(|r| (r.event.id, r)).collect();
        let mut by_entity: HashMap<&str, BTreeMap<i64, &OutboxRow>> = HashMap::new();
        for r in &s.outbox {
            if let (Some(e), Some(seq)) = (&r.event.entity, r.event.seq) {
                by_entity.entry(e.as_str()).or_default().insert(seq, r);
            }
        }
        Self { by_id, by_entity, counters: &s.counters }
    }

    /// Whether the event was committed but its row is gone: removed by retention (published or
    /// skipped only).
    fn pruned(&self, entity: Option<&str>, seq: Option<i64>) -> bool {
        match (entity, seq) {
            (Some(e), Some(q)) => {
                self.counters.get(e).is_some_and(|last| q <= *last)
                    && self.by_entity.get(e).is_none_or(|rows| !rows.contains_key(&q))
            }
            _ => false,
        }
    }
}

/// Business changes against the outbox: every entity version and every recorded event id needs
/// its event.
///
/// With `since`, each entity is checked from its lowest listed version (the rows are the versions
/// made since then); otherwise from version 1.
fn compare_changes(changes: &[Change], since: bool, outbox: &Outbox<'_>, report: &mut ReconciliationReport) {
    let mut versions: HashMap<&str, (i64, i64)> = HashMap::new();
    let mut ids: HashSet<Uuid> = HashSet::new();
    for c in changes {
        match c {
            Change::Entity { key, version } => {
                let first = if since { *version } else { 1 };
                let v = versions.entry(key.as_str()).or_insert((first, 0));
                *v = (v.0.min(first), v.1.max(*version));
            }
            Change::Event(id) => {
                ids.insert(*id);
            }
        }
    }
    let mut keys: Vec<&str> = versions.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        compare_entity(key, versions[key], outbox, report);
    }
    let mut ids: Vec<Uuid> = ids.into_iter().collect();
    ids.sort_unstable();
    report.business_changes += ids.len();
    report.changes_without_event.extend(ids.into_iter().filter(|id| !outbox.by_id.contains_key(id)).map(Change::Event));
}

/// An entity that went through versions `first..=version`: each version needs the event of its
/// sequence (or a row pruned by retention), and events beyond the version have no change.
fn compare_entity(key: &str, (first, version): (i64, i64), outbox: &Outbox<'_>, report: &mut ReconciliationReport) {
    report.business_changes += usize::try_from((version - first + 1).max(0)).unwrap_or(0);
    let rows = outbox.by_entity.get(key);
    for v in first..=version {
        if rows.is_some_and(|r| r.contains_key(&v)) {
            continue;
        }
        if outbox.pruned(Some(key), Some(v)) {
            report.pruned += 1;
        } else {
            report.changes_without_event.push(Change::Entity { key: key.to_owned(), version: v });
        }
    }
    if let Some(rows) = rows {
        report.events_without_change.extend(rows.range(version + 1..).map(|(_, r)| r.event.clone()));
    }
}

/// The outbox's own state: events not published yet, and events an operator skipped.
fn outbox_state(rows: &[OutboxRow], report: &mut ReconciliationReport) {
    for r in rows {
        match r.status.as_str() {
            "published" => {}
            "skipped" => report.skipped.push(r.event.clone()),
            _ => report.unpublished.push(r.clone()),
        }
    }
    report.unpublished.sort_by(|a, b| a.event.cmp(&b.event));
    report.skipped.sort();
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

fn compare_broker(deliveries: &[EventRef], outbox: &Outbox<'_>, published: &[&OutboxRow]) -> BrokerFindings {
    let mut findings = BrokerFindings {
        deliveries: deliveries.len(),
        duplicates: counts_above_one(deliveries.iter().map(|d| d.id)),
        ..BrokerFindings::default()
    };
    let arrived: HashSet<Uuid> = deliveries.iter().map(|d| d.id).collect();
    let mut unknown: HashSet<Uuid> = HashSet::new();
    // Per entity: the published sequences that have not arrived yet, lowest first.
    let mut waiting: HashMap<&str, BTreeSet<i64>> = HashMap::new();
    for (entity, rows) in &outbox.by_entity {
        let seqs = rows.iter().filter(|(_, r)| r.status == "published").map(|(s, _)| *s).collect();
        waiting.insert(entity, seqs);
    }
    for d in deliveries {
        if !outbox.by_id.contains_key(&d.id) {
            if !outbox.pruned(d.entity.as_deref(), d.seq) && unknown.insert(d.id) {
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

fn compare_inbox(rows: &[InboxRow], outbox: &Outbox<'_>, published: &[&OutboxRow]) -> InboxFindings {
    let status: HashMap<Uuid, &str> = rows.iter().map(|r| (r.event.id, r.status.as_str())).collect();
    let mut findings = InboxFindings::default();
    for r in rows.iter().filter(|r| r.status == "processed") {
        findings.applied += 1;
        if !outbox.by_id.contains_key(&r.event.id) && !outbox.pruned(r.event.entity.as_deref(), r.event.seq) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::fixtures::{change, ev, healthy, row};

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
}
