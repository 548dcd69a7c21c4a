//! The sizes of one consumer benchmark run: events, entities, duplicates and the time a phase may
//! take.

use std::time::Duration;

/// Sizes of one benchmark run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Events of each fill.
    pub(super) events: u64,
    /// Entities they are spread over.
    pub(super) entities: u64,
    /// Applied events published again.
    pub(super) duplicates: u64,
    /// How long a phase may take before the benchmark fails.
    pub(super) limit: Duration,
}

impl Plan {
    /// Full: 100,000 events over 1,000 entities, 10,000 duplicates, each phase within 5 minutes.
    /// Quick: 5,000 events over 100 entities, 500 duplicates, each phase within a minute.
    pub(crate) fn new(quick: bool) -> Self {
        if quick {
            Self { events: 5_000, entities: 100, duplicates: 500, limit: Duration::from_secs(60) }
        } else {
            Self { events: 100_000, entities: 1_000, duplicates: 10_000, limit: Duration::from_secs(300) }
        }
    }
}
