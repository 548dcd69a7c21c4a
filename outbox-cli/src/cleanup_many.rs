//! `outbox cleanup` over many databases (`--database`, `--databases-file`): each database cleaned
//! in turn under its name (one at a time: the progress of one shows at once), then the total; with
//! `--json`, one object. A database that fails says why and makes the exit status 1 once every
//! database has had its turn; what it deleted before stays deleted.

use std::time::Duration;

use outbox_relayer::fleet::FleetDatabase;
use serde_json::{Value, json};

use crate::args::CleanupArgs;
use crate::error::CliError;
use crate::many::{Outcome, verdict};

/// Cleans every listed database, as `outbox cleanup` cleans one.
///
/// # Errors
/// [`CliError::DatabasesFailed`] if any database failed (after all were tried).
pub(crate) async fn run(databases: Vec<FleetDatabase>, timeout: Duration, args: CleanupArgs) -> Result<(), CliError> {
    let mut outcomes = Vec::with_capacity(databases.len());
    for database in databases {
        if !args.json {
            println!("== {}", database.name());
        }
        let result = clean_one(&database, timeout, &args).await.map_err(|e| e.to_string());
        if let (Err(why), false) = (&result, args.json) {
            println!("not cleaned: {why}");
        }
        outcomes.push(Outcome { name: database.name().to_owned(), result });
    }
    if args.json {
        println!("{}", to_json(&outcomes, args.dry_run));
    } else {
        println!("{}", total_line(&outcomes, args.dry_run));
    }
    verdict(&outcomes, "could not be cleaned")
}

async fn clean_one(database: &FleetDatabase, timeout: Duration, args: &CleanupArgs) -> Result<Value, CliError> {
    let pool = crate::cleanup::open(database.connect_options().clone(), timeout, args).await?;
    let outcome = crate::cleanup::clean(&pool, args).await;
    pool.close().await;
    outcome
}

/// The outbox rows a database's summary counts: would go (`--dry-run`) or went.
fn outbox_rows(summary: &Value, dry_run: bool) -> u64 {
    let n = if dry_run { &summary["outbox_rows"] } else { &summary["outbox"]["deleted"] };
    n.as_u64().unwrap_or(0)
}

fn total_line(outcomes: &[Outcome<Value>], dry_run: bool) -> String {
    let total: u64 = outcomes.iter().filter_map(|o| o.result.as_ref().ok()).map(|s| outbox_rows(s, dry_run)).sum();
    let cleaned = outcomes.iter().filter(|o| o.result.is_ok()).count();
    let verb = if dry_run { "would delete" } else { "deleted" };
    format!("total: {verb} {total} outbox row(s) in {cleaned} of {} databases", outcomes.len())
}

fn to_json(outcomes: &[Outcome<Value>], dry_run: bool) -> Value {
    let databases: Vec<Value> = outcomes
        .iter()
        .map(|o| match &o.result {
            Ok(summary) => json!({ "name": o.name, "summary": summary }),
            Err(why) => json!({ "name": o.name, "error": why }),
        })
        .collect();
    let total: u64 = outcomes.iter().filter_map(|o| o.result.as_ref().ok()).map(|s| outbox_rows(s, dry_run)).sum();
    json!({ "databases": databases, "total_outbox_rows": total, "dry_run": dry_run })
}
