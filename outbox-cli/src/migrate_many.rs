//! `outbox migrate` over many databases (`--database`, `--databases-file`): each database
//! migrated, a line each (`migrated`, or why not) and a count. One that fails stops nothing
//! else; the exit status is 1 once every database has had its turn.

use std::fmt::Write as _;
use std::time::Duration;

use outbox_relayer::fleet::FleetDatabase;

use crate::error::CliError;
use crate::many::{Outcome, each, name_width, verdict};

/// Migrates every listed database and prints how each went.
///
/// # Errors
/// [`CliError::DatabasesFailed`] if any database could not be migrated (after all were tried).
pub(crate) async fn run(
    databases: Vec<FleetDatabase>,
    timeout: Duration,
    outbox_only: bool,
    inbox_only: bool,
) -> Result<(), CliError> {
    // No deadline: a migration of a big table may take long, and waits for its locks by design.
    let outcomes = each(databases, None, |database| async move {
        crate::migrate::database(database.connect_options().clone(), timeout, outbox_only, inbox_only).await
    })
    .await;
    print!("{}", to_text(&outcomes));
    verdict(&outcomes, "could not be migrated")
}

fn to_text(outcomes: &[Outcome<()>]) -> String {
    let width = name_width(outcomes, "");
    let mut out = String::new();
    for o in outcomes {
        let _ = match &o.result {
            Ok(()) => writeln!(out, "{:width$}  migrated", o.name),
            Err(why) => writeln!(out, "{:width$}  not migrated: {why}", o.name),
        };
    }
    let migrated = outcomes.iter().filter(|o| o.result.is_ok()).count();
    let _ = writeln!(out, "migrated {migrated} of {} databases", outcomes.len());
    out
}
