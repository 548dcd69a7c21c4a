//! `outbox quarantine list` over many databases (`--database`, `--databases-file`): each
//! database's quarantined events under its name, and the total; or one JSON object. A database
//! that cannot be read says why and makes the exit status 1 once everything is printed.

use std::fmt::Write as _;
use std::time::Duration;

use outbox_ops::admin::{self, QuarantinedEvent};
use outbox_relayer::fleet::FleetDatabase;
use outbox_types::FailureKind;
use serde_json::{Value, json};

use crate::error::CliError;
use crate::many::{Outcome, each, reading_deadline, verdict};
use crate::quarantine::{table, to_json};

/// Lists every database's quarantined events (at most `limit` each, of `kind` if given).
///
/// # Errors
/// [`CliError::DatabasesFailed`] if any database could not be read (after printing all of them).
pub(crate) async fn run(
    databases: Vec<FleetDatabase>,
    timeout: Duration,
    kind: Option<FailureKind>,
    limit: u64,
    json: bool,
) -> Result<(), CliError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let outcomes = each(databases, reading_deadline(timeout), |database| async move {
        let pool = crate::schema::outbox_pool(database.connect_options().clone(), timeout).await?;
        let events = admin::list_quarantined_of(&pool, kind, limit).await;
        pool.close().await;
        Ok(events?)
    })
    .await;
    if json {
        println!("{}", to_json_all(&outcomes));
    } else {
        print!("{}", to_text(&outcomes, kind));
    }
    verdict(&outcomes, "could not be read")
}

fn to_text(outcomes: &[Outcome<Vec<QuarantinedEvent>>], kind: Option<FailureKind>) -> String {
    let of_kind = kind.map(|k| format!(" of kind {k}")).unwrap_or_default();
    let mut out = String::new();
    for o in outcomes {
        let _ = match &o.result {
            Ok(events) if events.is_empty() => writeln!(out, "== {}: no quarantined events{of_kind}", o.name),
            Ok(events) => writeln!(out, "== {}: {} quarantined{of_kind}\n{}", o.name, events.len(), table(events)),
            Err(why) => writeln!(out, "== {}: cannot be read: {why}", o.name),
        };
    }
    let total: usize = outcomes.iter().filter_map(|o| o.result.as_ref().ok()).map(Vec::len).sum();
    let read = outcomes.iter().filter(|o| o.result.is_ok()).count();
    let _ = writeln!(out, "total: {total} quarantined{of_kind} in {read} of {} databases", outcomes.len());
    out
}

fn to_json_all(outcomes: &[Outcome<Vec<QuarantinedEvent>>]) -> Value {
    let databases: Vec<Value> = outcomes
        .iter()
        .map(|o| match &o.result {
            Ok(events) => json!({ "name": o.name, "events": events.iter().map(to_json).collect::<Vec<_>>() }),
            Err(why) => json!({ "name": o.name, "error": why }),
        })
        .collect();
    let total: usize = outcomes.iter().filter_map(|o| o.result.as_ref().ok()).map(Vec::len).sum();
    json!({ "databases": databases, "total": total })
}
