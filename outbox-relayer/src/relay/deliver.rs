//! One batch's delivery: its rows published run by run (an entity's next event when the one
//! before it is confirmed) and its confirms awaited; then what each row's outcome means is decided
//! (`outcome.rs`), counted, and recorded (`record.rs`).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use outbox_types::{FailureKind, OutgoingMessage, PublishOutcome, Publisher, RetryDecision, wire};
use tokio::sync::watch;
use tracing::{Instrument, Span};
use uuid::Uuid;

use super::outcome::{self, BatchReport, Outcomes, Sent};
use super::record::{self, Recording};
#[cfg(feature = "fail-points")]
use super::settings::CrashPoint;
use super::shared::Shared;
use crate::store;
use crate::{Error, Result};

/// Publishes a claimed batch, awaits its confirms (until the confirm timeout, or until a hard stop
/// cuts the wait short) and records each row's outcome under the claim token.
#[tracing::instrument(name = "outbox.publish_batch", skip_all, fields(events = claimed.len(), claim_token = %token))]
pub(super) async fn deliver<P: Publisher>(
    shared: &Shared<P>,
    claimed: Vec<store::Claimed>,
    token: Uuid,
    hard: watch::Receiver<bool>,
) -> Result<BatchReport> {
    // The claim's lease runs from about now: outcomes are worth recording until it ends.
    let lease_ends = tokio::time::Instant::now() + shared.settings.lease;
    if claimed.is_empty() {
        return Ok(BatchReport::default());
    }
    let sent = publish_runs(shared, &claimed, hard.clone()).await?;
    #[cfg(feature = "fail-points")]
    shared.crash_if(CrashPoint::AfterConfirmBeforeMark)?;
    if shared.crashed.load(Ordering::SeqCst) {
        // Another batch of this relay reached a crash point: it is "dead", it writes nothing.
        return Err(Error::Crashed);
    }
    let now = SystemTime::now();
    let sorted = outcome::sort_outcomes(&claimed, sent, &shared.settings.retry, now);
    count_outcomes(shared, &sorted, now);
    let mut report = BatchReport { claimed: claimed.len(), ..BatchReport::default() };
    record::record(shared, &sorted, token, &mut report, Recording::new(lease_ends, hard)).await?;
    metrics::counter!(crate::metrics::PUBLISHED, shared.labels.clone()).increment(report.published as u64);
    metrics::counter!(crate::metrics::QUARANTINED, shared.labels.clone()).increment(report.quarantined as u64);
    if report.lost_claims > 0 {
        metrics::counter!(crate::metrics::LOST_CLAIMS, shared.labels.clone()).increment(report.lost_claims as u64);
        tracing::warn!(
            lost = report.lost_claims,
            "claims were taken over by another relay before their outcome was recorded"
        );
    }
    tracing::debug!(?report, "outbox.batch");
    Ok(report)
}

/// Publishes the batch's events per entity, in sequence order: an entity's first event goes out at
/// once, each later one when the broker confirmed the one before it (G4). Awaits the confirms
/// until the timeout, or until a hard stop cuts the wait short.
async fn publish_runs<P: Publisher>(
    shared: &Shared<P>,
    claimed: &[store::Claimed],
    mut hard: watch::Receiver<bool>,
) -> Result<Sent> {
    let s = &shared.settings;
    let mut outgoing = encode(shared, claimed);
    let (first, next) = runs(claimed);
    let mut pending = FuturesUnordered::new();
    pending.extend(send(shared, claimed, &first, &mut outgoing).await);
    #[cfg(feature = "fail-points")]
    shared.crash_if(CrashPoint::AfterPublishBeforeConfirm)?;

    let mut outcomes: Vec<Option<PublishOutcome>> = vec![None; claimed.len()];
    let timeout = tokio::time::sleep(s.confirm_timeout);
    tokio::pin!(timeout);
    let mut cut_short = false;
    let mut successors = Vec::new();
    while !pending.is_empty() {
        let mut record = |i: usize, outcome: PublishOutcome| {
            if matches!(outcome, PublishOutcome::Confirmed)
                && let Some(j) = next[i]
            {
                successors.push(j);
            }
            outcomes[i] = Some(outcome);
        };
        tokio::select! {
            Some((i, outcome)) = pending.next() => record(i, outcome),
            () = &mut timeout => break,
            _ = hard.wait_for(|h| *h) => { cut_short = true; break; }
        }
        // Confirms that arrived together: their successors go out in one publish.
        while let Some(Some((i, outcome))) = pending.next().now_or_never() {
            record(i, outcome);
        }
        if !successors.is_empty() {
            pending.extend(send(shared, claimed, &std::mem::take(&mut successors), &mut outgoing).await);
        }
    }
    let unsent = outgoing.iter().map(Option::is_some).collect();
    Ok(Sent { outcomes, unsent, cut_short })
}

