//! The bounds of the commands' numbers and the parser of seconds, shared by the flags of every
//! command (a leaf: clap's and std's only).

use std::time::Duration;

/// The longest duration a flag accepts: one day. No lease, timeout, deadline or polling interval
/// worth having is longer, so a larger value is a mistake (milliseconds typed as seconds, a
/// missing decimal point). The bound also keeps every deadline the relay computes from these
/// values (now + lease, a PostgreSQL `interval`) far from overflowing.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// The shortest duration a flag accepts: 1 ms, the relay's resolution; a smaller one would round
/// down to zero.
pub(crate) const MIN_DURATION: Duration = Duration::from_millis(1);
/// At most 10,000 partitions: each is a queue for the consumers, and RabbitMQ is not built for
/// more queues than that per routing scheme.
pub(crate) const MAX_PARTITIONS: u64 = 10_000;
/// At most 100,000 rows per claim: one claim is one statement and one transaction; larger ones
/// hold their locks and their memory for minutes.
pub(crate) const MAX_BATCH_SIZE: u64 = 100_000;

/// A number of seconds (decimals allowed) between [`MIN_DURATION`] and [`MAX_DURATION`].
pub(super) fn seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.trim().parse().map_err(|_| "expected a number of seconds".to_owned())?;
    in_bounds(secs, "seconds", 1.0)
}

/// `value` (in units of `unit_secs` seconds, named `unit`) as a duration within the bounds.
pub(super) fn in_bounds(value: f64, unit: &str, unit_secs: f64) -> Result<Duration, String> {
    let (min, max) = (MIN_DURATION.as_secs_f64() / unit_secs, MAX_DURATION.as_secs_f64() / unit_secs);
    if !value.is_finite() {
        return Err(format!("must be a finite number of {unit}"));
    }
    if value <= 0.0 {
        return Err("must be greater than 0".to_owned());
    }
    if value > max {
        return Err(format!("must be at most {max} {unit} (one day)"));
    }
    if value < min {
        return Err(format!("must be at least {min} {unit}"));
    }
    Duration::try_from_secs_f64(value * unit_secs).map_err(|e| e.to_string())
}
