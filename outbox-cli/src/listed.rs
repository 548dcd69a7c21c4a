//! A command of one database (`events`, `quarantine show | retry | skip`, `inbox`, `replay`,
//! `reconcile`, `grant --apply`) run on the listed databases it concerns: every one, or, for a
//! command naming an event, a job or a gap, those that hold it ([`crate::locate`]). One database
//! at a time, its report under its name, then a total; with `--json`, one object. A database that
//! fails says why and makes the exit status 1 once every database has had its turn.

use std::time::Duration;

use outbox_relayer::fleet::FleetDatabase;
use serde_json::{Value, json};

use crate::args::{Command, EventsCommand, InboxCommand, QuarantineCommand, ReplayCommand};
use crate::error::{CliError, one_line};
use crate::locate::{Named, locate};
use crate::many::{Outcome, reading_deadline, verdict};
use crate::out::Out;
use crate::signal::Shutdown;

/// Runs `command` on each database it concerns.
///
/// # Errors
/// What [`locate`] finds missing; `--metrics-addr` for a replay over several databases; the
/// command's own error when it concerned one database, else [`CliError::DatabasesFailed`] if it
/// failed on any.
pub(crate) async fn run(databases: Vec<FleetDatabase>, timeout: Duration, command: Command) -> Result<(), CliError> {
    let concerned = match Named::of(&command) {
        Some(named) => locate(databases, timeout, &command, &named).await?,
        None => databases.into_iter().map(|database| (database, command.clone())).collect(),
    };
    if concerned.len() > 1 && serves_metrics(&command) {
        return Err(CliError::DatabaseList(
            "--metrics-addr serves one replay's progress: name one database with --only".to_owned(),
        ));
    }
    let as_json = json(&command);
    // A replay stops at a signal: the databases after it are not begun.
    let shutdown = if sends(&command) { Some(Shutdown::install()?) } else { None };
    let deadline = if reads(&command) { reading_deadline(timeout) } else { None };
    let one = concerned.len() == 1;
    let (mut outcomes, mut outputs, mut last) = (Vec::new(), Vec::new(), None);
    for (database, command) in concerned {
        let name = database.name().to_owned();
        if shutdown.as_ref().is_some_and(Shutdown::is_requested) {
            outcomes.push(Outcome { name, result: Err("not begun: stopped by a signal".to_owned()) });
            outputs.push(Out::Buffer(String::new()));
            continue;
        }
        if !as_json {
            println!("== {name}");
        }
        let mut out = if as_json { Out::Buffer(String::new()) } else { Out::Stdout };
        let done = crate::single::run(database.connect_options().clone(), timeout, command, &mut out);
        let result = match deadline {
            None => done.await,
            Some(d) => tokio::time::timeout(d, done).await.unwrap_or_else(|_| Err(CliError::NoAnswer(d))),
        };
        let result = result.map_err(|e| {
            let why = one_line(&e.to_string());
            if !as_json {
                println!("failed: {why}");
            }
            last = Some(e);
            why
        });
        outcomes.push(Outcome { name, result });
        outputs.push(out);
    }
    if as_json {
        println!("{}", to_json(&outcomes, &outputs));
    } else {
        println!("{}", total_line(&outcomes));
    }
    match last {
        // The failure of the one database concerned is the command's (rather than "1 of 1 failed").
        Some(e) if one => Err(e),
        _ => verdict(&outcomes, "failed"),
    }
}

/// Whether the command serves a replay's progress on an address (one process, one job).
fn serves_metrics(command: &Command) -> bool {
    match command {
        Command::Replay { command: ReplayCommand::Start(args) } => args.send.metrics_addr.is_some(),
        Command::Replay { command: ReplayCommand::Resume(args) } => args.send.metrics_addr.is_some(),
        _ => false,
    }
}

/// Whether the command prints JSON.
fn json(command: &Command) -> bool {
    use {EventsCommand as E, InboxCommand as I, QuarantineCommand as Q, ReplayCommand as R};
    match command {
        Command::Events { command: E::Show { json, .. } | E::List { json, .. } }
        | Command::Quarantine { command: Q::Show { json, .. } }
        | Command::Inbox { command: I::Status { json, .. } | I::Gaps { json, .. } | I::Failed { json, .. } }
        | Command::Replay { command: R::List { json, .. } | R::Show { json, .. } } => *json,
        Command::Replay { command: R::Start(args) } => args.json,
        Command::Reconcile(args) => args.json,
        _ => false,
    }
}

/// Whether the command only reads, in index-served queries (it then has a deadline per database).
fn reads(command: &Command) -> bool {
    use {InboxCommand as I, QuarantineCommand as Q, ReplayCommand as R};
    matches!(
        command,
        Command::Events { .. }
            | Command::Quarantine { command: Q::Show { .. } }
            | Command::Inbox { command: I::Status { .. } | I::Gaps { .. } | I::Failed { .. } }
            | Command::Replay { command: R::List { .. } | R::Show { .. } }
    )
}

/// Whether the command sends events (a replay run, which a signal stops).
fn sends(command: &Command) -> bool {
    match command {
        Command::Replay { command: ReplayCommand::Start(args) } => !args.dry_run && !args.no_run,
        Command::Replay { command: ReplayCommand::Resume(_) } => true,
        _ => false,
    }
}

fn total_line(outcomes: &[Outcome<()>]) -> String {
    let failed: Vec<&str> = outcomes.iter().filter(|o| o.result.is_err()).map(|o| o.name.as_str()).collect();
    let done = outcomes.len() - failed.len();
    match failed.as_slice() {
        [] => format!("total: done in {done} of {} databases", outcomes.len()),
        _ => format!("total: done in {done} of {} databases; failed in {}", outcomes.len(), failed.join(", ")),
    }
}

/// One object: each database's JSON (as the command prints it for one database, kept when the
/// command then failed, as a reconciliation that found something missing does), and why it failed.
fn to_json(outcomes: &[Outcome<()>], outputs: &[Out]) -> Value {
    let databases: Vec<Value> = outcomes
        .iter()
        .zip(outputs)
        .map(|(o, out)| {
            let mut database = json!({ "name": o.name });
            if let Out::Buffer(text) = out
                && !text.trim().is_empty()
            {
                database["result"] =
                    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.trim().to_owned()));
            }
            if let Err(why) = &o.result {
                database["error"] = json!(why);
            }
            database
        })
        .collect();
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    json!({ "databases": databases, "done": outcomes.len() - failed, "failed": failed })
}
