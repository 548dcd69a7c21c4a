//! Watching the server for transactions that hold vacuum back in every database. A snapshot held
//! in another database does not count for this run's database, but a transaction with an xid open
//! anywhere on the server does: every snapshot taken here keeps it as running, so the run's own
//! sessions hold the horizon at it. On a shared server (tests of other work, a forgotten session)
//! such a transaction turns a `free` run into a held one; this watch says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;

use crate::wait::FLOOR;

/// The age in milliseconds of the oldest transaction with an xid on the server (any database),
/// prepared transactions included.
const OLDEST_XID_MS: &str = "\
SELECT (1000 * greatest(
    (SELECT coalesce(max(extract(epoch FROM now() - xact_start)), 0) FROM pg_stat_activity
     WHERE backend_xid IS NOT NULL),
    (SELECT coalesce(max(extract(epoch FROM now() - prepared)), 0) FROM pg_prepared_xacts)))::int8";
/// How often the server is read.
const POLL: Duration = Duration::from_secs(1);

/// The watch, running.
pub(super) struct Horizon {
    /// The oldest age seen, in milliseconds.
    oldest_ms: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Horizon {
    /// Reads the server through `pool` every [`POLL`] (each read within [`FLOOR`]; one that fails
    /// or does not answer is skipped) until [`Horizon::stop`].
    pub(super) fn watch(pool: PgPool) -> Self {
        let oldest_ms = Arc::new(AtomicU64::new(0));
        let seen = oldest_ms.clone();
        let task = tokio::spawn(async move {
            loop {
                let read = sqlx::query_scalar::<_, i64>(OLDEST_XID_MS).fetch_one(&pool);
                if let Ok(Ok(ms)) = tokio::time::timeout(FLOOR, read).await {
                    seen.fetch_max(u64::try_from(ms).unwrap_or(0), Ordering::Relaxed);
                }
                tokio::time::sleep(POLL).await;
            }
        });
        Self { oldest_ms, task }
    }

    /// Stops the watch; returns the age of the oldest transaction with an xid it saw.
    pub(super) fn stop(self) -> Duration {
        self.task.abort();
        Duration::from_millis(self.oldest_ms.load(Ordering::Relaxed))
    }
}
