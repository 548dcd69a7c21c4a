//! `outbox quarantine list | show | retry | skip`: the exception state with its reason and its
//! repair. A retry keeps the row and the event id; the events held behind it follow. Every id
//! given must be quarantined, or nothing is changed.

use std::fmt::Write as _;

use outbox_ops::admin::{self, QuarantinedEvent};
use outbox_types::{EventId, FailureKind};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::args::QuarantineCommand;
use crate::error::CliError;
use crate::out::Out;

/// Runs a `quarantine` command.
///
/// # Errors
/// [`CliError::NotQuarantined`] naming the ids that are not quarantined (nothing changed);
/// [`CliError::NoSuchEvent`] for `show`; a database error.
pub(crate) async fn run(pool: &PgPool, command: QuarantineCommand, out: &mut Out) -> Result<(), CliError> {
    match command {
        QuarantineCommand::List { kind, limit, json, .. } => list(pool, kind, limit, json, out).await,
        QuarantineCommand::Show { id, json } => {
            require_quarantined(pool, &[id]).await?;
            crate::events::show(pool, EventId::from_uuid(id), false, json, out).await
        }
        // clap makes --all and --kind go together.
        QuarantineCommand::Retry { all: true, kind: Some(kind), .. } => {
            let ids: Vec<Uuid> = every_of_kind(pool, kind).await?;
            act(pool, &ids, Action::Retry, out).await
        }
        QuarantineCommand::Retry { ids, .. } => {
            require_quarantined(pool, &ids).await?;
            act(pool, &ids, Action::Retry, out).await
        }
        QuarantineCommand::Skip { ids, reason, .. } => {
            require_quarantined(pool, &ids).await?;
            act(pool, &ids, Action::Skip(reason), out).await
        }
    }
}

enum Action {
    Retry,
    Skip(Option<String>),
}

async fn list(pool: &PgPool, kind: Option<FailureKind>, limit: u64, json: bool, out: &mut Out) -> Result<(), CliError> {
    let events = admin::list_quarantined_of(pool, kind, i64::try_from(limit).unwrap_or(i64::MAX)).await?;
    if json {
        out.line(Value::Array(events.iter().map(to_json).collect()));
    } else if events.is_empty() {
        out.line(format_args!("no quarantined events{}", kind.map(|k| format!(" of kind {k}")).unwrap_or_default()));
    } else {
        out.text(table(&events));
    }
    Ok(())
}

/// Every quarantined event of `kind`, at most one statement's worth at a time.
async fn every_of_kind(pool: &PgPool, kind: FailureKind) -> Result<Vec<Uuid>, CliError> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM outbox_events WHERE status = 'quarantined' AND last_error_kind = $1 ORDER BY quarantined_at, id",
    )
    .bind(kind.as_str())
    .fetch_all(pool)
    .await?;
    Ok(ids)
}

/// Fails, changing nothing, unless every one of `ids` is quarantined.
async fn require_quarantined(pool: &PgPool, ids: &[Uuid]) -> Result<(), CliError> {
    let found: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM outbox_events WHERE id = ANY($1) AND status = 'quarantined'")
            .bind(ids)
            .fetch_all(pool)
            .await?;
    let missing: Vec<String> = ids.iter().filter(|id| !found.contains(id)).map(Uuid::to_string).collect();
    if missing.is_empty() { Ok(()) } else { Err(CliError::NotQuarantined(missing.join(", "))) }
}

/// Retries or skips each of `ids`, in order, one line per event; a summary at the end.
async fn act(pool: &PgPool, ids: &[Uuid], action: Action, out: &mut Out) -> Result<(), CliError> {
    let mut done = 0;
    for id in ids.iter().copied().map(EventId::from_uuid) {
        let acted = match &action {
            Action::Retry => admin::retry(pool, id).await?,
            Action::Skip(reason) => admin::skip_because(pool, id, reason.as_deref()).await?,
        };
        // Resolved meanwhile by another operator or process: said, not an error.
        let verb = match (&action, acted) {
            (_, false) => "not quarantined any more",
            (Action::Retry, true) => "retried",
            (Action::Skip(_), true) => "skipped",
        };
        done += usize::from(acted);
        out.line(format_args!("{id} {verb}"));
    }
    let what = match action {
        Action::Retry => "retried (same rows, same event ids; the events held behind them follow)",
        Action::Skip(_) => "skipped (never published; their entities' later events flow again)",
    };
    out.line(format_args!("{done} event(s) {what}"));
    Ok(())
}

/// The events as a table, a header line first.
pub(crate) fn table(events: &[QuarantinedEvent]) -> String {
    let mut out =
        format!("{:<36}  {:<20}  {:<24}  {:>8}  {:<10}  REASON\n", "ID", "TYPE", "ENTITY", "ATTEMPTS", "KIND");
    for e in events {
        let entity = match (&e.entity_key, e.seq) {
            (Some(k), Some(s)) => format!("{k}#{s}"),
            _ => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<36}  {:<20}  {entity:<24}  {:>8}  {:<10}  {}",
            e.id.to_string(),
            e.event_type,
            e.attempts,
            e.last_error_kind.map_or("unknown", FailureKind::as_str),
            e.last_error.as_deref().unwrap_or("-")
        );
    }
    out
}

/// One event as JSON.
pub(crate) fn to_json(e: &QuarantinedEvent) -> Value {
    json!({
        "id": e.id.to_string(),
        "event_type": e.event_type,
        "entity_key": e.entity_key,
        "seq": e.seq,
        "attempts": e.attempts,
        "kind": e.last_error_kind.map(FailureKind::as_str),
        "reason": e.last_error,
        "created_at": e.created_at.to_rfc3339(),
        "quarantined_at": e.quarantined_at.map(|t| t.to_rfc3339()),
    })
}
