//! `outbox status`: the outbox at a glance, from the same index-served statements as the relays'
//! gauges (so it stays cheap on a big table), what holds back the database's xmin horizon (the
//! oldest snapshot another session holds, a replication slot), the replay jobs not finished, and
//! each inbox consumer's gaps and failed events when this database holds inbox tables. A table for
//! people, or one JSON object (`--json`).

use std::time::Duration;

use outbox_inbox::admin::InboxBacklog;
use outbox_ops::admin::{Activity, Backlog};
use outbox_ops::replay::ReplayJob;
use outbox_ops::{HeldSlot, HeldSnapshot, Horizon};
use serde_json::{Value, json};
use sqlx::{PgConnection, PgPool};

use crate::error::CliError;

/// Everything `outbox status` shows.
struct Report {
    backlog: Backlog,
    activity: Activity,
    /// Each inbox consumer of this database, with its backlog; `None` without inbox tables.
    inbox: Option<Vec<(String, InboxBacklog)>>,
    /// The replay jobs not finished (running, paused, failed).
    replays: Vec<ReplayJob>,
}

/// Prints the outbox's state.
///
/// # Errors
/// The outbox tables are missing or a query fails.
pub(crate) async fn run(mut conn: PgConnection, pool: &PgPool, json: bool) -> Result<(), CliError> {
    crate::schema::check_outbox(&mut conn).await?;
    let backlog = outbox_ops::admin::backlog(&mut conn).await?;
    let activity = outbox_ops::admin::activity(&mut conn).await?;
    let inbox = inbox(&mut conn, pool).await?;
    let replays = outbox_ops::replay::jobs(pool, true, 20).await?;
    let report = Report { backlog, activity, inbox, replays };
    if json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", to_text(&report));
    }
    Ok(())
}

/// The inbox consumers of this database and their backlogs, if it holds the inbox tables.
async fn inbox(conn: &mut PgConnection, pool: &PgPool) -> Result<Option<Vec<(String, InboxBacklog)>>, CliError> {
    let present: bool =
        sqlx::query_scalar("SELECT to_regclass('inbox_events') IS NOT NULL").fetch_one(&mut *conn).await?;
    if !present {
        return Ok(None);
    }
    let mut consumers = Vec::new();
    for consumer in outbox_inbox::admin::consumers(pool).await? {
        let backlog = outbox_inbox::admin::backlog(pool, &consumer).await?;
        consumers.push((consumer, backlog));
    }
    Ok(Some(consumers))
}

fn to_json(r: &Report) -> Value {
    let b = &r.backlog;
    json!({
        "waiting": b.waiting,
        "waiting_exact": b.waiting_exact,
        "held": b.held,
        "oldest_waiting_age_seconds": b.oldest_waiting_age.as_secs_f64(),
        "oldest_held_age_seconds": b.oldest_held_age.as_secs_f64(),
        "quarantined": b.quarantined.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "expired_leases": b.expired_leases,
        "entities_behind": b.entities_behind,
        "largest_gap": b.largest_gap,
        "entities_exact": b.entities_exact(),
        "oldest_snapshot": b.horizon.oldest_snapshot.as_ref().map(snapshot_json),
        "oldest_slot": b.horizon.oldest_slot.as_ref().map(slot_json),
        "horizon_xid_age": b.horizon.xid_age(),
        "published_last_minute": r.activity.published_last_minute,
        "published_last_hour": r.activity.published_last_hour,
        "relays": r.activity.claims.iter().map(|c| json!({
            "owner": c.owner,
            "rows": c.rows,
            "lease_until_first": c.lease_until.0.to_rfc3339(),
            "lease_until_last": c.lease_until.1.to_rfc3339(),
            "expired": c.expired,
        })).collect::<Vec<_>>(),
        "inbox": r.inbox.as_ref().map(|consumers| consumers.iter().map(|(name, i)| json!({
            "consumer": name,
            "entities_with_gap": i.entities_with_gap,
            "parked": i.parked,
            "oldest_parked_age_seconds": i.oldest_parked_age_seconds,
            "failed": i.failed,
        })).collect::<Vec<_>>()),
        "replay_jobs": r.replays.iter().map(crate::replay::job_json).collect::<Vec<_>>(),
    })
}

/// The session holding the oldest snapshot, in the JSON output (`age_seconds` and `state` are
/// `null` when hidden from the connected role).
fn snapshot_json(s: &HeldSnapshot) -> Value {
    json!({
        "pid": s.pid,
        "application_name": s.application_name,
        "state": s.state,
        "age_seconds": s.age.map(|a| a.as_secs_f64()),
        "xid_age": s.xid_age,
    })
}

/// The replication slot with the oldest xmin, in the JSON output.
fn slot_json(s: &HeldSlot) -> Value {
    json!({
        "name": s.name,
        "logical": s.logical,
        "xid_age": s.xid_age,
        "catalog_xid_age": s.catalog_xid_age,
    })
}

/// `d` for people: `42s`, `14m 3s`, `3h 7m`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, s % 3600 / 60),
    }
}

