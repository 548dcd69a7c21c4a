//! The sizes and durations of one relay benchmark run: the backlogs to drain, the rounds, the
//! latency window.

use std::time::Duration;

/// A backlog to drain: its size, its entities, and how long the drain may take before it is cut
/// off (far longer than a relay near its targets needs; a cut-off drain counts what it published).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backlog {
    pub(crate) events: u64,
    pub(crate) entities: u64,
    pub(crate) limit: Duration,
}

/// Sizes and durations of one benchmark run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Messages of each raw-publishing round.
    pub(super) ceiling_messages: u64,
    /// The backlog the relay process drains.
    pub(super) drain: Backlog,
    /// How many times it is drained (the round with the median ratio is reported).
    pub(super) drain_rounds: u32,
    /// Latency phase: warm-up (not measured), then the measured window.
    pub(super) latency_warmup: Duration,
    pub(super) latency_window: Duration,
    /// The backlog-size comparison.
    pub(super) small: Backlog,
    pub(super) large: Backlog,
}

impl Plan {
    /// Full: 100,000 raw messages per ceiling round, three drains of 100,000 events over 1,000
    /// entities (each cut off after 90 s), 30 s of latency, 1,000,000 (180 s) against 10,000
    /// events (30 s) over 1,000 entities. Quick: 10,000 raw messages, 10,000 events over 100 entities (15 s), 5 s of
    /// latency, 100,000 (30 s) against 10,000 events (10 s).
    pub(crate) fn new(quick: bool) -> Self {
        let secs = Duration::from_secs;
        if quick {
            Self {
                ceiling_messages: 10_000,
                drain: Backlog { events: 10_000, entities: 100, limit: secs(15) },
                drain_rounds: 1,
                latency_warmup: Duration::from_millis(500),
                latency_window: secs(5),
                small: Backlog { events: 10_000, entities: 1_000, limit: secs(10) },
                large: Backlog { events: 100_000, entities: 1_000, limit: secs(30) },
            }
        } else {
            // For experiments only: `OUTBOX_BENCH_RELAY_DRAIN_ENTITIES` spreads the drained
            // backlog over another number of entities (the figures are defined with 1,000).
            let entities = std::env::var("OUTBOX_BENCH_RELAY_DRAIN_ENTITIES")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(1_000);
            Self {
                ceiling_messages: 100_000,
                drain: Backlog { events: 100_000, entities, limit: secs(90) },
                drain_rounds: 3,
                latency_warmup: secs(1),
                latency_window: secs(30),
                small: Backlog { events: 10_000, entities: 1_000, limit: secs(30) },
                large: Backlog { events: 1_000_000, entities: 1_000, limit: secs(180) },
            }
        }
    }
}
