//! Exponential back-off: the one wait-after-failure rule of the product.

use std::time::Duration;

/// Exponential back-off: `initial` after the first failure, doubling after each further one, at
/// most `max`. Every wait after a failure in the product is one: the publisher's and the consumer
/// runner's reconnects, the relay's claim retries and re-recording, the `outbox` command's start-up
/// retries, and the bound of [`RetryPolicy`](crate::RetryPolicy)'s per-event delays.
///
/// ```
/// use std::time::Duration;
/// use outbox_types::Backoff;
///
/// let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
/// let waits: Vec<u128> = (0..6).map(|_| backoff.fail().as_millis()).collect();
/// assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
/// backoff.reset();
/// assert_eq!(backoff.fail(), Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// A back-off from `initial` doubling up to `max`, with no failure yet.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max, failures: 0 }
    }

    /// The wait after `failures` failures in a row: 0 for none, `initial` for one, doubling, at
    /// most `max` (and never less than `initial`, unless `max` is smaller).
    pub fn delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let doubled = self.initial.saturating_mul(1u32 << (failures - 1).min(31));
        doubled.min(self.max).max(self.initial.min(self.max))
    }

    /// Counts one more failure and returns the wait before the next try.
    pub fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.delay(self.failures)
    }

    /// The wait the last failure asked for (zero after a success).
    pub fn current(&self) -> Duration {
        self.delay(self.failures)
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A success: the next failure waits `initial` again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_initial_to_max_and_never_overflows() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let waits: Vec<u128> = (0..=9).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(waits, [0, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5));
        let inverted = Backoff::new(Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(inverted.delay(1), Duration::from_secs(1));
    }
}
