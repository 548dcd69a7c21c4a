//! `outbox events show ID | list --entity KEY`: an event's record, an entity's events. The payload
//! only when asked for.

use std::fmt::Write as _;

use outbox_ops::admin::{self, EventRecord};
use outbox_types::EventId;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::args::EventsCommand;
use crate::error::CliError;
use crate::out::Out;

/// Runs an `events` command.
///
/// # Errors
/// [`CliError::NoSuchEvent`] for an id the outbox does not hold; a database error.
pub(crate) async fn run(pool: &PgPool, command: EventsCommand, out: &mut Out) -> Result<(), CliError> {
    match command {
        EventsCommand::Show { id, payload, json } => show(pool, EventId::from_uuid(id), payload, json, out).await,
        EventsCommand::List { entity, limit, json } => {
            let records = admin::entity_events(pool, &entity, i64::try_from(limit).unwrap_or(i64::MAX)).await?;
            if json {
                out.line(Value::Array(records.iter().map(to_json).collect()));
            } else if records.is_empty() {
                out.line(format_args!("no events of entity {entity:?} in the outbox"));
            } else {
                out.text(table(&records));
            }
            Ok(())
        }
    }
}

/// Prints one event's record (and its payload if asked).
///
/// # Errors
/// [`CliError::NoSuchEvent`]; a database error.
pub(crate) async fn show(
    pool: &PgPool,
    id: EventId,
    with_payload: bool,
    json: bool,
    out: &mut Out,
) -> Result<(), CliError> {
    let record = admin::event(pool, id).await?.ok_or(CliError::NoSuchEvent(id))?;
    // A scrubbed payload is not printed as an empty one: the record says when it was cleared.
    let with_payload = with_payload && record.payload_scrubbed_at.is_none();
    let payload = if with_payload { admin::payload(pool, id).await? } else { None };
    let payload = match (payload, &record.payload_key_id) {
        (Some((sealed, content_type)), Some(key_id)) => Some((open(id, key_id, &sealed)?, content_type)),
        (payload, _) => payload,
    };
    if json {
        let mut v = to_json(&record);
        if let Some((bytes, content_type)) = &payload {
            v["content_type"] = json!(content_type);
            v["payload"] = json!(String::from_utf8_lossy(bytes));
        }
        out.line(&v);
    } else {
        out.text(text(&record));
        if let Some((bytes, content_type)) = payload {
            out.line(format_args!("{:<16}{content_type}", "content type"));
            match String::from_utf8(bytes) {
                Ok(text) => out.line(format_args!("{:<16}{text}", "payload")),
                Err(e) => out.line(format_args!("{:<16}{}", "payload (hex)", hex(e.as_bytes()))),
            }
        }
    }
    Ok(())
}

/// Opens a sealed payload with the keys in `OUTBOX_PAYLOAD_KEYS`.
fn open(id: EventId, key_id: &str, sealed: &[u8]) -> Result<Vec<u8>, CliError> {
    let keys = outbox_types::Keyring::from_env("OUTBOX_PAYLOAD_KEYS")?.ok_or(CliError::SealedPayload)?;
    Ok(outbox_types::PayloadCipher::new(keys).open(id, key_id, sealed)?)
}

/// Kept (in plain or sealed with a key), or scrubbed and when.
fn payload_state(r: &EventRecord) -> String {
    match (r.payload_scrubbed_at, &r.payload_key_id) {
        (Some(t), _) => format!("scrubbed {}", time(Some(t))),
        (None, Some(key)) => format!("kept, sealed with key {key}"),
        (None, None) => "kept".to_owned(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn time(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// Where the event stands in its entity: `seq N of M`.
fn place(r: &EventRecord) -> String {
    match (&r.entity, r.entity_last_seq) {
        (Some((key, seq)), Some(last)) => format!("{key}: {seq} of {last}"),
        (Some((key, seq)), None) => format!("{key}: {seq}"),
        (None, _) => "none (unordered)".to_owned(),
    }
}

fn error_text(r: &EventRecord) -> String {
    match &r.last_error {
        Some((kind, e)) => format!("{} — {e}", kind.map_or("unknown", |k| k.as_str())),
        None => "-".to_owned(),
    }
}

/// The next attempt: a time, `held` behind a quarantined event, or nothing for a final row.
fn next(r: &EventRecord) -> String {
    match (r.status, r.next_attempt_at) {
        (outbox_types::Status::Pending, None) => "held behind a quarantined event".to_owned(),
        (_, t) => time(t),
    }
}

fn text(r: &EventRecord) -> String {
    let lease = r.lease.as_ref().map_or("-".to_owned(), |(owner, until)| format!("{owner} until {}", time(*until)));
    let rows = [
        ("id", r.id.to_string()),
        ("type", format!("{} v{}", r.event_type, r.event_version)),
        ("entity", place(r)),
        ("status", r.status.to_string()),
        ("attempts", r.attempts.to_string()),
        ("last error", error_text(r)),
        ("next attempt", next(r)),
        ("claimed by", lease),
        ("created", time(Some(r.created_at))),
        ("published", time(r.published_at)),
        ("quarantined", time(r.quarantined_at)),
        ("correlation id", r.correlation_id.clone().unwrap_or_else(|| "-".to_owned())),
        ("causation id", r.causation_id.clone().unwrap_or_else(|| "-".to_owned())),
        ("payload", payload_state(r)),
    ];
    rows.iter().fold(String::new(), |mut out, (name, value)| {
        let _ = writeln!(out, "{name:<16}{value}");
        out
    })
}

fn table(records: &[EventRecord]) -> String {
    let mut out =
        format!("{:>6}  {:<36}  {:<11}  {:>8}  {:<24}  LAST ERROR\n", "SEQ", "ID", "STATUS", "ATTEMPTS", "CREATED");
    for r in records {
        let seq = r.entity.as_ref().map_or(0, |(_, s)| *s);
        let _ = writeln!(
            out,
            "{seq:>6}  {:<36}  {:<11}  {:>8}  {:<24}  {}",
            r.id.to_string(),
            r.status.as_str(),
            r.attempts,
            time(Some(r.created_at)),
            error_text(r)
        );
    }
    out
}

/// An event's record as JSON (no payload).
pub(crate) fn to_json(r: &EventRecord) -> Value {
    json!({
        "id": r.id.to_string(),
        "event_type": r.event_type,
        "event_version": r.event_version,
        "entity_key": r.entity.as_ref().map(|(k, _)| k),
        "seq": r.entity.as_ref().map(|(_, s)| s),
        "entity_last_seq": r.entity_last_seq,
        "status": r.status.as_str(),
        "attempts": r.attempts,
        "last_error_kind": r.last_error.as_ref().and_then(|(k, _)| k.map(|k| k.as_str())),
        "last_error": r.last_error.as_ref().map(|(_, e)| e),
        "held": r.status == outbox_types::Status::Pending && r.next_attempt_at.is_none(),
        "next_attempt_at": r.next_attempt_at.map(|t| t.to_rfc3339()),
        "lease_owner": r.lease.as_ref().map(|(o, _)| o),
        "lease_until": r.lease.as_ref().and_then(|(_, u)| u.map(|t| t.to_rfc3339())),
        "created_at": r.created_at.to_rfc3339(),
        "published_at": r.published_at.map(|t| t.to_rfc3339()),
        "quarantined_at": r.quarantined_at.map(|t| t.to_rfc3339()),
        "correlation_id": r.correlation_id,
        "causation_id": r.causation_id,
        "payload_scrubbed_at": r.payload_scrubbed_at.map(|t| t.to_rfc3339()),
        "payload_key_id": r.payload_key_id,
    })
}
