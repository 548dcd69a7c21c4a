//! Waiting with a deadline. Every wait of a benchmark (a count to reach, tasks or a process to
//! end, a broker or database step to answer) is given a time scaled to its work, several times what
//! it should take and at least [`FLOOR`]. When it gives up it fails with what it waited for and
//! what it saw (`waited 30 s for <what>; saw <what it saw>`), and the caller cleans up as on any
//! other error: a run on a stuck host fails instead of hanging.
//!
//! These waits stand in for `outbox_testkit::wait_for`, which also says what its check saw last
//! but polls every 20 ms and takes every `Err` of its check for "not yet": the consumer phases are
//! timed by their wait (polled every 5 ms), and a check here can fail (a query, a child process
//! that ended), which ends the wait at once with that error.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::BoxError;

/// The least time any wait is given: a busy shared host can stall any step for seconds.
pub(crate) const FLOOR: Duration = Duration::from_secs(30);
/// How many times its expected duration a wait is given.
const SLACK: u32 = 5;
/// How long describing what a wait saw may take once it gave up (a query of the database, say).
const DESCRIBE_LIMIT: Duration = Duration::from_secs(10);

/// The deadline of a wait expected to take `expected`: [`SLACK`] times that, at least [`FLOOR`].
pub(crate) fn allow(expected: Duration) -> Duration {
    expected.saturating_mul(SLACK).max(FLOOR)
}

/// The deadline of `work` units of work done at `per_second` (a rate a slow host still reaches):
/// [`allow`] of the time it takes at that rate.
pub(crate) fn allow_for(work: u64, per_second: u64) -> Duration {
    allow(Duration::from_secs_f64(work as f64 / per_second.max(1) as f64))
}

/// What one check of [`until`] found.
#[derive(Debug)]
pub(crate) enum Progress<T> {
    /// What the wait was for.
    Done(T),
    /// Not yet; what it saw instead (the error says it if the wait gives up).
    Waiting(String),
}

/// Checks every `poll` until `check` is [`Progress::Done`], for at most `limit`. Fails with an
/// error of `check` (prefixed with `what`), or when the time is up with what the last check saw.
pub(crate) async fn until<T>(
    what: impl Display,
    limit: Duration,
    poll: Duration,
    check: impl AsyncFnMut() -> Result<Progress<T>, BoxError>,
) -> Result<T, BoxError> {
    until_then(what, limit, poll, check, async |seen| seen).await
}

/// [`until`], and once the time is up `describe` turns what the last check saw into the error's
/// account (with a query too costly to run on every check, for example), within
/// [`DESCRIBE_LIMIT`].
pub(crate) async fn until_then<T>(
    what: impl Display,
    limit: Duration,
    poll: Duration,
    mut check: impl AsyncFnMut() -> Result<Progress<T>, BoxError>,
    describe: impl AsyncFnOnce(String) -> String,
) -> Result<T, BoxError> {
    let deadline = Instant::now() + limit;
    let mut seen = "nothing (no check finished)".to_owned();
    loop {
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(Ok(Progress::Done(value))) => return Ok(value),
            Ok(Ok(Progress::Waiting(now))) => seen = now,
            Ok(Err(e)) => return Err(format!("{what}: {e}").into()),
            Err(_) => break,
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep(poll.min(deadline - now)).await;
    }
    let seen = match tokio::time::timeout(DESCRIBE_LIMIT, describe(seen.clone())).await {
        Ok(described) => described,
        Err(_) => format!("{seen} (more could not be read within {})", secs(DESCRIBE_LIMIT)),
    };
    Err(gave_up(&what, limit, Some(&seen)))
}

/// Runs one step (a connection, a purge, a shutdown) for at most `limit`. Fails with its error
/// (prefixed with `what`), or when the time is up.
pub(crate) async fn within<T, E: Into<BoxError>>(
    what: impl Display,
    limit: Duration,
    step: impl Future<Output = Result<T, E>>,
) -> Result<T, BoxError> {
    within_seeing(what, limit, step, || None).await
}

/// [`within`], and when the time is up the error says what `seen` saw (progress the step keeps
/// where `seen` can read it).
pub(crate) async fn within_seeing<T, E: Into<BoxError>>(
    what: impl Display,
    limit: Duration,
    step: impl Future<Output = Result<T, E>>,
    seen: impl FnOnce() -> Option<String>,
) -> Result<T, BoxError> {
    match tokio::time::timeout(limit, step).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{what}: {}", e.into()).into()),
        Err(_) => Err(gave_up(&what, limit, seen().as_deref())),
    }
}

