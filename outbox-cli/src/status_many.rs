//! `outbox status` over many databases (`--database`, `--databases-file`): one row per database
//! (what waits and since when, what is held or quarantined, expired leases, what was published in
//! the last hour) and a total, or one JSON object. A database that cannot be read gets a row that
//! says why, and makes the exit status 1 once everything is printed.

use std::time::Duration;

use outbox_ops::admin::{Activity, Backlog};
use outbox_relayer::fleet::FleetDatabase;
use serde_json::{Value, json};

use crate::error::CliError;
use crate::many::{Outcome, each, name_width, reading_deadline, verdict};

/// What one database answered.
type Row = Outcome<(Backlog, Activity)>;

/// Prints every listed database's state and the total.
///
/// # Errors
/// [`CliError::DatabasesFailed`] if any database could not be read (after printing all of them).
pub(crate) async fn run(databases: Vec<FleetDatabase>, timeout: Duration, json: bool) -> Result<(), CliError> {
    let rows =
        each(databases, reading_deadline(timeout), |database| async move { read_one(&database, timeout).await }).await;
    if json {
        println!("{}", to_json(&rows));
    } else {
        print!("{}", to_text(&rows));
    }
    verdict(&rows, "could not be read")
}

async fn read_one(database: &FleetDatabase, timeout: Duration) -> Result<(Backlog, Activity), CliError> {
    let mut conn = crate::connect::within(database.connect_options(), timeout).await?;
    crate::schema::check_outbox(&mut conn).await?;
    let backlog = outbox_ops::admin::backlog(&mut conn).await?;
    let activity = outbox_ops::admin::activity(&mut conn).await?;
    let _ = sqlx::Connection::close(conn).await;
    Ok((backlog, activity))
}

/// The figures a row shows and the total adds up.
fn figures(b: &Backlog, a: &Activity) -> [i64; 5] {
    let quarantined = b.quarantined.iter().map(|(_, n)| n).sum();
    [b.waiting, b.held, quarantined, b.expired_leases, a.published_last_hour]
}

fn to_text(rows: &[Row]) -> String {
    let width = name_width(rows, "database");
    let mut out = format!(
        "{:width$}  {:>10}  {:>8}  {:>11}  {:>14}  {:>10}  {:>16}\n",
        "database", "waiting", "held", "quarantined", "expired leases", "oldest", "published (1 h)"
    );
    let (mut total, mut oldest) = ([0i64; 5], Duration::ZERO);
    for row in rows {
        match &row.result {
            Ok((b, a)) => {
                let f = figures(b, a);
                total.iter_mut().zip(f).for_each(|(t, n)| *t += n);
                oldest = oldest.max(b.oldest_waiting_age);
                out += &format!(
                    "{:width$}  {:>10}  {:>8}  {:>11}  {:>14}  {:>10}  {:>16}\n",
                    row.name,
                    f[0],
                    f[1],
                    f[2],
                    f[3],
                    age(b.oldest_waiting_age),
                    f[4]
                );
            }
            Err(why) => out += &format!("{:width$}  cannot be read: {why}\n", row.name),
        }
    }
    let read = rows.iter().filter(|r| r.result.is_ok()).count();
    out += &format!(
        "{:width$}  {:>10}  {:>8}  {:>11}  {:>14}  {:>10}  {:>16}\n",
        format!("total ({read} of {})", rows.len()),
        total[0],
        total[1],
        total[2],
        total[3],
        age(oldest),
        total[4]
    );
    out
}

/// An age in seconds (a tenth under ten seconds), `-` for none.
fn age(d: Duration) -> String {
    match d.as_secs_f64() {
        0.0 => "-".to_owned(),
        s if s < 10.0 => format!("{s:.1} s"),
        s => format!("{s:.0} s"),
    }
}

fn to_json(rows: &[Row]) -> Value {
    let mut total = [0i64; 5];
    let mut oldest = Duration::ZERO;
    let databases: Vec<Value> = rows
        .iter()
        .map(|row| match &row.result {
            Ok((b, a)) => {
                let f = figures(b, a);
                total.iter_mut().zip(f).for_each(|(t, n)| *t += n);
                oldest = oldest.max(b.oldest_waiting_age);
                json!({
                    "name": row.name, "waiting": f[0], "held": f[1], "quarantined": f[2],
                    "expired_leases": f[3], "oldest_waiting_age_seconds": b.oldest_waiting_age.as_secs_f64(),
                    "published_last_hour": f[4],
                })
            }
            Err(why) => json!({ "name": row.name, "error": why }),
        })
        .collect();
    json!({
        "databases": databases,
        "total": {
            "databases": rows.len(), "read": rows.iter().filter(|r| r.result.is_ok()).count(),
            "waiting": total[0], "held": total[1], "quarantined": total[2], "expired_leases": total[3],
            "oldest_waiting_age_seconds": oldest.as_secs_f64(), "published_last_hour": total[4],
        },
    })
}