/// Each claimed row's message, encoded with the wire contract and routed by the routing strategy;
/// taken out as it is sent.
fn encode<P>(shared: &Shared<P>, claimed: &[store::Claimed]) -> Vec<Option<OutgoingMessage>> {
    let s = &shared.settings;
    claimed
        .iter()
        .map(|c| {
            Some(OutgoingMessage {
                event_id: c.event.id,
                exchange: s.exchange.clone(),
                routing_key: shared.routing.routing_key(&c.event),
                message: wire::encode(&c.event, s.app_id.as_deref()),
            })
        })
        .collect()
}

/// Publishes the rows `which` of a batch (taking their messages out of `outgoing`); returns their
/// confirms, tagged with the rows' indexes. With the feature `otel`, each confirm is awaited in the
/// event's `outbox.publish` span, whose trace context its message carries.
async fn send<P: Publisher>(
    shared: &Shared<P>,
    claimed: &[store::Claimed],
    which: &[usize],
    outgoing: &mut [Option<OutgoingMessage>],
) -> Vec<impl Future<Output = (usize, PublishOutcome)> + use<P>> {
    let mut messages: Vec<_> = which.iter().filter_map(|&i| outgoing[i].take()).collect();
    metrics::counter!(crate::metrics::PUBLISH_ATTEMPTS, shared.labels.clone()).increment(messages.len() as u64);
    let mut spans = publish_spans(claimed, which, &mut messages).into_iter();
    let sent = Instant::now();
    let confirms = shared.publisher.publish(messages).await;
    let to_confirm = metrics::histogram!(crate::metrics::PUBLISH_TO_CONFIRM, shared.labels.clone());
    which
        .iter()
        .zip(confirms)
        .map(|(&i, f)| {
            let to_confirm = to_confirm.clone();
            let confirmed = f.map(move |outcome| {
                to_confirm.record(sent.elapsed().as_secs_f64());
                (i, outcome)
            });
            confirmed.instrument(spans.next().unwrap_or_else(Span::none))
        })
        .collect()
}

/// Counts what became of each row before its outcome is recorded: the commit-to-confirm time of a
/// confirmed row; a failure by kind (and in the summary's tally), with a retry counted, a
/// quarantine logged at `warn` and the failure at `debug`.
fn count_outcomes<P>(shared: &Shared<P>, sorted: &Outcomes<'_>, now: SystemTime) {
    for c in &sorted.published {
        metrics::histogram!(crate::metrics::COMMIT_TO_CONFIRM, shared.labels.clone())
            .record(now.duration_since(c.event.created_at).unwrap_or_default().as_secs_f64());
    }
    for _ in 0..sorted.unavailable {
        shared.tally.failed(FailureKind::Unavailable);
        metrics::counter!(
            crate::metrics::PUBLISH_FAILURES,
            shared.labels_and("kind", FailureKind::Unavailable.as_str())
        )
        .increment(1);
    }
    for outcome::Charged { row: c, failure, decision } in &sorted.charged {
        match decision {
            RetryDecision::RetryAt(_) => {
                metrics::counter!(crate::metrics::PUBLISH_RETRIES, shared.labels_and("kind", failure.kind.as_str()))
                    .increment(1);
            }
            RetryDecision::Quarantine(reason) => {
                tracing::warn!(event_id = %c.event.id, entity = ?c.event.entity.as_ref().map(|e| &e.key),
                    correlation_id = c.event.correlation_id.as_deref(), kind = %failure.kind, %reason, "outbox.quarantine");
            }
        }
        metrics::counter!(crate::metrics::PUBLISH_FAILURES, shared.labels_and("kind", failure.kind.as_str()))
            .increment(1);
        shared.tally.failed(failure.kind);
        tracing::debug!(event_id = %c.event.id, correlation_id = c.event.correlation_id.as_deref(), kind = %failure.kind,
            reason = %failure.reason, attempts = c.attempts, "outbox.publish_failed");
    }
}

