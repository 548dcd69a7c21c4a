//! What each row's outcome means for the row, decided apart from I/O ([`classify_outcome`]), what
//! to record for a batch ([`Outcomes`]), and what a round did ([`BatchReport`]).

use std::time::{Duration, SystemTime};

use outbox_core::{FailureKind, PublishFailure, PublishOutcome, Publisher, RetryDecision};
use uuid::Uuid;

use super::Relay;
use super::deliver::Sent;
use crate::store;

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
    /// Tuple ids of confirmed rows.
    pub(super) published: Vec<&'a str>,
    /// Failures charged to their events.
    pub(super) failures: Vec<store::Failure>,
    /// Sent, outcome unknown, the relay is stopping: given back as they are.
    pub(super) released: Vec<Uuid>,
    /// Not sent, or lost with the broker's connection: given back with the attempt taken back.
    pub(super) unsent: Vec<Uuid>,
    /// Of `unsent`, those the broker's outage kept from going out or being confirmed.
    pub(super) unavailable: usize,
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

impl<P: Publisher> Relay<P> {
    /// Decides what to record for each row of the batch (see [`classify_outcome`]).
    pub(super) fn sort_outcomes<'a>(&self, claimed: &'a [store::Claimed], sent: Sent) -> Outcomes<'a> {
        let now = SystemTime::now();
        let mut sorted = Outcomes::default();
        let rows = claimed.iter().zip(sent.outcomes).zip(sent.unsent);
        for ((c, outcome), unsent) in rows {
            let id = c.event.id;
            let failure = match classify_outcome(outcome, unsent, sent.cut_short) {
                Disposition::Published => {
                    sorted.published.push(c.tid.as_str());
                    metrics::histogram!(crate::metrics::COMMIT_TO_CONFIRM)
                        .record(now.duration_since(c.event.created_at).unwrap_or_default().as_secs_f64());
                    continue;
                }
                Disposition::GiveBack => {
                    sorted.released.push(*id.as_uuid());
                    continue;
                }
                Disposition::TakeBack { unavailable } => {
                    if unavailable {
                        self.shared.tally.failed(FailureKind::Unavailable);
                        metrics::counter!(crate::metrics::PUBLISH_FAILURES, "kind" => FailureKind::Unavailable.as_str())
                            .increment(1);
                    }
                    sorted.unavailable += usize::from(unavailable);
                    sorted.unsent.push(*id.as_uuid());
                    continue;
                }
                Disposition::Failed(f) => f,
            };
            sorted.failures.push(self.charge(c, failure, now));
        }
        sorted
    }

    /// Charges a row with its event's failure: the retry policy decides whether it is retried (and
    /// when) or quarantined.
    fn charge(&self, c: &store::Claimed, failure: PublishFailure, now: SystemTime) -> store::Failure {
        let s = &self.shared.settings;
        let id = c.event.id;
        let (quarantine, delay) = match s.retry.decide(c.attempts, c.event.created_at, now, failure.kind) {
            RetryDecision::RetryAt(t) => {
                metrics::counter!(crate::metrics::PUBLISH_RETRIES, "kind" => failure.kind.as_str()).increment(1);
                (false, t.duration_since(now).unwrap_or_default())
            }
            RetryDecision::Quarantine(reason) => {
                tracing::warn!(event_id = %id, entity = ?c.event.entity.as_ref().map(|e| &e.key),
                    correlation_id = c.event.correlation_id.as_deref(), kind = %failure.kind, %reason, "outbox.quarantine");
                (true, Duration::ZERO)
            }
        };
        metrics::counter!(crate::metrics::PUBLISH_FAILURES, "kind" => failure.kind.as_str()).increment(1);
        self.shared.tally.failed(failure.kind);
        tracing::debug!(event_id = %id, correlation_id = c.event.correlation_id.as_deref(), kind = %failure.kind,
            reason = %failure.reason, attempts = c.attempts, "outbox.publish_failed");
        let reason = if quarantine { format!("{} (quarantined)", failure.reason) } else { failure.reason };
        store::Failure { id, quarantine, delay, reason, kind: failure.kind }
    }
}

#[cfg(test)]
mod tests {
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
}
