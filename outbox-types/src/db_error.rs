//! sqlx errors shown to people without what could quote a row: the server's message and SQLSTATE,
//! never PostgreSQL's detail or hint ("Failing row contains ...") and never sqlx's source position
//! (`at line 1392` of PostgreSQL's C file). With the `sqlx` feature.

use crate::FailureKind;

/// `Display` of a sqlx error for people: a server error's message and SQLSTATE; other errors as
/// sqlx words them (connection refused, pool timed out, ...).
pub struct DbMessage<'a>(pub &'a sqlx::Error);

impl std::fmt::Display for DbMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_database_error() {
            Some(db) => match db.code() {
                Some(code) => write!(f, "{} (SQLSTATE {code})", db.message()),
                None => f.write_str(db.message()),
            },
            None => write!(f, "{}", self.0),
        }
    }
}

/// `Display` of a migration error: a failed statement as [`DbMessage`] shows it.
pub struct MigrateMessage<'a>(pub &'a sqlx::migrate::MigrateError);

impl std::fmt::Display for MigrateMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use sqlx::migrate::MigrateError;
        match self.0 {
            MigrateError::Execute(e) => write!(f, "while executing migrations: {}", DbMessage(e)),
            MigrateError::ExecuteMigration(e, version) => {
                write!(f, "while executing migration {version}: {}", DbMessage(e))
            }
            other => write!(f, "{other}"),
        }
    }
}

/// `Debug` of a sqlx error without the server's detail and hint.
pub struct RedactedSqlx<'a>(pub &'a sqlx::Error);

impl std::fmt::Debug for RedactedSqlx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_database_error() {
            Some(db) => f
                .debug_struct("DatabaseError")
                .field("code", &db.code())
                .field("message", &db.message())
                .field("constraint", &db.constraint())
                .finish_non_exhaustive(),
            None => write!(f, "{}", self.0),
        }
    }
}

/// Classifies a database error: authentication and permission problems are operational (`auth`);
/// everything else on a connection is passing (`transient`).
pub fn database_kind(e: &sqlx::Error) -> FailureKind {
    if let Some(db) = e.as_database_error() {
        // 28xxx: invalid authorization; 42501: insufficient privilege.
        if let Some(code) = db.code()
            && (code.starts_with("28") || code == "42501")
        {
            return FailureKind::Auth;
        }
    }
    FailureKind::Transient
}
