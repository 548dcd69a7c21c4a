//! The settings of a [`Replayer`](super::Replayer), as its builder sets them, and what it reports
//! after each batch.

use std::sync::Arc;
use std::time::Duration;

use outbox_types::PayloadCipher;

use crate::routing::RoutingStrategy;

/// Events per batch by default: one read, one publish, one progress record. Two batches are out
/// with the broker at a time, so at most twice this many are sent twice when the process running a
/// job dies.
pub const DEFAULT_BATCH_SIZE: usize = 500;

/// What a replay runner reports after each batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayProgress {
    /// Events sent and confirmed in this batch.
    pub sent: u64,
    /// Rows passed over in this batch (scrubbed payloads, keys not held).
    pub passed_over: u64,
}

/// A callback told of each batch's progress (a progress bar).
pub(super) type OnProgress = Arc<dyn Fn(ReplayProgress) + Send + Sync>;

/// The settings of a [`Replayer`](super::Replayer).
pub(super) struct Settings {
    pub(super) batch_size: usize,
    pub(super) confirm_timeout: Duration,
    pub(super) cipher: Option<PayloadCipher>,
    pub(super) end_to_end: bool,
    pub(super) app_id: Option<String>,
    pub(super) runner: String,
    pub(super) routing: Option<Arc<dyn RoutingStrategy>>,
    pub(super) on_progress: Option<OnProgress>,
}
