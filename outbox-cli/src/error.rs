//! The command's errors, worded for the person who runs it: one line each, with the real cause,
//! never a URL (it may hold a password) nor PostgreSQL's source position (`at line 1392`).

use std::time::Duration;

use outbox_types::db_error::{DbMessage, MigrateMessage};

/// Why a command failed (exit status 1).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// No database URL in the flags or the environment.
    #[error("DATABASE_URL is not set (or pass --database-url)")]
    NoDatabaseUrl,
    /// The database URL cannot be parsed; the reason never quotes it.
    #[error("DATABASE_URL is not a valid PostgreSQL URL: {0}")]
    DatabaseUrl(String),
    /// A command over many databases failed on some of them (each one's line says why).
    #[error("{0} of {1} databases {2}")]
    DatabasesFailed(usize, usize, &'static str),
    /// What a command names (an event, a job, a gap) is in none of the databases that answered,
    /// and some could not be read: it may be in one of those (their names, and the first's why).
    #[error("{0} is in none of the databases that answered; {1} could not be read: {2}")]
    NotFoundAmong(String, usize, String),
    /// What a command names is in several databases: which one is meant is for --only to say.
    #[error("{0} is in several databases ({1}): name the one meant with --only; nothing was changed")]
    FoundInSeveral(String, String),
    /// A database did not answer within the deadline of a reading.
    #[error("no answer within {} s (a lock held on its tables?)", .0.as_secs())]
    NoAnswer(Duration),
    /// The list of databases to relay cannot be read; the reason names the line, never a URL.
    #[error("{0}")]
    DatabaseList(String),
    /// The server was not reachable in time; the cause of the last attempt.
    #[error("cannot connect to {server}: {cause} (gave up after {:.1} s; --connect-timeout-secs sets how long to try)", after.as_secs_f64())]
    Unreachable {
        /// What was waited for.
        server: String,
        /// How long it was tried.
        after: Duration,
        /// The last attempt's failure.
        cause: String,
    },
    /// The database refused the connection for good (authentication, unknown database or role).
    #[error("the database refused the connection: {0}")]
    DatabaseRefused(String),
    /// TLS with the database failed: its certificate is not trusted (signed by another CA than
    /// `sslrootcert`, or not for this host name), or the handshake failed.
    #[error("TLS with the database failed: {0} (see sslmode and sslrootcert in DATABASE_URL)")]
    DatabaseTls(String),
    /// The broker refused the credentials.
    #[error("the broker refused the connection: {0}")]
    BrokerRefused(String),
    /// The outbox tables are missing.
    #[error("the outbox tables do not exist in this database: run `outbox migrate` first")]
    NotMigrated,
    /// The outbox tables are older than this command.
    #[error("the outbox tables lack {0} migration(s) of this version of outbox: run `outbox migrate` first")]
    MigrationsBehind(usize),
    /// A statement failed.
    #[error("database error: {}", DbMessage(.0))]
    Database(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration error: {}", MigrateMessage(.0))]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The producer library failed (its migrations).
    #[error("{0}")]
    Producer(#[from] outbox_producer::Error),
    /// The operator library failed (an operator query, retention, the reconciliation).
    #[error("{0}")]
    Ops(#[from] outbox_ops::Error),
    /// `OUTBOX_PAYLOAD_KEYS` does not read (the message names the entry's place, never a key).
    #[error("OUTBOX_PAYLOAD_KEYS: {0}")]
    PayloadKeys(#[from] outbox_types::CipherError),
    /// `--payload` on a sealed payload without the keys.
    #[error("the payload is sealed: set OUTBOX_PAYLOAD_KEYS to read it")]
    SealedPayload,
    /// Reading or repairing an inbox failed (its message is redacted as the consumer's errors are).
    #[error("{0}")]
    Inbox(String),
    /// The outbox holds no event with this id.
    #[error("no event {0} in the outbox (never written, or removed by retention)")]
    NoSuchEvent(outbox_types::EventId),
    /// The inbox tables are missing.
    #[error("the inbox tables do not exist in this database: run `outbox migrate` first")]
    InboxNotMigrated,
    /// No failed event of the consumer has this id.
    #[error("{1} has no failed event {0}; nothing was changed (see `outbox inbox failed {1}`)")]
    NoSuchInboxEvent(outbox_types::EventId, String),
    /// A failed event of no entity cannot be handed back to the consumer's sweep.
    #[error("{0} belongs to no entity: retry it from its service (InboxService::retry_failed)")]
    UnorderedRetry(outbox_types::EventId),
    /// Nothing of the entity is parked behind a hole.
    #[error("{1} has no gap for entity {0:?}; nothing was changed (see `outbox inbox gaps {1}`)")]
    NoGap(String, String),
    /// The reconciliation's query file cannot be read.
    #[error("cannot read --changes-sql {0}: {1}")]
    ChangesSql(String, String),
    /// The reconciliation's query returns neither shape.
    #[error("the --changes-sql query must return (entity_key text, version bigint) rows or one uuid column")]
    ChangesShape,
    /// A business change has no event, or an event no change (listed above on stdout).
    #[error("reconciliation found changes without an event or events without a change (listed above)")]
    NotReconciled,
    /// Events an operator named are not quarantined; nothing was changed.
    #[error("not quarantined: {0}; nothing was changed (see `outbox events show ID`)")]
    NotQuarantined(String),
    /// The AMQP URL cannot be used (the message never quotes it).
    #[error("{0}")]
    Broker(#[from] outbox_amqp::Error),
    /// The relay failed (invalid setting, the relay stopped).
    #[error("{0}")]
    Relay(#[from] outbox_relayer::Error),
    /// The metrics endpoint's address cannot be bound.
    #[error("cannot listen on {0} for --metrics-addr: {1}")]
    Listen(std::net::SocketAddr, std::io::Error),
    /// The metrics recorder cannot be installed.
    #[error("cannot install the metrics recorder: {0}")]
    Metrics(String),
    /// No broker URL in the flags or the environment.
    #[error("AMQP_URL is not set (or pass --amqp-url)")]
    NoAmqpUrl,
    /// No replay job has this id.
    #[error("no replay job {0} (see `outbox replay list --all`)")]
    NoSuchJob(uuid::Uuid),
    /// A replay job was not in a state the command could change.
    #[error("replay job {0} is {1}: nothing was changed")]
    JobState(uuid::Uuid, String),
    /// A replay could not send everything it selected (what is listed above).
    #[error("replay job {0}: {1}")]
    ReplayIncomplete(String, String),
    /// The signal handlers could not be installed.
    #[error("signal handler: {0}")]
    Signal(#[from] std::io::Error),
}

/// `message` on one line: line breaks and the indentation after them become single spaces.
pub(crate) fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl From<outbox_inbox::Error> for CliError {
    fn from(e: outbox_inbox::Error) -> Self {
        Self::Inbox(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line() {
        assert_eq!(one_line("a\n  b\tc  \r\n"), "a b c");
        let e = CliError::Unreachable {
            server: "the database".to_owned(),
            after: Duration::from_millis(3100),
            cause: "error communicating with database: Connection refused (os error 111)".to_owned(),
        };
        assert_eq!(
            e.to_string(),
            "cannot connect to the database: error communicating with database: Connection refused (os error 111) \
             (gave up after 3.1 s; --connect-timeout-secs sets how long to try)"
        );
    }
}