/// The `outbox.publish` span of each message about to be sent (the rows `which`), which also
/// takes the span's trace context into the message.
#[cfg(feature = "otel")]
fn publish_spans(claimed: &[store::Claimed], which: &[usize], messages: &mut [OutgoingMessage]) -> Vec<Span> {
    which.iter().zip(messages).map(|(&i, m)| crate::otel::publish_span(&claimed[i].event, &mut m.message)).collect()
}

/// Without the feature `otel`, no span per message.
#[cfg(not(feature = "otel"))]
fn publish_spans(_: &[store::Claimed], _: &[usize], _: &mut [OutgoingMessage]) -> Vec<Span> {
    Vec::new()
}

/// The claimed rows as runs of one entity each: the first row of every run (every unordered row is
/// a run of its own), and for each row the next one of its run, in sequence order.
fn runs(claimed: &[store::Claimed]) -> (Vec<usize>, Vec<Option<usize>>) {
    let mut by_entity: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
    let mut first = Vec::new();
    for (i, c) in claimed.iter().enumerate() {
        match &c.event.entity {
            Some(e) => by_entity.entry(e.key.as_str()).or_default().push(i),
            None => first.push(i),
        }
    }
    let mut next = vec![None; claimed.len()];
    for mut run in by_entity.into_values() {
        run.sort_by_key(|&i| claimed[i].event.entity.as_ref().map(|e| e.seq));
        first.push(run[0]);
        for pair in run.windows(2) {
            next[pair[0]] = Some(pair[1]);
        }
    }
    first.sort_unstable();
    (first, next)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use outbox_types::{Entity, Event, EventId, Payload};

    use super::*;

    /// A claimed row of `entity` at `seq`, or an unordered one.
    fn row(entity: Option<(&str, u64)>) -> store::Claimed {
        store::Claimed {
            event: {
                let payload = Payload::new(b"{}".to_vec(), "application/json");
                let mut event = Event::new(EventId::new(), "order.placed", payload, SystemTime::now());
                event.entity = entity.map(|(key, seq)| Entity { key: key.to_owned(), seq });
                event
            },
            attempts: 1,
            tid: "(0,1)".to_owned(),
        }
    }

    #[test]
    fn runs_start_at_each_entitys_lowest_seq_and_follow_seq_order() {
        let claimed = [
            row(Some(("a", 2))), // 0
            row(None),           // 1
            row(Some(("a", 1))), // 2
            row(Some(("b", 7))), // 3
            row(Some(("a", 3))), // 4
            row(None),           // 5
        ];
        let (first, next) = runs(&claimed);
        assert_eq!(first, [1, 2, 3, 5]);
        assert_eq!(next, [Some(4), None, Some(0), None, None, None]);
    }

    #[test]
    fn every_unordered_row_is_a_run_of_its_own() {
        let claimed = [row(None), row(None), row(None)];
        let (first, next) = runs(&claimed);
        assert_eq!(first, [0, 1, 2]);
        assert_eq!(next, [None, None, None]);
    }

    #[test]
    fn the_runs_of_different_entities_do_not_mix() {
        let claimed = [row(Some(("b", 5))), row(Some(("a", 9))), row(Some(("b", 4))), row(Some(("a", 8)))];
        let (first, next) = runs(&claimed);
        assert_eq!(first, [2, 3]);
        assert_eq!(next, [None, None, Some(0), Some(1)]);
    }

    #[test]
    fn an_empty_batch_has_no_runs() {
        let (first, next) = runs(&[]);
        assert!(first.is_empty());
        assert!(next.is_empty());
    }
}
