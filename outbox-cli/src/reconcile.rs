//! `outbox reconcile`: proves that every business change has its event, over the operator's own
//! query of business changes ([`outbox_ops::reconcile`]). Prints the counts, the changes
//! without an event, the events without a change and the events not published (yet); exits 1
//! when a change has no event or an event has no change.

use outbox_ops::reconcile::{Reconciliation, ReconciliationReport};
use sqlx::PgPool;

use crate::args::ReconcileArgs;
use crate::error::CliError;
use crate::out::Out;

/// Runs `outbox reconcile`.
///
/// # Errors
/// [`CliError::ChangesSql`] if the file cannot be read; the query's own failure (its shape or
/// the database); [`CliError::NotReconciled`] when something is missing.
pub(crate) async fn run(pool: &PgPool, args: ReconcileArgs, out: &mut Out) -> Result<(), CliError> {
    let sql = std::fs::read_to_string(&args.changes_sql)
        .map_err(|e| CliError::ChangesSql(args.changes_sql.display().to_string(), e.to_string()))?;
    let sql = sql.trim().trim_end_matches(';').to_owned();
    let base = |r: Reconciliation| {
        let r = match args.since {
            Some(t) => r.since(t),
            None => r,
        };
        match &args.inbox {
            Some(consumer) => r.inbox(pool, consumer.clone()),
            None => r,
        }
    };
    // The query's columns say which kind of changes it returns.
    let report = match base(Reconciliation::new(pool)).entity_versions(sql.clone()).run().await {
        Err(outbox_ops::Error::InvalidQuery { .. }) => {
            base(Reconciliation::new(pool)).event_ids(sql).run().await.map_err(|e| match e {
                outbox_ops::Error::InvalidQuery { .. } => CliError::ChangesShape,
                other => other.into(),
            })?
        }
        other => other?,
    };
    if args.json {
        out.line(to_json(&report));
    } else {
        out.line(&report);
    }
    if missing(&report) { Err(CliError::NotReconciled) } else { Ok(()) }
}

/// Each item as its readable text (ids, entities, sequences, statuses; never payloads).
fn texts<T: std::fmt::Display>(items: &[T]) -> Vec<String> {
    items.iter().map(ToString::to_string).collect()
}

fn to_json(r: &ReconciliationReport) -> serde_json::Value {
    serde_json::json!({
        "clean": r.is_clean(),
        "missing": missing(r),
        "business_changes": r.business_changes,
        "outbox_events": r.outbox_events,
        "published": r.published,
        "pruned": r.pruned,
        "changes_without_event": texts(&r.changes_without_event),
        "events_without_change": texts(&r.events_without_change),
        "unpublished": texts(&r.unpublished),
        "skipped": texts(&r.skipped),
        "inbox": r.inbox.as_ref().map(|i| serde_json::json!({
            "consumer": i.consumer,
            "applied": i.applied,
            "not_applied": i.not_applied.iter().map(|(e, status)| format!("{e} {}", status.as_deref().unwrap_or("not in the inbox"))).collect::<Vec<_>>(),
            "unknown_applied": texts(&i.unknown_applied),
        })),
    })
}

/// Whether a change lacks its event or an event its change (events waiting to be published are
/// listed, not missing).
fn missing(report: &ReconciliationReport) -> bool {
    !report.changes_without_event.is_empty() || !report.events_without_change.is_empty()
}
