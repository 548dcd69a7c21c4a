//! What each row's outcome means for the row, decided apart from I/O: [`classify_outcome`] reads
//! what became of its message ([`Sent`]), the retry policy decides on a failure of the event's own,
//! and [`sort_outcomes`] gathers what to record for the batch ([`Outcomes`]). Also [`BatchReport`],
//! what a round did.

use std::time::{Duration, SystemTime};

use outbox_types::{FailureKind, PublishFailure, PublishOutcome, RetryDecision, RetryPolicy};
use uuid::Uuid;

use crate::store;

/// What became of a batch's messages, row by row.
pub(super) struct Sent {
    /// Each row's confirm, if it came.
    pub(super) outcomes: Vec<Option<PublishOutcome>>,
    /// Each row's message was never handed to the publisher (an earlier event of its entity in the
    /// batch was not confirmed).
    pub(super) unsent: Vec<bool>,
    /// A hard stop cut the wait for confirms short.
    pub(super) cut_short: bool,
}

/// What one claim-publish-record round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchReport {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows confirmed by the broker and marked published.
    pub published: usize,
    /// Rows scheduled for another attempt.
    pub retried: usize,
    /// Rows moved to quarantine.
    pub quarantined: usize,
    /// Rows whose claim had been taken over by another relay when the outcome was recorded.
    pub lost_claims: usize,
    /// Rows given back unpublished because the relay is shutting down.
    pub released: usize,
    /// Rows given back unsent because an earlier event of their entity in the same batch was not
    /// confirmed (see [`RelayBuilder::events_per_entity`](super::RelayBuilder::events_per_entity)).
    pub held_back: usize,
    /// Rows given back because the broker could not be reached (or the connection was lost before
    /// their confirm came); no attempt is charged, and the relay pauses until the broker answers.
    pub unavailable: usize,
}

/// What to record for a batch, row by row.
#[derive(Default)]
pub(super) struct Outcomes<'a> {
    /// Confirmed rows.
    pub(super) published: Vec<&'a store::Claimed>,
    /// Failures charged to their events, as they are recorded.
    pub(super) failures: Vec<store::Failure>,
    /// The rows of `failures`, in the same order, with each failure as it came and the retry
    /// policy's decision.
    pub(super) charged: Vec<Charged<'a>>,
    /// Sent, outcome unknown, the relay is stopping: given back as they are.
    pub(super) released: Vec<Uuid>,
    /// Not sent, or lost with the broker's connection: given back with the attempt taken back.
    pub(super) unsent: Vec<Uuid>,
    /// Of `unsent`, those the broker's outage kept from going out or being confirmed.
    pub(super) unavailable: usize,
}

/// A row charged with its event's own failure.
pub(super) struct Charged<'a> {
    pub(super) row: &'a store::Claimed,
    /// The failure as the publisher reported it (or the confirm timeout).
    pub(super) failure: PublishFailure,
    /// Retry at a time, or quarantine and why.
    pub(super) decision: RetryDecision,
}

/// What to record for one row of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Disposition {
    /// Confirmed: mark it published.
    Published,
    /// Sent but its confirm was not awaited (the relay is stopping): give it back, attempt kept.
    GiveBack,
    /// Not the event's failure (never sent, or the broker could not be reached): give it back and
    /// take the claim's attempt back.
    TakeBack {
        /// The broker's outage is why.
        unavailable: bool,
    },
    /// The event's own failure: charge it and let the retry policy decide.
    Failed(PublishFailure),
}

/// Decides what a row's outcome means for the row: `unsent` if its message was never handed to the
/// publisher, `cut_short` if a hard stop ended the wait for confirms.
fn classify_outcome(outcome: Option<PublishOutcome>, unsent: bool, cut_short: bool) -> Disposition {
    match outcome {
        Some(PublishOutcome::Confirmed) => Disposition::Published,
        Some(PublishOutcome::Failed(f)) if f.kind == FailureKind::Unavailable => {
            Disposition::TakeBack { unavailable: true }
        }
        Some(PublishOutcome::Failed(f)) => Disposition::Failed(f),
        None if unsent => Disposition::TakeBack { unavailable: false },
        None if cut_short => Disposition::GiveBack,
        None => Disposition::Failed(PublishFailure::new(
            FailureKind::Transient,
            "no confirm from the broker within the confirm timeout",
        )),
    }
}

