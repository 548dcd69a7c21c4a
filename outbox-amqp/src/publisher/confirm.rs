//! Outcomes decided without the broker's confirm (failed at once), and which message a closed
//! channel blames.

use outbox_types::{ConfirmFuture, FailureKind, PublishFailure, PublishOutcome};

pub(super) fn ready(outcome: PublishOutcome) -> ConfirmFuture {
    Box::pin(std::future::ready(outcome))
}

pub(super) fn failed_all(n: usize, failure: &PublishFailure) -> Vec<ConfirmFuture> {
    (0..n).map(|_| ready(PublishOutcome::Failed(failure.clone()))).collect()
}

/// The broker's size limit from its channel-close text ("message size N is larger than configured
/// max size M").
fn size_limit(reason: &str) -> Option<usize> {
    let rest = &reason[reason.find("max size")? + "max size".len()..];
    rest.split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty())?.parse().ok()
}

/// When the broker closes the channel over one oversized message, every confirm pending on that
/// channel fails with the same error: only the message that is actually too large is rejected,
/// the others are merely unknown (transient).
pub(super) fn blame(mut failure: PublishFailure, body_len: usize) -> PublishFailure {
    if failure.kind == FailureKind::Rejected
        && failure.reason.contains("message size")
        && size_limit(&failure.reason).is_some_and(|max| body_len <= max)
    {
        failure.kind = FailureKind::Transient;
        failure.reason = format!("channel closed by another message's rejection ({})", failure.reason);
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_oversized_message_is_blamed() {
        let reason = "broker error 406: PRECONDITION_FAILED - message size 135266512 is larger than configured max size 134217728";
        assert_eq!(size_limit(reason), Some(134_217_728));
        let failed = || PublishFailure::new(FailureKind::Rejected, reason);
        assert_eq!(blame(failed(), 135_266_512).kind, FailureKind::Rejected);
        assert_eq!(blame(failed(), 300).kind, FailureKind::Transient);
    }
}
