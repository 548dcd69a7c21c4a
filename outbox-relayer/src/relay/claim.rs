//! One claim: up to a batch of due rows taken under a fresh claim token, with the corrupt rows it
//! found quarantined and the rows of their entities that follow them given back.

use std::time::{Duration, Instant, SystemTime};

use outbox_types::FailureKind;
use uuid::Uuid;

#[cfg(feature = "fail-points")]
use super::settings::CrashPoint;
use super::shared::Shared;
use crate::Result;
use crate::store;

/// Claims up to `limit` rows under the claim token `token`.
pub(super) async fn claim<P>(shared: &Shared<P>, limit: usize, token: Uuid) -> Result<Vec<store::Claimed>> {
    let s = &shared.settings;
    let claimed = {
        let _one_at_a_time = shared.claiming.lock().await;
        let started = Instant::now();
        let ask = store::Ask { batch: limit, run: s.events_per_entity, low_water: shared.low_water.position() };
        let taken = store::claim(&shared.pool, ask, &s.relay_id, token, s.lease, s.sealed()).await?;
        if !taken.rows.is_empty() || !taken.corrupt.is_empty() {
            shared.low_water.rows_moved();
        }
        metrics::histogram!(crate::metrics::CLAIM_SECONDS, shared.labels.clone())
            .record(started.elapsed().as_secs_f64());
        report_takeovers(shared, &taken.taken_over);
        set_aside_corrupt(shared, taken, token).await?
    };
    metrics::counter!(
        crate::metrics::CLAIMS,
        shared.labels_and("found", if claimed.is_empty() { "none" } else { "rows" })
    )
    .increment(1);
    let now = SystemTime::now();
    for c in &claimed {
        metrics::histogram!(crate::metrics::AGE_AT_CLAIM, shared.labels.clone())
            .record(now.duration_since(c.event.created_at).unwrap_or_default().as_secs_f64());
    }
    #[cfg(feature = "fail-points")]
    if !claimed.is_empty() {
        shared.crash_if(CrashPoint::AfterClaim)?;
    }
    Ok(claimed)
}

/// Quarantines the claimed rows that do not decode into an event (`contract`: a row written by
/// SQL that breaks the schema's promises), and gives back unsent, attempt taken back, the rows of
/// their entities that follow them in the batch, which must not go before them. Returns the rows
/// to publish.
async fn set_aside_corrupt<P>(shared: &Shared<P>, taken: store::Taken, token: Uuid) -> Result<Vec<store::Claimed>> {
    let store::Taken { rows, corrupt, .. } = taken;
    if corrupt.is_empty() {
        return Ok(rows);
    }
    let (rows, held) = hold_back_successors(rows, &corrupt);
    let failures: Vec<store::Failure> = corrupt
        .iter()
        .map(|k| {
            tracing::warn!(event_id = %k.id, what = k.what, kind = %FailureKind::Contract, "outbox.quarantine");
            store::Failure {
                id: k.id,
                quarantine: true,
                delay: Duration::ZERO,
                reason: format!("corrupt row: {} (quarantined)", k.what),
                kind: FailureKind::Contract,
            }
        })
        .collect();
    metrics::counter!(crate::metrics::QUARANTINED, shared.labels.clone()).increment(failures.len() as u64);
    // One transaction: a relay that dies here leaves no successor leased behind a quarantined
    // row, where no claim would take it over.
    let mut tx = shared.pool.begin().await?;
    store::mark_failed(&mut *tx, &failures, token).await?;
    store::release(&mut *tx, &held, token, true).await?;
    tx.commit().await?;
    Ok(rows)
}

/// Splits claimed rows into those to publish and the ids of those to give back: the rows of an
/// entity that follow one of its corrupt rows in sequence.
fn hold_back_successors(mut rows: Vec<store::Claimed>, corrupt: &[store::Corrupt]) -> (Vec<store::Claimed>, Vec<Uuid>) {
    let after_corrupt = |c: &store::Claimed| {
        c.event.entity.as_ref().is_some_and(|e| {
            corrupt.iter().any(|k| {
                k.entity
                    .as_ref()
                    .is_some_and(|(key, seq)| *key == e.key && i64::try_from(e.seq).is_ok_and(|s| s > *seq))
            })
        })
    };
    let held: Vec<Uuid> = rows.iter().filter(|c| after_corrupt(c)).map(|c| *c.event.id.as_uuid()).collect();
    rows.retain(|c| !after_corrupt(c));
    (rows, held)
}

/// Counts the rows taken over from claims whose lease expired, with one line per relay they were
/// taken from: a relay died, stalled or lost its database for longer than its lease.
fn report_takeovers<P>(shared: &Shared<P>, taken_over: &[(String, usize)]) {
    for (from, rows) in taken_over {
        metrics::counter!(crate::metrics::TAKEOVERS, shared.labels.clone()).increment(*rows as u64);
        shared.tally.taken_over(*rows as u64);
        tracing::info!(from = %from, rows, "outbox.takeover: claimed rows whose lease had expired");
    }
}

#[cfg(test)]
mod tests {
    use outbox_types::{Entity, Event, EventId, Payload};

    use super::*;

    /// A claimed row of `entity` at `seq`, or an unordered one.
    fn row(entity: Option<(&str, u64)>) -> store::Claimed {
        let payload = Payload::new(b"{}".to_vec(), "application/json");
        let mut event = Event::new(EventId::new(), "order.placed", payload, SystemTime::now());
        event.entity = entity.map(|(key, seq)| Entity { key: key.to_owned(), seq });
        store::Claimed { event, attempts: 1, tid: "(0,1)".to_owned() }
    }

    fn corrupt(entity: Option<(&str, i64)>) -> store::Corrupt {
        store::Corrupt { id: EventId::new(), entity: entity.map(|(k, s)| (k.to_owned(), s)), what: "negative sequence" }
    }

    #[test]
    fn the_successors_of_a_corrupt_row_are_held_back_and_nothing_else() {
        let rows = vec![
            row(Some(("a", 1))), // before the corrupt a 2: goes out
            row(Some(("a", 3))), // held
            row(Some(("a", 4))), // held
            row(Some(("b", 3))), // another entity: goes out
            row(None),           // unordered: goes out
        ];
        let ids: Vec<Uuid> = rows.iter().map(|c| *c.event.id.as_uuid()).collect();
        let (rows, held) = hold_back_successors(rows, &[corrupt(Some(("a", 2)))]);
        let kept: Vec<Uuid> = rows.iter().map(|c| *c.event.id.as_uuid()).collect();
        assert_eq!(kept, [ids[0], ids[3], ids[4]]);
        assert_eq!(held, [ids[1], ids[2]]);
    }

    #[test]
    fn a_corrupt_row_without_an_entity_holds_nothing_back() {
        let rows = vec![row(Some(("a", 2))), row(None)];
        let (rows, held) = hold_back_successors(rows, &[corrupt(None)]);
        assert_eq!(rows.len(), 2);
        assert!(held.is_empty());
    }
}
