use std::time::{Duration, SystemTime};

use rand::Rng;

use crate::FailureKind;

/// What to do with an event after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again, not before this time.
    RetryAt(SystemTime),
    /// Stop trying; move the event to quarantine for an operator.
    Quarantine(QuarantineReason),
}

/// Why the [`RetryPolicy`] gave up on an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuarantineReason {
    /// The failure is of a permanent kind; retrying cannot help.
    #[error("permanent failure ({0})")]
    Permanent(FailureKind),
    /// The event used up its attempts.
    #[error("gave up after {attempts} attempts (maximum {max})")]
    AttemptsExhausted {
        /// Attempts made.
        attempts: u32,
        /// The policy's maximum.
        max: u32,
    },
    /// The event is older than the policy's maximum age.
    #[error("gave up after {}s (maximum age {}s)", age.as_secs(), max.as_secs())]
    TooOld {
        /// The event's age.
        age: Duration,
        /// The policy's maximum.
        max: Duration,
    },
}

/// Exponential backoff with full jitter, a cap, a maximum number of attempts and a maximum age.
///
/// After the `n`-th failed attempt (n ≥ 1) the next attempt waits a random delay, uniform between
/// the initial delay and `min(cap, initial × 2^(n-1))` ("full jitter" above a floor, so no retry is
/// ever immediate: there is no hot loop). Permanent kinds ([`FailureKind::is_permanent`]) are
/// quarantined at once; [`FailureKind::Unavailable`] is not the event's failure and is retried at
/// once without counting against it.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use outbox_types::{FailureKind, RetryDecision, RetryPolicy};
/// use rand::SeedableRng;
///
/// let policy = RetryPolicy::default().initial_delay(Duration::from_millis(100)).max_attempts(3);
/// let mut rng = rand::rngs::StdRng::seed_from_u64(7);
/// let now = SystemTime::now();
/// assert!(matches!(
///     policy.decide_with_rng(1, now, now, FailureKind::Transient, &mut rng),
///     RetryDecision::RetryAt(_)
/// ));
/// assert!(matches!(
///     policy.decide_with_rng(3, now, now, FailureKind::Transient, &mut rng),
///     RetryDecision::Quarantine(_)
/// ));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    initial_delay: Duration,
    max_delay: Duration,
    max_attempts: u32,
    max_age: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(300),
            max_attempts: 50,
            max_age: Duration::from_secs(24 * 3600),
        }
    }
}

impl RetryPolicy {
    /// Sets the delay after the first failure, and the floor of every delay. Defaults to 500 ms.
    #[must_use]
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Sets the cap on a single delay. Defaults to 5 minutes.
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Sets how many attempts an event gets before quarantine. Defaults to 50 (with the default
    /// delays, two to four hours of continuous failure).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets the age after which a failing event is quarantined instead of retried. Defaults to 24 hours.
    #[must_use]
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = age;
        self
    }

    /// The configured maximum number of attempts.
    pub fn attempts_limit(&self) -> u32 {
        self.max_attempts
    }

    /// The upper bound of the delay after `attempts` failed attempts (before jitter).
    pub fn delay_bound(&self, attempts: u32) -> Duration {
        crate::Backoff::new(self.initial_delay, self.max_delay).delay(attempts.max(1))
    }

    /// Decides what follows a failed attempt, with the thread's random source.
    ///
    /// `attempts` counts the attempts made so far, including the one that just failed.
    pub fn decide(&self, attempts: u32, created_at: SystemTime, now: SystemTime, kind: FailureKind) -> RetryDecision {
        self.decide_with_rng(attempts, created_at, now, kind, &mut rand::rng())
    }

