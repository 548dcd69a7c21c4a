//! The consumer's settings in every phase: the runner's defaults, the consumer process's pool, the
//! inbox's consumer name and how the process's connections are found.

use outbox_inbox::InboxRunnerBuilder;

/// Unacknowledged deliveries the broker sends ahead: the runner's default, used by both consumers.
pub(super) const PREFETCH: u16 = InboxRunnerBuilder::<()>::DEFAULT_PREFETCH;
/// Transactions the runner has open at once: its default.
pub(super) const CONCURRENCY: usize = InboxRunnerBuilder::<()>::DEFAULT_CONCURRENCY;
/// Deliveries per transaction at most: the runner's default.
pub(super) const BATCH: usize = InboxRunnerBuilder::<()>::DEFAULT_BATCH_SIZE;
/// Connections of the consumer process's pool: one per transaction, and room for the sweeper.
pub(super) const POOL: u32 = 16;
/// The inbox's consumer name.
pub(super) const CONSUMER: &str = "bench-shipping";
/// `application_name` of the consumer process's database connections, to find its backends.
pub(super) const APPLICATION_NAME: &str = "outbox-bench-consumer";
