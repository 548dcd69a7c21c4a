//! The dedup window's retention, run by the runner while it runs (with or without a broker
//! connection).

use std::sync::Arc;

use super::shared::Shared;

/// Deletes the consumer's processed event ids older than its dedup window every
/// `retention_interval`, in batches of 5,000 (at most 100 each time), until aborted.
pub(super) async fn retention<S>(shared: Arc<Shared<S>>) {
    const BATCH: i64 = 5_000;
    let Some(window) = shared.settings.dedup_window else {
        return;
    };
    let consumer = shared.service.consumer().to_owned();
    let mut tick = tokio::time::interval(shared.settings.retention_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut deleted = 0;
        for _ in 0..100 {
            match crate::retention::prune(shared.service.pool(), &consumer, window, BATCH).await {
                Ok(n) => {
                    deleted += n;
                    if n < BATCH as u64 {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "inbox retention failed; trying again at the next interval");
                    break;
                }
            }
        }
        if deleted > 0 {
            tracing::info!(consumer = %consumer, deleted, "inbox.retention: processed event ids past the dedup window deleted");
        }
    }
}
