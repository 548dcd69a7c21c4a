//! A command over many databases (`--database`, `--databases-file`): the work done on each, a
//! few at a time, each database's outcome kept with its name in the order listed, and the exit
//! status that says whether any failed.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use outbox_relayer::fleet::FleetDatabase;

use crate::error::CliError;

/// Databases worked on at once.
const AT_ONCE: usize = 8;

/// One database's outcome: its name, and what the work gave or why it failed (one line).
pub(crate) struct Outcome<T> {
    pub(crate) name: String,
    pub(crate) result: Result<T, String>,
}

/// Runs `work` on every database, [`AT_ONCE`] at a time; the outcomes in the order listed. With a
/// `deadline`, a database whose work takes longer fails with a line saying so (a table locked by
/// another session would otherwise hold the command, and every other database's line, for ever).
pub(crate) async fn each<T, F, Fut>(
    databases: Vec<FleetDatabase>,
    deadline: Option<Duration>,
    work: F,
) -> Vec<Outcome<T>>
where
    F: Fn(FleetDatabase) -> Fut,
    Fut: Future<Output = Result<T, CliError>>,
{
    futures::stream::iter(databases)
        .map(|database| {
            let name = database.name().to_owned();
            let done = work(database);
            async move {
                let result = match deadline {
                    None => done.await.map_err(|e| e.to_string()),
                    Some(d) => match tokio::time::timeout(d, done).await {
                        Ok(done) => done.map_err(|e| e.to_string()),
                        Err(_) => Err(CliError::NoAnswer(d).to_string()),
                    },
                };
                Outcome { name, result }
            }
        })
        .buffered(AT_ONCE)
        .collect()
        .await
}

/// The deadline of a database's reading: the connection's timeout and 10 s for the queries,
/// which are index-served and take milliseconds when nothing blocks them.
pub(crate) fn reading_deadline(connect_timeout: Duration) -> Option<Duration> {
    Some(connect_timeout + Duration::from_secs(10))
}

/// `Ok` if every database's work succeeded, else [`CliError::DatabasesFailed`] counting the
/// failures (`what` says what failed: "could not be read", "could not be migrated").
///
/// # Errors
/// [`CliError::DatabasesFailed`].
pub(crate) fn verdict<T>(outcomes: &[Outcome<T>], what: &'static str) -> Result<(), CliError> {
    match outcomes.iter().filter(|o| o.result.is_err()).count() {
        0 => Ok(()),
        failed => Err(CliError::DatabasesFailed(failed, outcomes.len(), what)),
    }
}

/// The width of the name column: the longest name, or `header`'s.
pub(crate) fn name_width<T>(outcomes: &[Outcome<T>], header: &str) -> usize {
    outcomes.iter().map(|o| o.name.len()).max().unwrap_or(0).max(header.len())
}
