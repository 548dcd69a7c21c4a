//! The backlog as gauges: what waits, what is held behind a quarantined event, how old the oldest
//! of each is, what is quarantined by kind, which entities are behind and by how much, and which
//! claims outlived their lease; and what holds back the database's xmin horizon (the oldest
//! snapshot another session holds, the oldest replication slot). Read by
//! [`outbox_ops::admin::backlog`], one index-served statement and one over the server's activity
//! per relay every `gauge_interval`.

use outbox_ops::Horizon;
use outbox_ops::admin::Backlog;

/// Sets the gauges to `backlog`; kinds seen before and gone now are set to zero.
pub(crate) fn record(backlog: &Backlog, kinds_seen: &mut Vec<String>) {
    use crate::metrics as m;
    metrics::gauge!(m::WAITING).set(backlog.waiting as f64);
    metrics::gauge!(m::HELD).set(backlog.held as f64);
    metrics::gauge!(m::OLDEST_WAITING).set(backlog.oldest_waiting_age.as_secs_f64());
    metrics::gauge!(m::OLDEST_HELD).set(backlog.oldest_held_age.as_secs_f64());
    metrics::gauge!(m::EXPIRED_LEASES).set(backlog.expired_leases as f64);
    metrics::gauge!(m::ENTITIES_BEHIND).set(backlog.entities_behind as f64);
    metrics::gauge!(m::LARGEST_GAP).set(backlog.largest_gap as f64);
    record_horizon(&backlog.horizon);
    for kind in kinds_seen.iter() {
        if !backlog.quarantined.iter().any(|(k, _)| k == kind) {
            metrics::gauge!(m::QUARANTINED_NOW, "kind" => kind.clone()).set(0.0);
        }
    }
    for (kind, n) in &backlog.quarantined {
        metrics::gauge!(m::QUARANTINED_NOW, "kind" => kind.clone()).set(*n as f64);
        if !kinds_seen.contains(kind) {
            kinds_seen.push(kind.clone());
        }
    }
}

/// Sets the horizon's gauges: the oldest snapshot's age (0 when none is held, or when its age is
/// hidden from the relay's role) and the horizon's age in transactions. No pid or slot name as a
/// label: `outbox status` names them.
fn record_horizon(horizon: &Horizon) {
    use crate::metrics as m;
    metrics::gauge!(m::OLDEST_SNAPSHOT).set(horizon.oldest_snapshot_age().as_secs_f64());
    metrics::gauge!(m::HORIZON_XID_AGE).set(horizon.xid_age() as f64);
}
