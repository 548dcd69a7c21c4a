//! The sizes and durations of one `snapshot` run, from `--quick` and the command's arguments.

use std::time::Duration;

use crate::relay::Backlog;

/// Entities of the drained backlog and of the steady load.
const ENTITIES: u64 = 1_000;
/// The longest window a load run's rate is taken over: its last minute.
const LONGEST_WINDOW: Duration = Duration::from_secs(60);

/// Sizes and durations of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// The backlog drained free and with the snapshot held.
    pub(super) drain: Backlog,
    /// Each steady relay run (free, then held).
    pub(super) steady: Duration,
    /// Entities of the steady load.
    pub(super) steady_entities: u64,
    /// Each producer and inbox run (hot and many entities, free and held).
    pub(super) load: Duration,
}

impl Plan {
    /// Full: a backlog of 200,000 events over 1,000 entities (each drain cut off after 600 s), steady
    /// runs of `steady_secs` (600 s by default), producer and inbox runs of `load_secs` (600 s by
    /// default). Quick: 20,000 events (cut off after 60 s), 20 s steady, 10 s of load.
    pub(crate) fn new(quick: bool, steady_secs: Option<u64>, load_secs: Option<u64>) -> Self {
        let secs = Duration::from_secs;
        let (events, limit, steady, load) = if quick { (20_000, 60, 20, 10) } else { (200_000, 600, 600, 600) };
        Self {
            drain: Backlog { events, entities: ENTITIES, limit: secs(limit) },
            steady: secs(steady_secs.unwrap_or(steady).max(1)),
            steady_entities: ENTITIES,
            load: secs(load_secs.unwrap_or(load).max(1)),
        }
    }

    /// The end of a load run whose rate is reported: its last minute, or its last fifth if that is
    /// shorter (the last 2 s of a quick run).
    pub(super) fn window(&self) -> Duration {
        (self.load / 5).min(LONGEST_WINDOW)
    }

    /// How often a load run's count is sampled and printed: a thirtieth of the run, between 1 s and
    /// 10 s.
    pub(super) fn every(&self) -> Duration {
        (self.load / 30).clamp(Duration::from_secs(1), Duration::from_secs(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_last_minute_or_the_last_fifth() {
        assert_eq!(Plan::new(false, None, None).window(), Duration::from_secs(60));
        assert_eq!(Plan::new(true, None, None).window(), Duration::from_secs(2));
        assert_eq!(Plan::new(false, None, Some(60)).window(), Duration::from_secs(12));
    }

    #[test]
    fn samples_come_every_thirtieth_between_one_and_ten_seconds() {
        assert_eq!(Plan::new(false, None, None).every(), Duration::from_secs(10));
        assert_eq!(Plan::new(true, None, None).every(), Duration::from_secs(1));
        assert_eq!(Plan::new(false, None, Some(60)).every(), Duration::from_secs(2));
    }

    #[test]
    fn arguments_override_the_defaults() {
        let plan = Plan::new(true, Some(60), Some(45));
        assert_eq!((plan.steady, plan.load), (Duration::from_secs(60), Duration::from_secs(45)));
        assert_eq!(plan.drain.events, 20_000);
    }
}
