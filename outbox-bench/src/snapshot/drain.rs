//! Part 1, the relay's drain: the same backlog drained by one relay process without a snapshot
//! held and with one held from before the backlog was written.

use super::hold::{Snapshot, in_fresh_db};
use super::plan::Plan;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::relay::{RelayChild, Target, drain_in_child};
use crate::steal::Steal;

/// Drains the plan's backlog free, then held, each in a fresh database, and prints
/// `snapshot_drain_free`, `snapshot_drain_held` and their ratio (with the CPU each took per 1,000
/// events). Returns the free rate, which sets the steady load.
///
/// Each drain is the relay benchmark's ([`drain_in_child`]): the backlog written with
/// `enqueue_many`, then `VACUUM ANALYZE` and `CHECKPOINT`, then one relay process with default
/// settings until every row is published (or the plan's limit cuts it off). The held snapshot is
/// taken before the backlog is written, so every row the relay claims and publishes is newer than
/// it and none of its dead versions can be removed.
pub(super) async fn drain(target: Target<'_>, plan: Plan) -> Result<f64, BoxError> {
    let mut rates = Vec::with_capacity(2);
    for snapshot in Snapshot::BOTH {
        let steal = Steal::start();
        let drained = in_fresh_db(snapshot, &format!("drain {}", snapshot.name()), async |db| {
            drain_in_child(db, target, plan.drain, RelayChild::default()).await
        })
        .await?;
        comment(format_args!("drain {}: {:.1} events/s, {}", snapshot.name(), drained.rate, steal.describe()));
        drained.cpu.print(&format!("snapshot_drain_{}", snapshot.name()), plan.drain.events);
        rates.push(drained.rate);
    }
    let (free, held) = (rates[0], rates[1]);
    figure("snapshot_drain_backlog_events", Value::Count(plan.drain.events), "events");
    figure("snapshot_drain_free", Value::Rate(free), "events/s");
    figure("snapshot_drain_held", Value::Rate(held), "events/s");
    figure("snapshot_drain_ratio", Value::Ratio(held / free), "x");
    Ok(free)
}
