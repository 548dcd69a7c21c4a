//! Shared by the chaos soak's child processes (`outbox-chaos-relay`, `outbox-chaos-consumer`):
//! configuration from the environment, logging, the database pool and the termination signal.
//!
//! Every process reads `DATABASE_URL`, `AMQP_URL` and `CHAOS_NAME`. The name is the PostgreSQL
//! `application_name` of its connections and the name of its AMQP connection, so the soak can
//! terminate exactly this process's database backends and tell its broker connections apart.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

/// A configuration error: names the variable, never its value (URLs carry credentials).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// A required variable is not set.
    #[error("{0} is not set")]
    Missing(&'static str),
    /// A variable does not parse.
    #[error("{0} is not valid")]
    Invalid(&'static str),
}

/// The value of a required variable.
pub(crate) fn required(name: &'static str) -> Result<String, ConfigError> {
    std::env::var(name).map_err(|_| ConfigError::Missing(name))
}

/// A duration in milliseconds, or `default` when the variable is not set.
pub(crate) fn millis(name: &'static str, default: u64) -> Result<Duration, ConfigError> {
    match std::env::var(name) {
        Err(_) => Ok(Duration::from_millis(default)),
        Ok(v) => v.parse().map(Duration::from_millis).map_err(|_| ConfigError::Invalid(name)),
    }
}

/// Logs to stderr at the level of `RUST_LOG` (default `warn`), never a payload.
pub(crate) fn init_logging() {
    outbox_testkit::init_logging("warn");
}

/// A lazily connecting pool on `DATABASE_URL` whose connections carry `name` as `application_name`.
/// `DATABASE_URL`, with `name` as the application name.
pub(crate) fn connect_options(name: &str) -> Result<PgConnectOptions, ConfigError> {
    Ok(PgConnectOptions::from_str(&required("DATABASE_URL")?)
        .map_err(|_| ConfigError::Invalid("DATABASE_URL"))?
        .application_name(name))
}

/// A future that completes on SIGTERM or SIGINT. The handlers are installed before this returns.
pub(crate) fn terminated() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Any failure of a chaos process; printed once, as its last log line.
pub(crate) type ProcessError = Box<dyn std::error::Error + Send + Sync>;

/// The exit code of a process that returned `result`, logging the error.
pub(crate) fn exit_code(result: Result<(), ProcessError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "chaos process failed");
            ExitCode::FAILURE
        }
    }
}
