//! `outbox inbox status | gaps | failed | retry | skip | skip-gap CONSUMER ...`: an inbox's
//! exceptions and their repair. The command has no handler: a repair moves the inbox's state under
//! the entity's lock, and the running consumer applies what it made ready at its next sweep.

use std::fmt::Write as _;

use outbox_inbox::admin::{self, Requested};
use outbox_types::EventId;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::args::InboxCommand;
use crate::error::CliError;
use crate::out::Out;

/// Runs an `inbox` command.
///
/// # Errors
/// [`CliError::NoSuchInboxEvent`], [`CliError::NoGap`], [`CliError::UnorderedRetry`], or a
/// database error.
pub(crate) async fn run(pool: &PgPool, command: InboxCommand, out: &mut Out) -> Result<(), CliError> {
    match command {
        InboxCommand::Status { consumer, json } => status(pool, &consumer, json, out).await,
        InboxCommand::Gaps { consumer, json } => gaps(pool, &consumer, json, out).await,
        InboxCommand::Failed { consumer, json } => failed(pool, &consumer, json, out).await,
        InboxCommand::Retry { consumer, id } => {
            let id = EventId::from_uuid(id);
            match admin::request_retry(pool, &consumer, id).await? {
                Requested::Done => {
                    out.line(format_args!(
                        "{id} parked again: {consumer} applies it at its next sweep, in its entity's order"
                    ));
                    Ok(())
                }
                Requested::Unordered => Err(CliError::UnorderedRetry(id)),
                _ => Err(CliError::NoSuchInboxEvent(id, consumer)),
            }
        }
        InboxCommand::Skip { consumer, id, reason, .. } => {
            let id = EventId::from_uuid(id);
            match admin::skip_failed(pool, &consumer, id, reason.as_deref()).await? {
                Requested::Done => {
                    out.line(format_args!(
                        "{id} skipped: never applied; {consumer} applies the events parked behind it"
                    ));
                    Ok(())
                }
                _ => Err(CliError::NoSuchInboxEvent(id, consumer)),
            }
        }
        InboxCommand::SkipGap { consumer, entity, .. } => match admin::skip_gap(pool, &consumer, &entity).await? {
            Some((from, to)) => {
                out.line(format_args!(
                    "{entity}: sequences {from} to {to} given up on; {consumer} applies the parked events"
                ));
                Ok(())
            }
            None => Err(CliError::NoGap(entity, consumer)),
        },
    }
}

/// Events processed by `consumer` in the last minute and hour, through the index of processed
/// rows by time.
const PROCESSED: &str = "\
SELECT count(*) FILTER (WHERE processed_at > now() - interval '1 minute'), count(*)
FROM (
    SELECT processed_at FROM inbox_events
    WHERE consumer = $1 AND status IN ('processed', 'skipped') AND processed_at > now() - interval '1 hour'
    LIMIT 1000000
) hour";

async fn status(pool: &PgPool, consumer: &str, as_json: bool, out: &mut Out) -> Result<(), CliError> {
    let b = admin::backlog(pool, consumer).await?;
    let (minute, hour): (i64, i64) = sqlx::query_as(PROCESSED).bind(consumer).fetch_one(pool).await?;
    if as_json {
        let v = json!({
            "consumer": consumer,
            "entities_with_gap": b.entities_with_gap,
            "parked": b.parked,
            "oldest_parked_age_seconds": b.oldest_parked_age_seconds,
            "failed": b.failed,
            "processed_last_minute": minute,
            "processed_last_hour": hour,
        });
        out.line(&v);
        return Ok(());
    }
    let rows = [
        ("consumer", consumer.to_owned()),
        ("entities with a gap", b.entities_with_gap.to_string()),
        ("parked", b.parked.to_string()),
        ("oldest parked", format!("{:.1} s", b.oldest_parked_age_seconds)),
        ("failed", b.failed.to_string()),
        ("processed, last minute", minute.to_string()),
        ("processed, last hour", hour.to_string()),
    ];
    for (name, value) in rows {
        out.line(format_args!("{name:<24}{value}"));
    }
    Ok(())
}

async fn gaps(pool: &PgPool, consumer: &str, as_json: bool, out: &mut Out) -> Result<(), CliError> {
    let gaps = admin::list_gaps(pool, consumer).await?;
    if as_json {
        let all = gaps.iter().map(|g| {
            json!({
                "entity_key": g.entity_key,
                "last_seq": g.last_seq,
                "first_parked_seq": g.first_parked_seq,
                "parked": g.parked,
                "age_seconds": g.age_seconds,
            })
        });
        out.line(Value::Array(all.collect()));
        return Ok(());
    }
    if gaps.is_empty() {
        out.line(format_args!("{consumer}: no gaps"));
        return Ok(());
    }
    let mut table =
        format!("{:<32} {:>10} {:>14} {:>8} {:>10}\n", "ENTITY", "APPLIED TO", "FIRST PARKED", "PARKED", "AGE");
    for g in &gaps {
        let age = format!("{:.1} s", g.age_seconds);
        let _ = writeln!(
            table,
            "{:<32} {:>10} {:>14} {:>8} {age:>10}",
            g.entity_key, g.last_seq, g.first_parked_seq, g.parked
        );
    }
    out.text(&table);
    Ok(())
}

async fn failed(pool: &PgPool, consumer: &str, as_json: bool, out: &mut Out) -> Result<(), CliError> {
    let events = admin::list_failed(pool, consumer).await?;
    if as_json {
        let all = events.iter().map(|e| {
            json!({
                "event_id": e.event_id.to_string(),
                "entity_key": e.entity_key,
                "seq": e.seq,
                "event_type": e.event_type,
                "last_error": e.last_error,
                "received_at": e.received_at.to_rfc3339(),
            })
        });
        out.line(Value::Array(all.collect()));
        return Ok(());
    }
    if events.is_empty() {
        out.line(format_args!("{consumer}: no failed events"));
        return Ok(());
    }
    let mut table = format!("{:<36}  {:<24}  {:<20}  LAST ERROR\n", "EVENT ID", "ENTITY", "TYPE");
    for e in &events {
        let entity = match (&e.entity_key, e.seq) {
            (Some(k), Some(s)) => format!("{k}#{s}"),
            _ => "-".to_owned(),
        };
        let kind = e.event_type.as_deref().unwrap_or("-");
        let _ =
            writeln!(table, "{:<36}  {entity:<24}  {kind:<20}  {}", e.event_id, e.last_error.as_deref().unwrap_or("-"));
    }
    out.text(&table);
    Ok(())
}
