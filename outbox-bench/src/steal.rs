//! The host's CPU steal: the share of its processors' time the hypervisor gave to other guests,
//! from the first line of `/proc/stat`. Figures taken while steal is above a few percent measured
//! the neighbours as much as the code, so a benchmark prints it beside them.

/// The host's CPU time counters at one moment, in clock ticks: steal, and every kind together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ticks {
    steal: u64,
    total: u64,
}

impl Ticks {
    /// Reads `/proc/stat` now; `None` where it cannot be read.
    fn now() -> Option<Self> {
        parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }
}

/// Steal measured from a start: [`Steal::start`], then [`Steal::percent`] at any later time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Steal(Option<Ticks>);

impl Steal {
    /// Starts measuring now.
    pub(crate) fn start() -> Self {
        Self(Ticks::now())
    }

    /// Percent of the host's CPU time stolen since the start; `None` where `/proc/stat` cannot be
    /// read or no time has passed.
    pub(crate) fn percent(&self) -> Option<f64> {
        let (start, end) = (self.0?, Ticks::now()?);
        percent(start, end)
    }

    /// The steal since the start as the `#` lines print it: `steal 1.2 %`, or `steal unknown`.
    pub(crate) fn describe(&self) -> String {
        self.percent().map_or_else(|| "steal unknown".to_owned(), |p| format!("steal {p:.1} %"))
    }
}

/// Percent of the time from `start` to `end` that was stolen; `None` if no tick passed.
fn percent(start: Ticks, end: Ticks) -> Option<f64> {
    let total = end.total.checked_sub(start.total).filter(|t| *t > 0)?;
    Some(end.steal.saturating_sub(start.steal) as f64 * 100.0 / total as f64)
}

/// The `cpu` line of a `/proc/stat` text: user, nice, system, idle, iowait, irq, softirq, steal
/// (guest time is counted in user already, so it is left out of the total).
fn parse(stat: &str) -> Option<Ticks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    Some(Ticks { steal: *fields.get(7)?, total: fields.iter().sum() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_line_gives_steal_and_total() {
        let stat = "cpu  3737 0 2228 67594 323 0 62 40 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse(stat), Some(Ticks { steal: 40, total: 3737 + 2228 + 67594 + 323 + 62 + 40 }));
        assert_eq!(parse("cpu  1 2 3\n"), None);
        assert_eq!(parse("intr 1 2\n"), None);
    }

    #[test]
    fn steal_is_a_share_of_the_time_that_passed() {
        let start = Ticks { steal: 10, total: 1_000 };
        assert_eq!(percent(start, Ticks { steal: 30, total: 1_200 }), Some(10.0));
        assert_eq!(percent(start, start), None);
    }

    #[test]
    fn this_host_can_be_read() {
        assert!(Steal::start().0.is_some());
    }
}