/// Waits for every task of `tasks` to end, for at most `limit`; returns their values in the order
/// they ended. At the first task that fails, or when the time is up, the others are aborted (they
/// are dropped with `tasks`) and the error says how many had ended.
pub(crate) async fn join_tasks<T: 'static>(
    what: impl Display,
    limit: Duration,
    mut tasks: JoinSet<Result<T, BoxError>>,
) -> Result<Vec<T>, BoxError> {
    let total = tasks.len();
    let mut done = Vec::with_capacity(total);
    let joined = tokio::time::timeout(limit, async {
        while let Some(ended) = tasks.join_next().await {
            done.push(ended??);
        }
        Ok::<_, BoxError>(())
    })
    .await;
    match joined {
        Ok(Ok(())) => Ok(done),
        Ok(Err(e)) => Err(format!("{what}: {e}").into()),
        Err(_) => Err(gave_up(&what, limit, Some(&format!("{} of {total} tasks ended", done.len())))),
    }
}

/// Runs the phase `name` of a benchmark; its error starts with the phase's name.
pub(crate) async fn in_phase<T>(name: &str, phase: impl Future<Output = Result<T, BoxError>>) -> Result<T, BoxError> {
    phase.await.map_err(|e| format!("{name} phase: {e}").into())
}

/// The error of a wait that gave up.
fn gave_up(what: &impl Display, limit: Duration, seen: Option<&str>) -> BoxError {
    match seen {
        Some(seen) => format!("waited {} for {what}; saw {seen}", secs(limit)).into(),
        None => format!("waited {} for {what}, without an answer", secs(limit)).into(),
    }
}

/// A duration in seconds as the errors print it: `30 s`, `2.5 s`.
pub(crate) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 || s.fract() == 0.0 { format!("{s:.0} s") } else { format!("{s:.1} s") }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[test]
    fn deadlines_scale_with_the_work_above_a_floor() {
        assert_eq!(allow(Duration::from_secs(1)), FLOOR);
        assert_eq!(allow(Duration::from_secs(20)), Duration::from_secs(100));
        assert_eq!(allow_for(10_000, 5_000), FLOOR);
        assert_eq!(allow_for(100_000, 5_000), Duration::from_secs(100));
        assert_eq!(allow_for(1, 0), Duration::from_secs(30));
    }

    #[test]
    fn seconds_read_well() {
        assert_eq!(secs(Duration::from_secs(30)), "30 s");
        assert_eq!(secs(Duration::from_millis(2_500)), "2.5 s");
        assert_eq!(secs(Duration::from_millis(12_345)), "12 s");
    }

    #[tokio::test]
    async fn until_returns_what_it_waited_for() {
        let checks = AtomicU32::new(0);
        let found = until("three checks", FLOOR, Duration::from_millis(5), async || {
            let n = checks.fetch_add(1, Ordering::Relaxed) + 1;
            Ok(if n == 3 { Progress::Done(n) } else { Progress::Waiting(format!("{n} checks")) })
        })
        .await;
        assert_eq!(found.ok(), Some(3));
    }

    #[tokio::test]
    async fn until_gives_up_with_what_it_last_saw() {
        let started = Instant::now();
        let checks = AtomicU32::new(0);
        let limit = Duration::from_millis(200);
        let err = until_then(
            "10 deliveries on queue q",
            limit,
            Duration::from_millis(20),
            async || {
                let n = checks.fetch_add(1, Ordering::Relaxed);
                Ok(Progress::<()>::Waiting(format!("{} delivered", n.min(4))))
            },
            async |seen| format!("{seen}, backlog 6 rows"),
        )
        .await
        .expect_err("gives up");
        assert_eq!(err.to_string(), "waited 0.2 s for 10 deliveries on queue q; saw 4 delivered, backlog 6 rows");
        assert!(started.elapsed() >= limit && started.elapsed() < limit + Duration::from_secs(1));
    }

    #[tokio::test]
    async fn until_passes_a_checks_error_on_at_once() {
        let err = until("a count", FLOOR, Duration::from_millis(5), async || Err::<Progress<()>, _>("gone".into()))
            .await
            .expect_err("fails");
        assert_eq!(err.to_string(), "a count: gone");
    }

    #[tokio::test]
    async fn a_step_that_never_answers_times_out() {
        let never = std::future::pending::<Result<(), BoxError>>();
        let err = within_seeing("the purge of queue q", Duration::from_millis(300), never, || Some("0 purged".into()))
            .await
            .expect_err("times out");
        assert_eq!(err.to_string(), "waited 0.3 s for the purge of queue q; saw 0 purged");
        let err =
            within("the purge of queue q", Duration::from_millis(300), std::future::pending::<Result<(), BoxError>>())
                .await
                .expect_err("times out");
        assert_eq!(err.to_string(), "waited 0.3 s for the purge of queue q, without an answer");
    }

    #[tokio::test]
    async fn stuck_tasks_are_aborted_when_the_time_is_up() {
        let mut tasks = JoinSet::new();
        tasks.spawn(async { Ok::<_, BoxError>(1) });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            let _held = tx;
            std::future::pending::<()>().await;
            Ok(2)
        });
        let err = join_tasks("the fillers", Duration::from_millis(300), tasks).await.expect_err("times out");
        assert_eq!(err.to_string(), "waited 0.3 s for the fillers; saw 1 of 2 tasks ended");
        // The stuck task was aborted: its end of the channel is gone.
        assert!(rx.await.is_err());
    }
}