/// Decides what to record for each row of a batch (see [`classify_outcome`]); a failure of the
/// event's own is retried or quarantined as `retry` decides at `now`.
pub(super) fn sort_outcomes<'a>(
    claimed: &'a [store::Claimed],
    sent: Sent,
    retry: &RetryPolicy,
    now: SystemTime,
) -> Outcomes<'a> {
    let mut sorted = Outcomes::default();
    let rows = claimed.iter().zip(sent.outcomes).zip(sent.unsent);
    for ((c, outcome), unsent) in rows {
        match classify_outcome(outcome, unsent, sent.cut_short) {
            Disposition::Published => sorted.published.push(c),
            Disposition::GiveBack => sorted.released.push(*c.event.id.as_uuid()),
            Disposition::TakeBack { unavailable } => {
                sorted.unavailable += usize::from(unavailable);
                sorted.unsent.push(*c.event.id.as_uuid());
            }
            Disposition::Failed(failure) => {
                let decision = retry.decide(c.attempts, c.event.created_at, now, failure.kind);
                sorted.failures.push(failure_to_record(c, &failure, decision, now));
                sorted.charged.push(Charged { row: c, failure, decision });
            }
        }
    }
    sorted
}

/// What to record for a row charged with `failure`: due again when the retry policy said, or
/// quarantined.
fn failure_to_record(
    c: &store::Claimed,
    failure: &PublishFailure,
    decision: RetryDecision,
    now: SystemTime,
) -> store::Failure {
    let (quarantine, delay) = match decision {
        RetryDecision::RetryAt(t) => (false, t.duration_since(now).unwrap_or_default()),
        RetryDecision::Quarantine(_) => (true, Duration::ZERO),
    };
    let reason = if quarantine { format!("{} (quarantined)", failure.reason) } else { failure.reason.clone() };
    store::Failure { id: c.event.id, quarantine, delay, reason, kind: failure.kind }
}

#[cfg(test)]
mod tests {
    use outbox_types::{Entity, Event, EventId, Payload};

    use super::*;

