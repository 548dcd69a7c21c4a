//! Phase 3, verification: the runner's counts account for every event, and the business table and
//! the inbox hold exactly the effects the plan implies.

use std::collections::HashMap;

use outbox_inbox::RunnerStats;
use sqlx::PgPool;

use super::plan::Plan;
use super::settings::CONSUMER;
use crate::error::BoxError;
use crate::figure::comment;
use crate::wait::{FLOOR, within};

const SHIPMENTS: &str = "SELECT order_key, version, applied FROM shipments";
const INBOX_ROWS: &str = "\
SELECT count(*) FILTER (WHERE status = 'processed'), count(*) FROM inbox_events WHERE consumer = $1";

/// Every event applied, directly or after being parked (with concurrent deliveries a successor can
/// overtake its predecessor; the inbox parks it and applies it right after), every replayed one
/// dropped as a duplicate, nothing stale or dead-lettered. Retries (transient failures) are allowed:
/// they cost time but change no outcome.
pub(super) fn check_stats(stats: &RunnerStats, events: u64, duplicates: u64) -> Result<(), String> {
    if stats.applied + stats.parked == events
        && stats.duplicates == duplicates
        && stats.stale == 0
        && stats.dead_lettered == 0
    {
        Ok(())
    } else {
        Err(format!(
            "the consumer's counts are {stats:?}, expected {events} applied or parked, {duplicates} duplicates, \
             nothing stale or dead-lettered"
        ))
    }
}

/// Checks the business table and the inbox against the plan.
pub(super) async fn verify(pool: &PgPool, plan: Plan) -> Result<(), BoxError> {
    let rows: Vec<(String, i64, i64)> =
        within("the rows of shipments", FLOOR, sqlx::query_as(SHIPMENTS).fetch_all(pool)).await?;
    check_effects(&rows, plan.events, plan.entities)?;
    let inbox_rows = sqlx::query_as(INBOX_ROWS).bind(CONSUMER).fetch_one(pool);
    let (processed, all): (i64, i64) = within("the count of inbox rows", FLOOR, inbox_rows).await?;
    if u64::try_from(processed)? != plan.events || u64::try_from(all)? != plan.events {
        return Err(
            format!("the inbox holds {all} rows, {processed} processed, expected {} of each", plan.events).into()
        );
    }
    comment(format_args!(
        "verified: {} shipments at their last version, each applied once per event; {processed} inbox rows",
        rows.len()
    ));
    Ok(())
}

/// How many of `events` events (event `i` to entity `i % entities`) each entity has, by key.
fn expected_versions(events: u64, entities: u64) -> HashMap<String, u64> {
    (0..entities.min(events))
        .map(|e| (format!("order-{}", e + 1), events / entities + u64::from(e < events % entities)))
        .collect()
}

/// `rows` of `shipments` (key, version, applications) must hold one row per entity, at the
/// entity's last sequence, applied once per event.
fn check_effects(rows: &[(String, i64, i64)], events: u64, entities: u64) -> Result<(), String> {
    let expected = expected_versions(events, entities);
    let mut wrong = Vec::new();
    for (key, version, applied) in rows {
        match expected.get(key) {
            Some(&n) if u64::try_from(*version) == Ok(n) && u64::try_from(*applied) == Ok(n) => {}
            Some(&n) => wrong.push(format!("{key}: version {version}, applied {applied} times, expected {n}")),
            None => wrong.push(format!("{key}: not an entity of the benchmark")),
        }
    }
    if rows.len() != expected.len() {
        wrong.push(format!("{} rows for {} entities", rows.len(), expected.len()));
    }
    if wrong.is_empty() {
        return Ok(());
    }
    let shown = wrong.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    Err(format!("shipments do not hold the expected effects ({} problems): {shown}", wrong.len()))
}

#[cfg(test)]
mod tests {
    use super::super::stats::counts;
    use super::*;
    use crate::amqp::wire_message;

    #[test]
    fn counts_must_account_for_every_event() {
        // applied, duplicates, stale, parked, retried, dead-lettered
        assert!(check_stats(&counts([10, 1, 0, 0, 0, 0]), 10, 1).is_ok());
        assert!(check_stats(&counts([9, 1, 0, 1, 0, 0]), 10, 1).is_ok());
        assert!(check_stats(&counts([10, 1, 0, 0, 3, 0]), 10, 1).is_ok());
        assert!(check_stats(&counts([9, 1, 0, 0, 0, 0]), 10, 1).is_err());
        assert!(check_stats(&counts([10, 0, 0, 0, 0, 0]), 10, 1).is_err());
        assert!(check_stats(&counts([9, 1, 1, 0, 0, 0]), 10, 1).is_err());
        assert!(check_stats(&counts([9, 1, 0, 0, 0, 1]), 10, 1).is_err());
    }

    #[test]
    fn versions_follow_the_round_robin_spread() {
        let v = expected_versions(10, 4);
        assert_eq!(v.len(), 4);
        assert_eq!(v["order-1"], 3); // events 0, 4, 8
        assert_eq!(v["order-2"], 3); // 1, 5, 9
        assert_eq!(v["order-3"], 2);
        assert_eq!(v["order-4"], 2);
        assert_eq!(expected_versions(2, 5).len(), 2);
        // Each wire message carries the sequence the expectation counts to.
        let last = wire_message(9, 4).expect("message");
        assert_eq!(last.headers.get(outbox_types::wire::HEADER_SEQ), Some(&outbox_types::HeaderValue::Int(3)));
        assert_eq!(
            last.headers.get(outbox_types::wire::HEADER_ENTITY),
            Some(&outbox_types::HeaderValue::String("order-2".into()))
        );
    }

    #[test]
    fn effects_must_match_exactly() {
        let good = vec![("order-1".to_owned(), 2, 2), ("order-2".to_owned(), 1, 1)];
        assert!(check_effects(&good, 3, 2).is_ok());
        let twice = vec![("order-1".to_owned(), 2, 3), ("order-2".to_owned(), 1, 1)];
        assert!(check_effects(&twice, 3, 2).is_err());
        let behind = vec![("order-1".to_owned(), 1, 1), ("order-2".to_owned(), 1, 1)];
        assert!(check_effects(&behind, 3, 2).is_err());
        let missing = vec![("order-1".to_owned(), 2, 2)];
        assert!(check_effects(&missing, 3, 2).is_err());
        let stranger = vec![("order-1".to_owned(), 2, 2), ("order-2".to_owned(), 1, 1), ("order-9".to_owned(), 1, 1)];
        assert!(check_effects(&stranger, 3, 2).is_err());
    }
}
