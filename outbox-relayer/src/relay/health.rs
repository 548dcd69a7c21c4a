//! What a relay tells about itself to liveness and readiness probes: when its claim loop last
//! ran, and whether the database and the broker answered it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A relay's health, as [`Relay::health`](crate::Relay::health) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// How long ago the claim loop last went round; `None` before it started.
    pub since_last_loop: Option<Duration>,
    /// The last claim reached the database.
    pub database_reachable: bool,
    /// The publisher reaches the broker (the relay is not paused by an outage).
    pub broker_reachable: bool,
    /// The relay's task has ended (shut down, crashed or aborted).
    pub stopped: bool,
}

impl Health {
    /// Alive: not stopped, and the claim loop has not started yet or went round within `within`
    /// (see [`Relay::liveness_window`](crate::Relay::liveness_window)).
    pub fn is_live(&self, within: Duration) -> bool {
        !self.stopped && self.since_last_loop.is_none_or(|since| since <= within)
    }

    /// Ready: the claim loop runs and both servers answer it.
    pub fn is_ready(&self) -> bool {
        !self.stopped && self.since_last_loop.is_some() && self.database_reachable && self.broker_reachable
    }
}

/// The relay's side of [`Health`], updated by the claim loop.
#[derive(Debug, Default)]
pub(super) struct HealthState {
    last_loop: Mutex<Option<Instant>>,
    database_failing: AtomicBool,
    broker_paused: AtomicBool,
    stopped: AtomicBool,
}

impl HealthState {
    /// The claim loop went round; `paused` says whether it waits for the broker.
    pub(super) fn went_round(&self, paused: bool) {
        *self.last_loop.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        self.broker_paused.store(paused, Ordering::Relaxed);
    }

    /// A claim reached the database (`true`) or failed on it (`false`); returns whether the
    /// claim before had failed on it too. The first claim to reach it after failures says so at
    /// INFO (the failure was said at WARN).
    pub(super) fn database_answered(&self, answered: bool) -> bool {
        let was_failing = self.database_failing.swap(!answered, Ordering::Relaxed);
        if answered && was_failing {
            tracing::info!("the database answers again; claims resume");
        }
        was_failing
    }

    /// The relay runs (again).
    pub(super) fn running(&self) {
        self.stopped.store(false, Ordering::Relaxed);
    }

    /// The relay's run ended, however (returned, panicked, aborted).
    pub(super) fn stopped(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> Health {
        let last = *self.last_loop.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Health {
            since_last_loop: last.map(|at| at.elapsed()),
            database_reachable: !self.database_failing.load(Ordering::Relaxed),
            broker_reachable: !self.broker_paused.load(Ordering::Relaxed),
            stopped: self.stopped.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_once_the_loop_runs_and_both_servers_answer() {
        let state = HealthState::default();
        let before = state.snapshot();
        assert!(before.is_live(Duration::from_secs(1)), "starting is alive");
        assert!(!before.is_ready(), "not ready before the loop runs");
        state.went_round(false);
        assert!(state.snapshot().is_ready());
        assert!(!state.database_answered(false), "the first failure follows none");
        assert!(!state.snapshot().is_ready(), "a failing database is not ready");
        assert!(state.database_answered(false), "the second follows the first");
        assert!(state.database_answered(true), "the answer ends a run of failures");
        assert!(!state.database_answered(true));
        state.went_round(true);
        assert!(!state.snapshot().is_ready(), "a relay paused by a broker outage is not ready");
        assert!(state.snapshot().is_live(Duration::from_secs(1)), "but it is alive");
    }

    #[test]
    fn a_loop_that_stopped_going_round_is_not_alive() {
        let state = HealthState::default();
        *state.last_loop.lock().expect("lock") = Some(Instant::now() - Duration::from_secs(120));
        assert!(!state.snapshot().is_live(Duration::from_secs(60)));
        assert!(state.snapshot().is_live(Duration::from_secs(180)));
    }
}
