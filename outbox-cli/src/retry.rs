//! Waiting for a server at start-up: attempts with backoff (100 ms doubling to 5 s), a log line
//! with the cause for every failed attempt, and either a deadline (one-shot commands) or no end
//! but a signal (the relay).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::CliError;
use crate::signal::Shutdown;

/// Why one attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Trying again cannot help (bad credentials, a database that does not exist).
    Fatal(CliError),
    /// The server may answer later; the cause, for the log and for the final error.
    Retry(String),
}

/// How long to keep trying.
#[derive(Debug)]
pub(crate) enum Patience<'a> {
    /// Give up once this much time has passed.
    Within(Duration),
    /// Never give up; stop when a signal arrives.
    UntilSignalled(&'a Shutdown),
}

/// The wait after `failures` failed attempts in a row: 100 ms, doubling, at most 5 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    outbox_types::Backoff::new(Duration::from_millis(100), Duration::from_secs(5)).delay(failures)
}

/// Runs `attempt` until it succeeds: `Ok(Some(value))`; `Ok(None)` if a signal stopped the wait.
/// `server` names what is waited for in the log lines and in the error (`the database`).
///
/// # Errors
/// A fatal failure at once; with [`Patience::Within`], [`CliError::Unreachable`] with the last
/// cause once the time is up.
pub(crate) async fn until_ready<T, F, Fut>(
    server: &str,
    patience: Patience<'_>,
    mut attempt: F,
) -> Result<Option<T>, CliError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let started = Instant::now();
    let mut failures: u32 = 0;
    loop {
        let outcome = match &patience {
            Patience::Within(_) => attempt().await,
            Patience::UntilSignalled(shutdown) => tokio::select! {
                outcome = attempt() => outcome,
                () = shutdown.requested() => return Ok(None),
            },
        };
        let cause = match outcome {
            Ok(value) => return Ok(Some(value)),
            Err(Failure::Fatal(error)) => return Err(error),
            Err(Failure::Retry(cause)) => cause,
        };
        failures = failures.saturating_add(1);
        let wait = backoff(failures);
        match &patience {
            Patience::Within(limit) if started.elapsed() >= *limit => {
                return Err(CliError::Unreachable { server: server.to_owned(), after: started.elapsed(), cause });
            }
            Patience::Within(limit) => {
                // The last wait ends at the deadline, for one last attempt there.
                let wait = wait.min(limit.saturating_sub(started.elapsed()));
                tracing::warn!(attempt = failures, retry_in_ms = wait.as_millis() as u64, %cause, "{server} is not reachable; retrying");
                tokio::time::sleep(wait).await;
            }
            Patience::UntilSignalled(shutdown) => {
                tracing::warn!(attempt = failures, retry_in_ms = wait.as_millis() as u64, %cause, "{server} is not reachable; retrying until it answers");
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = shutdown.requested() => return Ok(None),
                }
            }
        }
    }
}

/// How long one attempt may take: what is left of `limit` since `started`, but at least 1 s (or
/// `limit` if shorter), so that the last attempt, at the deadline, can still find the cause.
pub(crate) fn remaining(started: Instant, limit: Duration) -> Duration {
    limit.saturating_sub(started.elapsed()).max(limit.min(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_starts_at_100_ms_and_stops_at_5_s() {
        let waits: Vec<u128> = (1..=9).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(backoff(u32::MAX), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_gives_up_with_the_last_cause() {
        let mut n = 0;
        let result: Result<Option<()>, CliError> =
            until_ready("the server", Patience::Within(Duration::from_secs(5)), || {
                n += 1;
                let cause = format!("refused #{n}");
                async move { Err(Failure::Retry(cause)) }
            })
            .await;
        match result {
            Err(CliError::Unreachable { cause, after, .. }) => {
                assert_eq!(cause, "refused #7", "attempts at 0, 0.1, 0.3, 0.7, 1.5, 3.1 and 5 s");
                assert_eq!(after, Duration::from_secs(5));
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fatal_failure_stops_at_once_and_success_returns_the_value() {
        let fatal: Result<Option<()>, CliError> =
            until_ready("x", Patience::Within(Duration::from_secs(5)), || async {
                Err(Failure::Fatal(CliError::NoDatabaseUrl))
            })
            .await;
        assert!(matches!(fatal, Err(CliError::NoDatabaseUrl)));
        let mut n = 0;
        let value = until_ready("x", Patience::Within(Duration::from_secs(5)), || {
            n += 1;
            let ready = n == 3;
            async move { if ready { Ok(n) } else { Err(Failure::Retry("not yet".to_owned())) } }
        })
        .await;
        assert!(matches!(value, Ok(Some(3))));
    }
}
