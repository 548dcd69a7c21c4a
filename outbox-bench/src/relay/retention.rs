//! What retention in the relay costs a drain, on request (`OUTBOX_BENCH_RELAY_PHASES=retention`):
//! a backlog drained beside 1,000,000 old published rows, by a relay without retention and by one
//! deleting them as it drains, alternating, and how fast the old rows went.

use std::time::Duration;

use outbox_ops::Retention;
use outbox_testkit::TestDb;

use super::drain::drain_filled;
use super::fill::fill;
use super::plan::Plan;
use super::target::Target;
use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::wait::{FLOOR, allow_for, within};

/// Old published rows, two days old, over 1,000 entities of their own.
const OLD_ROWS: &str = "\
INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type, status, created_at, published_at)
SELECT gen_random_uuid(), 'order.changed', 1, 'old-' || (i % 1000), i / 1000 + 1, '\\x7b7d', 'application/json',
       'published', now() - interval '2 days', now() - interval '2 days'
FROM generate_series(0, $1 - 1) AS i";

/// Old rows per second that writing them, and vacuuming them, still reach on a slow, busy host, for
/// their deadlines.
const OLD_ROWS_RATE: u64 = 20_000;

const COUNT_OLD: &str =
    "SELECT count(*) FROM outbox_events WHERE status = 'published' AND published_at < now() - interval '1 day'";

/// One drain beside `old` old rows: events per second, and the old rows deleted meanwhile.
async fn round(db: &TestDb, target: Target<'_>, plan: Plan, old: i64, retain: bool) -> Result<(f64, i64), BoxError> {
    let filled = fill(db, plan.drain.events, plan.drain.entities, false).await?;
    let limit = allow_for(u64::try_from(old)?, OLD_ROWS_RATE);
    within(format_args!("{old} old rows written"), limit, sqlx::query(OLD_ROWS).bind(old).execute(db.pool())).await?;
    let vacuum = sqlx::raw_sql("VACUUM ANALYZE outbox_events").execute(db.pool());
    within(format_args!("VACUUM ANALYZE of {old} old rows"), limit, vacuum).await?;
    let retention =
        retain.then(|| Retention::builder(Duration::from_secs(86_400)).batch_size(5_000).build()).transpose()?;
    let rate = drain_filled(db, target, plan.drain, filled, retention).await?;
    let left: i64 = within("the count of old rows", FLOOR, sqlx::query_scalar(COUNT_OLD).fetch_one(db.pool())).await?;
    Ok((rate, old - left))
}

/// Runs the phase: two rounds of a drain without and with retention.
pub(super) async fn retention_phase(target: Target<'_>, plan: Plan, old: i64) -> Result<(), BoxError> {
    let (mut off, mut on, mut removed_per_s) = (Vec::new(), Vec::new(), Vec::new());
    for n in 1..=2 {
        for retain in [false, true] {
            let (rate, deleted) = with_db(async |db| round(db, target, plan, old, retain).await).await?;
            let drain_secs = plan.drain.events as f64 / rate;
            comment(format_args!(
                "retention round {n}, retention {}: drain {rate:.1} events/s over {drain_secs:.1} s, {deleted} of {old} old rows deleted meanwhile",
                if retain { "on" } else { "off" }
            ));
            if retain {
                on.push(rate);
                removed_per_s.push(deleted as f64 / drain_secs);
            } else {
                off.push(rate);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    figure("relay_drain_events_per_s_retention_off", Value::Rate(mean(&off)), "events/s");
    figure("relay_drain_events_per_s_retention_on", Value::Rate(mean(&on)), "events/s");
    figure("relay_drain_ratio_retention_on_vs_off", Value::Ratio(mean(&on) / mean(&off)), "x");
    figure("retention_rows_deleted_per_s_while_draining", Value::Rate(mean(&removed_per_s)), "rows/s");
    Ok(())
}