/// The oldest snapshot's row: `14m 3s (pid 4242, psql, idle in transaction), holds back vacuum`,
/// or `none`.
fn snapshot_text(snapshot: Option<&HeldSnapshot>) -> String {
    let Some(s) = snapshot else {
        return "none".to_owned();
    };
    let age = s.age.map_or_else(|| "age hidden (needs pg_read_all_stats)".to_owned(), human);
    let mut who = vec![format!("pid {}", s.pid)];
    who.extend([s.application_name.clone()].into_iter().filter(|a| !a.is_empty()));
    who.extend(s.state.clone());
    format!("{age}, {} transactions ({}), holds back vacuum", s.xid_age, who.join(", "))
}

/// The oldest slot's row, when a slot holds the horizon.
fn slot_text(slot: &HeldSlot) -> String {
    let kind = if slot.logical { "logical" } else { "physical" };
    match (slot.xid_age, slot.catalog_xid_age) {
        (Some(n), _) => format!("{} ({kind}), {n} transactions, holds back vacuum", slot.name),
        (None, n) => {
            format!("{} ({kind}), {} transactions, holds back the system catalogs' vacuum", slot.name, n.unwrap_or(0))
        }
    }
}

/// The rows of what holds back the horizon: always the oldest snapshot, a slot when one holds it.
fn horizon_rows(h: &Horizon) -> Vec<(&'static str, String)> {
    let mut rows = vec![("oldest snapshot", snapshot_text(h.oldest_snapshot.as_ref()))];
    rows.extend(h.oldest_slot.as_ref().map(|slot| ("replication slot", slot_text(slot))));
    rows
}

/// `n`, followed by `+` when it is a lower bound.
fn count(n: i64, exact: bool) -> String {
    if exact { n.to_string() } else { format!("{n}+") }
}

fn to_text(r: &Report) -> String {
    use std::fmt::Write as _;
    let b = &r.backlog;
    let mut out = String::new();
    let quarantined = if b.quarantined.is_empty() {
        "0".to_owned()
    } else {
        b.quarantined.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
    };
    let rows = [
        ("waiting", format!("{}{}", b.waiting, if b.waiting_exact { "" } else { " (estimated)" })),
        ("held behind a quarantine", b.held.to_string()),
        ("oldest waiting", format!("{:.1} s", b.oldest_waiting_age.as_secs_f64())),
        ("oldest held", format!("{:.1} s", b.oldest_held_age.as_secs_f64())),
        ("quarantined", quarantined),
        ("published, last minute", r.activity.published_last_minute.to_string()),
        ("published, last hour", r.activity.published_last_hour.to_string()),
        ("entities behind", count(b.entities_behind, b.entities_exact())),
        ("largest entity gap", count(b.largest_gap, b.entities_exact())),
        ("expired leases", count(b.expired_leases, b.entities_exact())),
    ];
    for (name, value) in rows.into_iter().chain(horizon_rows(&b.horizon)) {
        let _ = writeln!(out, "{name:<26}{value}");
    }
    let _ = writeln!(out, "\nrelays holding claims{}", if r.activity.claims.is_empty() { ": none" } else { "" });
    if !r.activity.claims.is_empty() {
        let _ = writeln!(out, "  {:<32} {:>8} {:>8}  LEASE UNTIL", "OWNER", "ROWS", "EXPIRED");
    }
    for c in &r.activity.claims {
        let until = c.lease_until.1.format("%Y-%m-%dT%H:%M:%SZ");
        let _ = writeln!(out, "  {:<32} {:>8} {:>8}  {until}", c.owner, c.rows, c.expired);
    }
    let _ =
        writeln!(out, "\nreplay jobs{}", if r.replays.is_empty() { ": none running, paused or failed" } else { "" });
    for job in &r.replays {
        let _ = writeln!(out, "  {}", crate::replay::job_line(job));
    }
    match &r.inbox {
        None => out.push_str("\ninbox: no inbox tables in this database\n"),
        Some(consumers) if consumers.is_empty() => out.push_str("\ninbox consumers: none\n"),
        Some(consumers) => {
            let _ = writeln!(out, "\ninbox consumers");
            let _ = writeln!(
                out,
                "  {:<24} {:>12} {:>8} {:>14} {:>8}",
                "CONSUMER", "WITH A GAP", "PARKED", "OLDEST PARKED", "FAILED"
            );
            for (name, i) in consumers {
                let oldest = format!("{:.1} s", i.oldest_parked_age_seconds);
                let _ = writeln!(
                    out,
                    "  {name:<24} {:>12} {:>8} {oldest:>14} {:>8}",
                    i.entities_with_gap, i.parked, i.failed
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        let d = Duration::from_secs;
        assert_eq!([human(d(0)), human(d(59)), human(d(843)), human(d(11_220))], ["0s", "59s", "14m 3s", "3h 7m"]);
    }

    #[test]
    fn no_snapshot_held_reads_none_and_no_slot_row() {
        assert_eq!(snapshot_text(None), "none");
        assert_eq!(horizon_rows(&Horizon::default()), [("oldest snapshot", "none".to_owned())]);
    }
}
