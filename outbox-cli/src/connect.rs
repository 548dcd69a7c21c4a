//! Reaching PostgreSQL: the URL checked before any attempt, one plain connection first so that a
//! failure shows its real cause (refused, name not resolved, authentication failed) instead of a
//! pool's timeout, and only then a pool.

use std::str::FromStr;
use std::time::Duration;

use outbox_types::db_error::DbMessage;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgConnection, PgPool};
use tokio::time::Instant;

use crate::error::CliError;
use crate::retry::{Failure, Patience, remaining, until_ready};

/// What the log lines and errors call the server.
const SERVER: &str = "the database";

/// The connection options of `url`, refused at once if it is missing or malformed. The reason
/// never quotes the URL.
///
/// # Errors
/// [`CliError::NoDatabaseUrl`], [`CliError::DatabaseUrl`].
pub(crate) fn options(url: Option<&str>) -> Result<PgConnectOptions, CliError> {
    let url = url.ok_or(CliError::NoDatabaseUrl)?;
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("postgres" | "postgresql")) {
        return Err(CliError::DatabaseUrl("expected postgres://user:password@host:port/database".to_owned()));
    }
    PgConnectOptions::from_str(url).map_err(|e| CliError::DatabaseUrl(without_secrets(&e.to_string(), url)))
}

/// `reason`, unless it quotes the URL or its password.
fn without_secrets(reason: &str, url: &str) -> String {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .and_then(|(info, _)| info.split_once(':'))
        .map(|(_, password)| password);
    let quoted = |s: &str| !s.is_empty() && reason.contains(s);
    if quoted(url) || password.is_some_and(quoted) { "not a valid URL".to_owned() } else { reason.to_owned() }
}

/// Whether a failed connection attempt is worth repeating. Authentication failures and unknown
/// roles (SQLSTATE class 28), an unknown database (3D000) and bad settings are not; a refused,
/// reset or unresolvable server, a server starting up or full, a timeout are. A failed TLS
/// handshake is not: an untrusted certificate stays untrusted.
fn classify(error: &sqlx::Error) -> Failure {
    let message = DbMessage(error).to_string();
    match error {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) if code.starts_with("28") || code.starts_with("3D") => {
                Failure::Fatal(CliError::DatabaseRefused(message))
            }
            _ => Failure::Retry(message),
        },
        sqlx::Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            // rustls reports a failed handshake (an untrusted certificate among them) as invalid
            // data: the same server will fail the same way.
            Failure::Fatal(CliError::DatabaseTls(e.to_string()))
        }
        sqlx::Error::Tls(e) => Failure::Fatal(CliError::DatabaseTls(e.to_string())),
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_) => Failure::Retry(message),
        _ => Failure::Fatal(CliError::DatabaseRefused(message)),
    }
}

async fn attempt(options: &PgConnectOptions, limit: Duration) -> Result<PgConnection, Failure> {
    match tokio::time::timeout(limit, options.connect()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(classify(&e)),
        Err(_) => Err(Failure::Retry(format!("no answer within {:.1} s", limit.as_secs_f64()))),
    }
}

/// One connection, tried until `timeout` has passed (the one-shot commands).
///
/// # Errors
/// [`CliError::Unreachable`] with the last cause, or at once [`CliError::DatabaseRefused`].
pub(crate) async fn within(options: &PgConnectOptions, timeout: Duration) -> Result<PgConnection, CliError> {
    let started = Instant::now();
    let conn = until_ready(SERVER, Patience::Within(timeout), || attempt(options, remaining(started, timeout))).await?;
    // `Within` never returns `None`: only a signal does that.
    conn.ok_or_else(|| CliError::Unreachable {
        server: SERVER.to_owned(),
        after: started.elapsed(),
        cause: "stopped".to_owned(),
    })
}

/// One connection, tried until the database answers or a signal arrives (`None`); each attempt
/// may take `attempt_timeout`.
///
/// # Errors
/// [`CliError::DatabaseRefused`] at once when retrying cannot help.
pub(crate) async fn patiently(
    options: &PgConnectOptions,
    attempt_timeout: Duration,
    shutdown: &crate::signal::Shutdown,
) -> Result<Option<PgConnection>, CliError> {
    until_ready(SERVER, Patience::UntilSignalled(shutdown), || attempt(options, attempt_timeout)).await
}

/// A pool on the database just reached; it opens its connections when used, each attempt bounded
/// by `timeout`.
pub(crate) fn pool(options: PgConnectOptions, timeout: Duration) -> PgPool {
    PgPoolOptions::new().max_connections(4).acquire_timeout(timeout).connect_lazy_with(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_refused_without_quoting_them() {
        assert!(options(Some("postgres://postgres@127.0.0.1:5432/test")).is_ok());
        assert!(options(Some("postgresql://u:p@db.example/app?sslmode=require")).is_ok());
        assert!(matches!(options(None), Err(CliError::NoDatabaseUrl)));
        for bad in [
            "mysql://u:s3cret@127.0.0.1/app",
            "http://u:s3cret@127.0.0.1/app",
            "postgres:u:s3cret@127.0.0.1/app",
            "postgres://u:s3cret@127.0.0.1:abc/app",
            "postgres://u:s3cret@127.0.0.1:99999/app",
            "u:s3cret@127.0.0.1",
            "",
        ] {
            match options(Some(bad)) {
                Err(CliError::DatabaseUrl(why)) => assert!(!why.contains("s3cret"), "{bad}: {why}"),
                other => panic!("{bad}: expected DatabaseUrl, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_reason_that_quotes_the_url_is_replaced() {
        let url = "postgres://u:s3cret@host/db";
        assert_eq!(without_secrets("invalid port number", url), "invalid port number");
        assert_eq!(without_secrets("invalid port number", "postgres://u:pw@h:abc/d"), "invalid port number");
        assert_eq!(without_secrets("bad value in s3cret", url), "not a valid URL");
        assert_eq!(without_secrets(&format!("cannot parse {url}"), url), "not a valid URL");
    }

    #[test]
    fn io_errors_are_retried_and_settings_errors_are_not() {
        let refused = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(classify(&refused), Failure::Retry(why) if why.contains("refused")));
        let untrusted = std::io::Error::new(std::io::ErrorKind::InvalidData, "invalid peer certificate: UnknownIssuer");
        let tls = classify(&sqlx::Error::Io(untrusted));
        assert!(matches!(tls, Failure::Fatal(CliError::DatabaseTls(why)) if why.contains("certificate")));
        let config = sqlx::Error::Configuration("bad sslmode".into());
        assert!(matches!(classify(&config), Failure::Fatal(CliError::DatabaseRefused(_))));
    }
}
