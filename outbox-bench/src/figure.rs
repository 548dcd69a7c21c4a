//! The output format shared by every benchmark: `figure: <name> = <value> <unit>` lines, and
//! comment lines starting with `#`.

use std::fmt;

/// The value of a figure, which decides how many decimals it is printed with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    /// A whole number: a count of clients, events, rows.
    Count(u64),
    /// A rate (per second): one decimal.
    Rate(f64),
    /// A ratio of two figures of the same run: three decimals.
    Ratio(f64),
    /// A duration in milliseconds: two decimals.
    Millis(f64),
    /// A size in MiB: one decimal.
    Mebibytes(f64),
    /// A share in percent: one decimal.
    Percent(f64),
    /// A duration in seconds: three decimals.
    Seconds(f64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Rate(r) => write!(f, "{r:.1}"),
            Self::Ratio(r) => write!(f, "{r:.3}"),
            Self::Millis(ms) => write!(f, "{ms:.2}"),
            Self::Mebibytes(mib) => write!(f, "{mib:.1}"),
            Self::Percent(pct) => write!(f, "{pct:.1}"),
            Self::Seconds(s) => write!(f, "{s:.3}"),
        }
    }
}

/// One figure line, without the line break.
pub(crate) fn line(name: &str, value: Value, unit: &str) -> String {
    format!("figure: {name} = {value} {unit}")
}

/// Prints one figure on its own line.
pub(crate) fn figure(name: &str, value: Value, unit: &str) {
    println!("{}", line(name, value, unit));
}

/// Prints a comment line (`# ...`): targets, per-run detail, anything that is not a figure.
pub(crate) fn comment(text: impl fmt::Display) {
    println!("# {text}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_lines_have_the_documented_shape() {
        assert_eq!(line("producer_clients", Value::Count(8), "clients"), "figure: producer_clients = 8 clients");
        assert_eq!(
            line("producer_business_tps", Value::Rate(1234.56), "tps"),
            "figure: producer_business_tps = 1234.6 tps"
        );
        assert_eq!(
            line("producer_overhead_ratio", Value::Ratio(1.23456), "x"),
            "figure: producer_overhead_ratio = 1.235 x"
        );
        assert_eq!(
            line("relay_latency_p99_ms", Value::Millis(12.3456), "ms"),
            "figure: relay_latency_p99_ms = 12.35 ms"
        );
        assert_eq!(line("relay_peak_rss_mib", Value::Mebibytes(21.04), "MiB"), "figure: relay_peak_rss_mib = 21.0 MiB");
        assert_eq!(line("snapshot_cpu_steal", Value::Percent(1.26), "%"), "figure: snapshot_cpu_steal = 1.3 %");
        assert_eq!(line("backlog_seconds", Value::Seconds(0.12345), "s"), "figure: backlog_seconds = 0.123 s");
    }
}
