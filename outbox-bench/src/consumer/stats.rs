//! The runner's counts as the consumer process reports them: the request and answer lines it
//! exchanges with the benchmark, the counts as one line, their sum over runners, and how many
//! deliveries they account for.

use outbox_inbox::{RunnerHandle, RunnerStats};

/// Request: the runner's counts, answered as one [`format_stats`] line.
pub(super) const STATS: &str = "stats";
/// Answer to `consume <queue>`.
pub(super) const CONSUMING: &str = "consuming";

/// One line of counts: `applied=1 duplicates=0 stale=0 parked=0 retried=0 dead_lettered=0`.
pub(crate) fn format_stats(s: &RunnerStats) -> String {
    format!(
        "applied={} duplicates={} stale={} parked={} retried={} dead_lettered={}",
        s.applied, s.duplicates, s.stale, s.parked, s.retried, s.dead_lettered
    )
}

/// Reads a [`format_stats`] line.
pub(super) fn parse_stats(line: &str) -> Result<RunnerStats, String> {
    let mut stats = RunnerStats::default();
    for field in line.split_whitespace() {
        let (name, value) = field.split_once('=').ok_or_else(|| format!("not a count: {field:?}"))?;
        let value: u64 = value.parse().map_err(|_| format!("not a count: {field:?}"))?;
        let slot = match name {
            "applied" => &mut stats.applied,
            "duplicates" => &mut stats.duplicates,
            "stale" => &mut stats.stale,
            "parked" => &mut stats.parked,
            "retried" => &mut stats.retried,
            "dead_lettered" => &mut stats.dead_lettered,
            other => return Err(format!("unknown count {other:?}")),
        };
        *slot = value;
    }
    Ok(stats)
}

/// The counts of all `handles` together.
pub(super) fn sum(handles: &[RunnerHandle]) -> RunnerStats {
    handles.iter().map(RunnerHandle::stats).fold(RunnerStats::default(), |mut a, b| {
        a.applied += b.applied;
        a.duplicates += b.duplicates;
        a.stale += b.stale;
        a.parked += b.parked;
        a.retried += b.retried;
        a.dead_lettered += b.dead_lettered;
        a
    })
}

/// Deliveries acknowledged in all: applied, duplicate, stale, parked or dead-lettered (not retried).
pub(crate) fn handled(stats: &RunnerStats) -> u64 {
    stats.applied + stats.duplicates + stats.stale + stats.parked + stats.dead_lettered
}

/// Runner counts: applied, duplicates, stale, parked, retried, dead-lettered (for tests).
#[cfg(test)]
pub(super) fn counts([applied, duplicates, stale, parked, retried, dead_lettered]: [u64; 6]) -> RunnerStats {
    let mut stats = RunnerStats::default();
    (stats.applied, stats.duplicates, stats.stale) = (applied, duplicates, stale);
    (stats.parked, stats.retried, stats.dead_lettered) = (parked, retried, dead_lettered);
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_lines_round_trip() {
        let stats = counts([100_000, 10_000, 1, 2, 3, 4]);
        let line = format_stats(&stats);
        assert_eq!(line, "applied=100000 duplicates=10000 stale=1 parked=2 retried=3 dead_lettered=4");
        assert_eq!(parse_stats(&line), Ok(stats));
        assert!(parse_stats("applied=1 weird=2").is_err());
        assert!(parse_stats("applied=-1").is_err());
        assert!(parse_stats("unknown request").is_err());
    }

    #[test]
    fn every_delivery_acked_counts_as_handled_but_retries_do_not() {
        let stats = counts([5, 4, 3, 2, 100, 1]);
        assert_eq!(handled(&stats), 15);
    }
}
