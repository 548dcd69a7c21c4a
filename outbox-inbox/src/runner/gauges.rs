//! The inbox's backlog as gauges, read periodically while the runner runs (with or without a
//! broker connection).

use std::sync::Arc;

use super::shared::Shared;
use crate::metrics as m;

/// Reads the backlog into the gauges every `gauge_interval`, until aborted.
pub(super) async fn gauges<S>(shared: Arc<Shared<S>>) {
    let Some(every) = shared.settings.gauge_interval else {
        return;
    };
    let consumer = shared.service.consumer().to_owned();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match crate::admin::backlog(shared.service.pool(), &consumer).await {
            Ok(b) => {
                let c = consumer.clone();
                metrics::gauge!(m::ENTITIES_WITH_GAP, "consumer" => c.clone()).set(b.entities_with_gap as f64);
                metrics::gauge!(m::PARKED, "consumer" => c.clone()).set(b.parked as f64);
                metrics::gauge!(m::OLDEST_PARKED, "consumer" => c.clone()).set(b.oldest_parked_age_seconds);
                metrics::gauge!(m::FAILED, "consumer" => c).set(b.failed as f64);
            }
            Err(e) => tracing::debug!(error = %e, "could not read the inbox backlog for the gauges"),
        }
    }
}
