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
/// What [`locate`] finds missing; the command's own error when it concerned one database, else
/// [`CliError::DatabasesFailed`] if it failed on any.
pub(crate) async fn run(databases: Vec<FleetDatabase>, timeout: Duration, command: Command) -> Result<(), CliError> {
    let concerned = match Named::of(&command) {
        Some(named) => locate(databases, timeout, &command, &named).await?,
        None => databases.into_iter().map(|database| (database, command.clone())).collect(),
    };
    let as_json = json(&command);
    // A replay stops at a signal: the databases after it are not begun.
    let shutdown = if sends(&command) { Some(Shutdown::install()?) } else { None };
    let deadline = if reads(&command) { reading_deadline(timeout) } else { None };
    let mut outcomes = Vec::with_capacity(concerned.len());
    // The failure of the one database concerned is the command's (rather than "1 of 1 failed").
    let mut alone = None;
    let one = concerned.len() == 1;
    for (database, command) in concerned {
        let name = database.name().to_owned();
        if shutdown.as_ref().is_some_and(Shutdown::is_requested) {
            outcomes.push(Outcome { name, result: Err("not begun: stopped by a signal".to_owned()) });
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
            alone = Some(e);
            why
        });
        outcomes.push(Outcome { name, result: result.map(|()| out) });
    }
    if as_json {
        println!("{}", to_json(&outcomes));
    } else {
        println!("{}", total_line(&outcomes));
    }
    match alone {
        Some(e) if one => Err(e),
        _ => verdict(&outcomes, "failed"),
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
    matches!(command, Command::Replay { command: ReplayCommand::Start(_) | ReplayCommand::Resume(_) })
}

fn total_line(outcomes: &[Outcome<Out>]) -> String {
    let failed: Vec<&str> = outcomes.iter().filter(|o| o.result.is_err()).map(|o| o.name.as_str()).collect();
    let done = outcomes.len() - failed.len();
    match failed.as_slice() {
        [] => format!("total: done in {done} of {} databases", outcomes.len()),
        _ => format!("total: done in {done} of {} databases; failed in {}", outcomes.len(), failed.join(", ")),
    }
}

/// One object: each database's JSON (as the command prints it for one) or why it failed.
fn to_json(outcomes: &[Outcome<Out>]) -> Value {
    let databases: Vec<Value> = outcomes
        .iter()
        .map(|o| match &o.result {
            Ok(Out::Buffer(text)) => {
                let result = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.trim().to_owned()));
                json!({ "name": o.name, "result": result })
            }
            Ok(Out::Stdout) => json!({ "name": o.name }),
            Err(why) => json!({ "name": o.name, "error": why }),
        })
        .collect();
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    json!({ "databases": databases, "done": outcomes.len() - failed, "failed": failed })
}
