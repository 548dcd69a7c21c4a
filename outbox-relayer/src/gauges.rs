//! The backlog as gauges: what waits, what is held behind a quarantined event, how old the oldest
//! of each is, what is quarantined by kind, which entities are behind and by how much, and which
//! claims outlived their lease; and what holds back the database's xmin horizon (the oldest
//! snapshot another session holds, the oldest replication slot). Read by
//! [`outbox_ops::admin::backlog`], one index-served statement and one over the server's activity
//! per relay every `gauge_interval`.

use metrics::Label;
use outbox_ops::Horizon;
use outbox_ops::admin::Backlog;

/// Sets the gauges to `backlog`; kinds seen before and gone now are set to zero.
pub(crate) fn record(backlog: &Backlog, kinds_seen: &mut Vec<String>, labels: &[Label]) {
    use crate::metrics as m;
    metrics::gauge!(m::WAITING, labels.to_vec()).set(backlog.waiting as f64);
    metrics::gauge!(m::HELD, labels.to_vec()).set(backlog.held as f64);
    metrics::gauge!(m::OLDEST_WAITING, labels.to_vec()).set(backlog.oldest_waiting_age.as_secs_f64());
    metrics::gauge!(m::OLDEST_HELD, labels.to_vec()).set(backlog.oldest_held_age.as_secs_f64());
    metrics::gauge!(m::EXPIRED_LEASES, labels.to_vec()).set(backlog.expired_leases as f64);
    metrics::gauge!(m::ENTITIES_BEHIND, labels.to_vec()).set(backlog.entities_behind as f64);
    metrics::gauge!(m::LARGEST_GAP, labels.to_vec()).set(backlog.largest_gap as f64);
    record_horizon(&backlog.horizon, labels);
    for kind in kinds_seen.iter() {
        if !backlog.quarantined.iter().any(|(k, _)| k == kind) {
            metrics::gauge!(m::QUARANTINED_NOW, with_kind(labels, kind)).set(0.0);
        }
    }
    for (kind, n) in &backlog.quarantined {
        metrics::gauge!(m::QUARANTINED_NOW, with_kind(labels, kind)).set(*n as f64);
        if !kinds_seen.contains(kind) {
            kinds_seen.push(kind.clone());
        }
    }
}

/// Sets the horizon's gauges: the oldest snapshot's age (0 when none is held, or when its age is
/// hidden from the relay's role) and the horizon's age in transactions. No pid or slot name as a
/// label: `outbox status` names them.
fn record_horizon(horizon: &Horizon, labels: &[Label]) {
    use crate::metrics as m;
    metrics::gauge!(m::OLDEST_SNAPSHOT, labels.to_vec()).set(horizon.oldest_snapshot_age().as_secs_f64());
    metrics::gauge!(m::HORIZON_XID_AGE, labels.to_vec()).set(horizon.xid_age() as f64);
}

/// `labels` and the failure kind `kind`.
fn with_kind(labels: &[Label], kind: &str) -> Vec<Label> {
    let mut all = labels.to_vec();
    all.push(Label::new("kind", kind.to_owned()));
    all
}
