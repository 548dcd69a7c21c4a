//! The runner's settings, and the crash points of failure tests.

use std::time::Duration;

use outbox_amqp::{Nodes, Topology};
use outbox_types::RetryPolicy;

use crate::DeliveryLimits;

/// Points where a runner can be made to stop as if its process died, for failure tests. Only with
/// the `fail-points` feature.
#[cfg(feature = "fail-points")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashPoint {
    /// The handler's transaction committed; the delivery is not acked.
    AfterCommitBeforeAck,
}

/// Settings of an [`InboxRunner`](crate::InboxRunner); every one has a documented default in
/// [`InboxRunnerBuilder`](crate::InboxRunnerBuilder).
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) nodes: Nodes,
    pub(super) connection_name: String,
    pub(super) queues: Vec<String>,
    pub(super) dead_letter_exchange: String,
    /// Declared on every connection, when the runner was given one.
    pub(super) topology: Option<Topology>,
    pub(super) prefetch: u16,
    pub(super) concurrency: usize,
    pub(super) batch_size: usize,
    pub(super) retry: RetryPolicy,
    pub(super) limits: DeliveryLimits,
    pub(super) sweep_interval: Duration,
    pub(super) gauge_interval: Option<Duration>,
    pub(super) dedup_window: Option<Duration>,
    pub(super) retention_interval: Duration,
    pub(super) shutdown_deadline: Duration,
    #[cfg(feature = "fail-points")]
    pub(super) crash_at: Option<CrashPoint>,
}