    /// Decides what follows a failed attempt, drawing the jitter from `rng`.
    pub fn decide_with_rng<R: Rng + ?Sized>(
        &self,
        attempts: u32,
        created_at: SystemTime,
        now: SystemTime,
        kind: FailureKind,
        rng: &mut R,
    ) -> RetryDecision {
        match kind {
            FailureKind::Contract | FailureKind::Rejected => {
                return RetryDecision::Quarantine(QuarantineReason::Permanent(kind));
            }
            FailureKind::Unavailable => return RetryDecision::RetryAt(now),
            FailureKind::Transient | FailureKind::Auth => {}
        }
        if attempts >= self.max_attempts {
            return RetryDecision::Quarantine(QuarantineReason::AttemptsExhausted { attempts, max: self.max_attempts });
        }
        let age = now.duration_since(created_at).unwrap_or_default();
        if age >= self.max_age {
            return RetryDecision::Quarantine(QuarantineReason::TooOld { age, max: self.max_age });
        }
        let floor = self.initial_delay.min(self.max_delay);
        let bound = self.delay_bound(attempts);
        let delay = if bound > floor {
            let nanos = rng.random_range(floor.as_nanos()..=bound.as_nanos());
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
        } else {
            floor
        };
        RetryDecision::RetryAt(now + delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
            .initial_delay(Duration::from_millis(100))
            .max_delay(Duration::from_secs(10))
            .max_attempts(10)
            .max_age(Duration::from_secs(3600))
    }

    fn delay(d: RetryDecision, now: SystemTime) -> Duration {
        match d {
            RetryDecision::RetryAt(t) => t.duration_since(now).expect("in the future"),
            RetryDecision::Quarantine(r) => panic!("unexpected quarantine: {r}"),
        }
    }

    #[test]
    fn delays_grow_exponentially_within_jitter_bounds() {
        let p = policy();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut rng = StdRng::seed_from_u64(42);
        for attempt in 1..10 {
            let bound = Duration::from_millis(100 * (1 << (attempt - 1))).min(Duration::from_secs(10));
            assert_eq!(p.delay_bound(attempt), bound);
            for _ in 0..200 {
                let d = delay(p.decide_with_rng(attempt, now, now, FailureKind::Transient, &mut rng), now);
                assert!(
                    d >= Duration::from_millis(100) && d <= bound,
                    "attempt {attempt}: {d:?} outside [100ms, {bound:?}]"
                );
            }
        }
    }

    #[test]
    fn jitter_spreads_and_is_reproducible_with_a_seed() {
        let p = policy();
        let now = SystemTime::UNIX_EPOCH;
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..50).map(|_| delay(p.decide_with_rng(6, now, now, FailureKind::Auth, &mut rng), now)).collect::<Vec<_>>()
        };
        let a = draw(1);
        assert_eq!(a, draw(1), "same seed, same delays");
        assert_ne!(a, draw(2));
        let mean = a.iter().sum::<Duration>() / 50;
        // Uniform over [100ms, 3.2s]: the mean is near 1.65s, far from both ends.
        assert!(mean > Duration::from_millis(1000) && mean < Duration::from_millis(2300), "mean {mean:?}");
    }

    #[test]
    fn cap_holds_for_huge_attempt_counts() {
        let p = policy().max_attempts(u32::MAX);
        let now = SystemTime::UNIX_EPOCH;
        let mut rng = StdRng::seed_from_u64(3);
        for attempt in [31, 32, 64, 1000, u32::MAX - 1] {
            assert!(
                delay(p.decide_with_rng(attempt, now, now, FailureKind::Transient, &mut rng), now)
                    <= Duration::from_secs(10)
            );
        }
    }

    #[test]
    fn quarantines_on_attempts_age_and_permanent_kinds() {
        let p = policy();
        let created = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let mut rng = StdRng::seed_from_u64(0);
        assert_eq!(
            p.decide_with_rng(10, created, created, FailureKind::Transient, &mut rng),
            RetryDecision::Quarantine(QuarantineReason::AttemptsExhausted { attempts: 10, max: 10 })
        );
        let old = created + Duration::from_secs(3600);
        assert!(matches!(
            p.decide_with_rng(2, created, old, FailureKind::Transient, &mut rng),
            RetryDecision::Quarantine(QuarantineReason::TooOld { .. })
        ));
        for kind in [FailureKind::Contract, FailureKind::Rejected] {
            assert_eq!(
                p.decide_with_rng(1, created, created, kind, &mut rng),
                RetryDecision::Quarantine(QuarantineReason::Permanent(kind))
            );
        }
        assert_eq!(
            p.decide_with_rng(99, created, old, FailureKind::Unavailable, &mut rng),
            RetryDecision::RetryAt(old)
        );
    }
}
