//! What the relay did since its last summary line (published, failed by kind, taken over), as the
//! line shows it. The line itself is a background task (`tasks.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use outbox_types::FailureKind;

/// What the relay did since the last summary.
#[derive(Debug, Default)]
pub(super) struct Tally {
    published: AtomicU64,
    taken_over: AtomicU64,
    failed: Mutex<BTreeMap<&'static str, u64>>,
}

impl Tally {
    pub(super) fn published(&self, rows: u64) {
        self.published.fetch_add(rows, Ordering::Relaxed);
    }

    pub(super) fn taken_over(&self, rows: u64) {
        self.taken_over.fetch_add(rows, Ordering::Relaxed);
    }

    pub(super) fn failed(&self, kind: FailureKind) {
        *self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(kind.as_str()).or_default() += 1;
    }

    /// Takes what was counted, leaving zeros: published, taken over, failures as `kind=n ...`.
    pub(super) fn take(&self) -> (u64, u64, String) {
        let failed = std::mem::take(&mut *self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let mut text = String::new();
        for (kind, n) in failed {
            let _ = write!(text, "{}{kind}={n}", if text.is_empty() { "" } else { " " });
        }
        if text.is_empty() {
            text.push_str("none");
        }
        (self.published.swap(0, Ordering::Relaxed), self.taken_over.swap(0, Ordering::Relaxed), text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_takes_what_was_counted_and_starts_again_from_zero() {
        let tally = Tally::default();
        tally.published(40);
        tally.published(2);
        tally.failed(FailureKind::Transient);
        tally.failed(FailureKind::Rejected);
        tally.failed(FailureKind::Transient);
        tally.taken_over(3);
        assert_eq!(tally.take(), (42, 3, "rejected=1 transient=2".to_owned()));
        assert_eq!(tally.take(), (0, 0, "none".to_owned()));
    }
}
