//! The settings of a relay, as [`RelayBuilder`](super::RelayBuilder) sets them, and the crash points
//! of failure tests.

use std::time::Duration;

use outbox_types::{ExchangeKind, RetryPolicy};

use crate::store;

/// Points where a relay can be made to stop as if its process died (no further writes), for
/// failure tests. Only with the `fail-points` feature.
#[cfg(feature = "fail-points")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashPoint {
    /// Rows are claimed; nothing was published.
    AfterClaim,
    /// The batch was sent to the broker; its confirms are not awaited.
    AfterPublishBeforeConfirm,
    /// The broker confirmed the batch; nothing was marked published.
    AfterConfirmBeforeMark,
}

/// Settings of a [`Relay`](super::Relay); every one has a documented default in
/// [`RelayBuilder`](super::RelayBuilder).
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) relay_id: String,
    pub(super) batch_size: usize,
    pub(super) events_per_entity: usize,
    pub(super) confirm_window: usize,
    pub(super) lease: Duration,
    pub(super) poll_interval: Duration,
    pub(super) linger: Duration,
    pub(super) fast_poll_interval: Duration,
    pub(super) confirm_timeout: Duration,
    pub(super) shutdown_deadline: Duration,
    pub(super) retry: RetryPolicy,
    pub(super) exchange: String,
    pub(super) exchange_kind: ExchangeKind,
    pub(super) declare_exchange: bool,
    pub(super) app_id: Option<String>,
    pub(super) synchronous_commit: bool,
    pub(super) lock_timeout: Option<Duration>,
    pub(super) vacuum_after: Option<u64>,
    pub(super) gauge_interval: Option<Duration>,
    pub(super) recheck_passed_rows: Duration,
    pub(super) summary_interval: Option<Duration>,
    pub(super) retention: Option<outbox_ops::Retention>,
    pub(super) retention_interval: Duration,
    pub(super) cipher: Option<outbox_types::PayloadCipher>,
    pub(super) end_to_end: bool,
    /// The database's name in metrics (label `database`) and log lines; `None`: no label.
    pub(super) database: Option<String>,
    /// The most connections the relay's pool opens; `None`: sized for the confirm window.
    pub(super) max_connections: Option<u32>,
    /// Whether the relay LISTENs for commits (and has commits notify it while it waits).
    pub(super) notifications: bool,
    #[cfg(feature = "fail-points")]
    pub(super) crash_at: Option<CrashPoint>,
}

impl Settings {
    /// What the claim does with sealed payloads.
    pub(super) fn sealed(&self) -> store::Sealed<'_> {
        if self.end_to_end { store::Sealed::Forward } else { store::Sealed::Open(self.cipher.as_ref()) }
    }

    /// Full batches the confirm window holds: each may be recording its outcome while the next
    /// ones are claimed, so the relay's pool has two connections per batch (and three more for the
    /// claim, the listener and housekeeping, and one for the queue's low water).
    pub(super) fn full_batches(&self) -> usize {
        self.confirm_window.div_ceil(self.batch_size).max(1)
    }
}
