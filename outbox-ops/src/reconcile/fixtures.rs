//! Snapshots for the unit tests of the comparison.

use uuid::Uuid;

use super::rows::{Change, EventRef, InboxRow, OutboxRow};
use super::snapshot::Snapshot;

pub(super) fn ev(n: u128, entity: Option<&str>, seq: Option<i64>) -> EventRef {
    EventRef { id: Uuid::from_u128(n), entity: entity.map(str::to_owned), seq }
}

pub(super) fn row(n: u128, entity: &str, seq: i64, status: &str) -> OutboxRow {
    OutboxRow { event: ev(n, Some(entity), Some(seq)), status: status.to_owned(), attempts: 1, last_error_kind: None }
}

pub(super) fn change(key: &str, version: i64) -> Change {
    Change::Entity { key: key.to_owned(), version }
}

/// Orders a (3 versions) and b (1), all published, delivered once, applied once.
pub(super) fn healthy() -> Snapshot {
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
        since: false,
    }
}
