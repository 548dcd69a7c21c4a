//! One interval of the steady part's watch: the highest backlog read in it, and at its end a `#`
//! line with the offered rate, the backlog, the relay's commit-to-confirm and claim times of the
//! interval (from the histogram samples the benchmark's metrics recorder kept) and the steal.

use std::time::Duration;

use tokio::time::Instant;

use crate::counters;
use crate::figure::comment;
use crate::relay::{RELAY_STAGES, percentile};
use crate::steal::Steal;

/// The relay's histogram of the time from an event's commit to the broker's confirm.
const COMMIT_TO_CONFIRM: &str = "outbox_commit_to_confirm_seconds";
/// The relay's histogram of its claim statements.
const CLAIM: &str = "outbox_relay_claim_seconds";

/// An interval in progress.
#[derive(Debug)]
pub(super) struct Interval {
    since: Instant,
    committed: u64,
    backlog_max: u64,
    steal: Steal,
}

/// What an interval measured.
#[derive(Debug)]
pub(super) struct Ended {
    /// The highest backlog read in the interval.
    pub(super) backlog_max: u64,
    /// Commit-to-confirm times of the events confirmed in the interval, in ms.
    pub(super) latencies: Vec<f64>,
}

impl Interval {
    /// Starts an interval with `committed` events committed so far.
    pub(super) fn start(committed: u64) -> Self {
        Self { since: Instant::now(), committed, backlog_max: 0, steal: Steal::start() }
    }

    /// How long the interval has run.
    pub(super) fn elapsed(&self) -> Duration {
        self.since.elapsed()
    }

    /// A backlog read during the interval.
    pub(super) fn saw(&mut self, backlog: u64) {
        self.backlog_max = self.backlog_max.max(backlog);
    }

    /// Ends the interval `at` into the run, with `committed` events committed and `backlog` the
    /// last read: prints its line and returns what it measured. Takes every sample the relay's
    /// histograms kept, so that they do not pile up over a long run.
    pub(super) fn end(self, label: &str, at: Duration, committed: u64, backlog: u64) -> Ended {
        let secs = self.since.elapsed().as_secs_f64();
        let offered = committed.saturating_sub(self.committed) as f64 / secs.max(1e-3);
        let latencies = millis(COMMIT_TO_CONFIRM);
        let claims = millis(CLAIM);
        for (name, _) in RELAY_STAGES {
            counters::take_samples(name);
        }
        comment(format_args!(
            "{label} {:.0} s: offered {offered:.1} events/s, backlog {backlog} (at most {}), commit to confirm {}, \
             claim {}, {}",
            at.as_secs_f64(),
            self.backlog_max,
            quantiles(&latencies),
            quantiles(&claims),
            self.steal.describe()
        ));
        Ended { backlog_max: self.backlog_max, latencies }
    }
}

/// The samples a histogram kept since they were last taken, in milliseconds, sorted.
fn millis(histogram: &str) -> Vec<f64> {
    let mut ms: Vec<f64> = counters::take_samples(histogram).into_iter().map(|s| s * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    ms
}

/// `p50 1.20 ms p99 8.00 ms` of sorted values, or `none`.
fn quantiles(sorted: &[f64]) -> String {
    if sorted.is_empty() {
        return "none".to_owned();
    }
    format!("p50 {:.2} ms p99 {:.2} ms", percentile(sorted, 0.50), percentile(sorted, 0.99))
}
