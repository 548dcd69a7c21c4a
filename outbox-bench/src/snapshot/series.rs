//! A count read at a fixed interval over one load run (the events the writers committed, the
//! deliveries the inbox handled), each reading printed as a `#` line, and the rate over the run's
//! last window: under a held snapshot the rate falls as the run goes on, so its end is what counts.

use std::time::Duration;

use tokio::time::Instant;

use super::plan::Plan;
use crate::error::BoxError;
use crate::figure::comment;
use crate::steal::Steal;

/// Readings of a count, each at its time since the run started.
#[derive(Debug, Default)]
pub(super) struct Series {
    points: Vec<(Duration, u64)>,
}

impl Series {
    /// The rate from the last reading at or before `from` (the first reading if none is) to the
    /// first reading at or after `to` (the last reading if none is).
    fn rate_between(&self, from: Duration, to: Duration) -> f64 {
        let first = self.points.iter().rev().find(|(at, _)| *at <= from).or(self.points.first());
        let last = self.points.iter().find(|(at, _)| *at >= to).or(self.points.last());
        let (Some(first), Some(last)) = (first, last) else { return 0.0 };
        let secs = last.0.saturating_sub(first.0).as_secs_f64();
        if secs > 0.0 { last.1.saturating_sub(first.1) as f64 / secs } else { 0.0 }
    }

    /// The rate over the last [`Plan::window`] of the run, which is the run's figure; prints it
    /// beside the rate over the first window, to show how far the run fell.
    pub(super) fn figure(&self, label: &str, unit: &str, plan: Plan) -> f64 {
        let window = plan.window();
        let (first, last) = (self.rate_at_start(window), self.rate_at_end(plan.load, window));
        comment(format_args!(
            "{label}: {first:.1} {unit} over the first {:.0} s, {last:.1} over the last {:.0} s",
            window.as_secs_f64(),
            window.as_secs_f64()
        ));
        last
    }

    /// The rate over the first `window` of the run.
    fn rate_at_start(&self, window: Duration) -> f64 {
        self.rate_between(Duration::ZERO, window)
    }

    /// The rate over the last `window` of a run of `length`.
    fn rate_at_end(&self, length: Duration, window: Duration) -> f64 {
        self.rate_between(length.saturating_sub(window), length)
    }
}

/// Reads `count` at `start` and every [`Plan::every`] after it until [`Plan::load`] has passed,
/// printing each reading as `# <label> <t> s: <count> <unit>, <rate>/s over the last <interval>,
/// steal <x> %`. An error of `count` (where the caller also checks its workers) ends the run.
pub(super) async fn sample(
    label: &str,
    unit: &str,
    plan: Plan,
    start: Instant,
    mut count: impl AsyncFnMut() -> Result<u64, BoxError>,
) -> Result<Series, BoxError> {
    let every = plan.every();
    let mut series = Series { points: vec![(start.elapsed(), count().await?)] };
    let (end, mut next) = (start + plan.load, start);
    let mut steal = Steal::start();
    loop {
        next = (next + every).min(end);
        tokio::time::sleep_until(next).await;
        let at = start.elapsed();
        let n = count().await?;
        let (previous_at, previous) = series.points.last().copied().unwrap_or_default();
        let rate = n.saturating_sub(previous) as f64 / at.saturating_sub(previous_at).as_secs_f64().max(1e-3);
        comment(format_args!(
            "{label} {:.0} s: {n} {unit}, {rate:.1}/s over the last {:.1} s, {}",
            at.as_secs_f64(),
            at.saturating_sub(previous_at).as_secs_f64(),
            steal.describe()
        ));
        series.points.push((at, n));
        steal = Steal::start();
        if next >= end {
            return Ok(series);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(u64, u64)]) -> Series {
        Series { points: points.iter().map(|&(s, n)| (Duration::from_secs(s), n)).collect() }
    }

    #[test]
    fn the_rate_runs_from_the_last_reading_before_the_window() {
        let s = series(&[(0, 0), (10, 1_000), (20, 1_500), (30, 1_800)]);
        assert_eq!(s.rate_at_end(Duration::from_secs(30), Duration::from_secs(10)), 30.0);
        assert_eq!(s.rate_at_end(Duration::from_secs(30), Duration::from_secs(15)), 40.0);
        assert_eq!(s.rate_at_end(Duration::from_secs(30), Duration::from_secs(30)), 60.0);
    }

    #[test]
    fn the_rate_at_the_start_runs_to_the_first_reading_after_the_window() {
        let s = series(&[(0, 0), (10, 1_000), (20, 1_500), (30, 1_800)]);
        assert_eq!(s.rate_at_start(Duration::from_secs(10)), 100.0);
        assert_eq!(s.rate_at_start(Duration::from_secs(15)), 75.0);
        assert_eq!(s.rate_at_start(Duration::from_secs(60)), 60.0);
        let late = Series { points: vec![(Duration::from_millis(5), 0), (Duration::from_secs(10), 1_000)] };
        assert!((late.rate_at_start(Duration::from_secs(10)) - 100.05).abs() < 0.01);
    }

    #[test]
    fn too_few_readings_give_no_rate() {
        assert_eq!(series(&[]).rate_at_end(Duration::from_secs(1), Duration::from_secs(1)), 0.0);
        assert_eq!(series(&[(0, 5)]).rate_at_start(Duration::from_secs(1)), 0.0);
    }
}
