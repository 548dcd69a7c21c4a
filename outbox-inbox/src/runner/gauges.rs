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
        for (tenant, pool) in shared.service.databases() {
            read_backlog(&pool, &consumer, tenant.as_deref()).await;
        }
    }
}

/// Sets the gauges of one database: labelled `tenant` in a multi-tenant inbox.
async fn read_backlog(pool: &sqlx::PgPool, consumer: &str, tenant: Option<&str>) {
    let b = match crate::admin::backlog(pool, consumer).await {
        Ok(b) => b,
        Err(e) => return tracing::debug!(error = %e, tenant, "could not read the inbox backlog for the gauges"),
    };
    let mut labels = vec![("consumer", consumer.to_owned())];
    labels.extend(tenant.map(|t| ("tenant", t.to_owned())));
    metrics::gauge!(m::ENTITIES_WITH_GAP, &labels).set(b.entities_with_gap as f64);
    metrics::gauge!(m::PARKED, &labels).set(b.parked as f64);
    metrics::gauge!(m::OLDEST_PARKED, &labels).set(b.oldest_parked_age_seconds);
    metrics::gauge!(m::FAILED, &labels).set(b.failed as f64);
}