    /// Every combination of the `unsent` and `cut_short` flags.
    const FLAGS: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];

    #[test]
    fn a_confirmed_row_is_published() {
        for (unsent, cut_short) in FLAGS {
            assert_eq!(
                classify_outcome(Some(PublishOutcome::Confirmed), unsent, cut_short),
                Disposition::Published,
                "unsent {unsent}, cut short {cut_short}"
            );
        }
    }

    #[test]
    fn a_row_the_broker_could_not_be_reached_for_is_taken_back_as_unavailable() {
        let failure = PublishFailure::new(FailureKind::Unavailable, "connection lost");
        for (unsent, cut_short) in FLAGS {
            assert_eq!(
                classify_outcome(Some(PublishOutcome::Failed(failure.clone())), unsent, cut_short),
                Disposition::TakeBack { unavailable: true },
                "unsent {unsent}, cut short {cut_short}"
            );
        }
    }

    #[test]
    fn any_other_failure_is_charged_to_the_event_as_it_came() {
        let kinds = [FailureKind::Transient, FailureKind::Contract, FailureKind::Auth, FailureKind::Rejected];
        for kind in kinds {
            let failure = PublishFailure::new(kind, "reply 312 NO_ROUTE");
            for (unsent, cut_short) in FLAGS {
                assert_eq!(
                    classify_outcome(Some(PublishOutcome::Failed(failure.clone())), unsent, cut_short),
                    Disposition::Failed(failure.clone()),
                    "{kind}, unsent {unsent}, cut short {cut_short}"
                );
            }
        }
    }

    #[test]
    fn a_row_never_sent_is_taken_back_not_unavailable() {
        // Unsent wins over a hard stop: the row never went out, so its attempt is taken back.
        for cut_short in [false, true] {
            assert_eq!(
                classify_outcome(None, true, cut_short),
                Disposition::TakeBack { unavailable: false },
                "cut short {cut_short}"
            );
        }
    }

    #[test]
    fn a_sent_row_whose_wait_a_hard_stop_cut_short_is_given_back() {
        assert_eq!(classify_outcome(None, false, true), Disposition::GiveBack);
    }

    #[test]
    fn a_sent_row_without_a_confirm_by_the_timeout_is_a_transient_failure() {
        let Disposition::Failed(f) = classify_outcome(None, false, false) else {
            panic!("not a failure");
        };
        assert_eq!(f.kind, FailureKind::Transient);
        assert!(f.reason.starts_with("no confirm"), "{}", f.reason);
        assert!(f.reason.ends_with("within the confirm timeout"), "{}", f.reason);
    }

    /// A claimed row of entity `a` at `seq`, attempted once.
    fn row(seq: u64) -> store::Claimed {
        let payload = Payload::new(b"{}".to_vec(), "application/json");
        let mut event = Event::new(EventId::new(), "order.placed", payload, SystemTime::now());
        event.entity = Some(Entity { key: "a".to_owned(), seq });
        store::Claimed { event, attempts: 1, tid: format!("(0,{seq})") }
    }

    /// A policy without jitter: every retry is due 2 s later.
    fn two_seconds() -> RetryPolicy {
        RetryPolicy::default().initial_delay(Duration::from_secs(2)).max_delay(Duration::from_secs(2))
    }

    #[test]
    fn each_row_is_sorted_into_what_to_record_for_it() {
        let claimed: Vec<_> = (1..=5).map(row).collect();
        let failed = |kind| Some(PublishOutcome::Failed(PublishFailure::new(kind, "reply 312 NO_ROUTE")));
        let sent = Sent {
            outcomes: vec![
                Some(PublishOutcome::Confirmed),
                failed(FailureKind::Unavailable),
                None,
                None,
                failed(FailureKind::Rejected),
            ],
            unsent: vec![false, false, true, false, false],
            cut_short: false,
        };
        let now = SystemTime::now();
        let sorted = sort_outcomes(&claimed, sent, &two_seconds(), now);
        let id = |i: usize| *claimed[i].event.id.as_uuid();
        assert_eq!(sorted.published.iter().map(|c| c.tid.as_str()).collect::<Vec<_>>(), ["(0,1)"]);
        assert_eq!(sorted.unsent, [id(1), id(2)]);
        assert_eq!(sorted.unavailable, 1);
        assert!(sorted.released.is_empty());

        // The timed-out row is retried after the policy's delay; the rejected one is quarantined.
        let [retried, quarantined] = &sorted.failures[..] else { panic!("two failures: {:?}", sorted.failures) };
        assert_eq!((*retried.id.as_uuid(), retried.quarantine, retried.delay), (id(3), false, Duration::from_secs(2)));
        assert_eq!(retried.kind, FailureKind::Transient);
        assert_eq!(retried.reason, "no confirm from the broker within the confirm timeout");
        assert_eq!((*quarantined.id.as_uuid(), quarantined.quarantine), (id(4), true));
        assert_eq!(quarantined.delay, Duration::ZERO);
        assert_eq!(quarantined.reason, "reply 312 NO_ROUTE (quarantined)");
        let charged: Vec<_> = sorted.charged.iter().map(|c| (c.row.tid.as_str(), c.failure.kind)).collect();
        assert_eq!(charged, [("(0,4)", FailureKind::Transient), ("(0,5)", FailureKind::Rejected)]);
        assert_eq!(sorted.charged[0].decision, RetryDecision::RetryAt(now + Duration::from_secs(2)));
        assert!(matches!(sorted.charged[1].decision, RetryDecision::Quarantine(_)));
    }

    #[test]
    fn a_hard_stop_gives_back_the_sent_rows_it_cut_short_and_charges_nothing() {
        let claimed: Vec<_> = (1..=3).map(row).collect();
        let sent = Sent {
            outcomes: vec![Some(PublishOutcome::Confirmed), None, None],
            unsent: vec![false, false, true],
            cut_short: true,
        };
        let sorted = sort_outcomes(&claimed, sent, &two_seconds(), SystemTime::now());
        assert_eq!(sorted.published.len(), 1);
        assert_eq!(sorted.released, [*claimed[1].event.id.as_uuid()]);
        assert_eq!(sorted.unsent, [*claimed[2].event.id.as_uuid()]);
        assert!(sorted.failures.is_empty() && sorted.charged.is_empty());
    }
}
