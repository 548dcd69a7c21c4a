//! The dedup window's retention, run by the runner while it runs (with or without a broker
//! connection).

use std::sync::Arc;

use super::shared::Shared;

/// Processed event ids deleted in one statement.
const BATCH: i64 = 5_000;

/// Deletes the consumer's processed event ids older than its dedup window every
/// `retention_interval`, in batches of 5,000 (at most 100 each time in each database), until
/// aborted.
pub(super) async fn retention<S>(shared: Arc<Shared<S>>) {
    let Some(window) = shared.settings.dedup_window else {
        return;
    };
    let consumer = shared.service.consumer().to_owned();
    let mut tick = tokio::time::interval(shared.settings.retention_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut deleted = 0;
        for (tenant, pool) in shared.service.databases() {
            deleted += prune(&pool, &consumer, window, tenant.as_deref()).await;
        }
        if deleted > 0 {
            tracing::info!(consumer = %consumer, deleted, "inbox.retention: processed event ids past the dedup window deleted");
        }
    }
}

/// One database's turn: returns how many ids were deleted.
async fn prune(pool: &sqlx::PgPool, consumer: &str, window: std::time::Duration, tenant: Option<&str>) -> u64 {
    let mut deleted = 0;
    for _ in 0..100 {
        match crate::retention::prune(pool, consumer, window, BATCH).await {
            Ok(n) => {
                deleted += n;
                if n < BATCH as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, tenant, "inbox retention failed; trying again at the next interval");
                break;
            }
        }
    }
    deleted
}
