//! The relay's defaults, in one place: [`RelayBuilder`](crate::RelayBuilder) starts from them, the
//! `outbox relay` command's flags default to them, and the docs quote them.
//!
//! ```
//! use std::time::Duration;
//! use outbox_relayer::defaults;
//!
//! assert_eq!(defaults::BATCH_SIZE, 500);
//! assert_eq!(defaults::LEASE, Duration::from_secs(30));
//! assert!(defaults::CONFIRM_TIMEOUT < defaults::LEASE);
//! ```

use std::time::Duration;

/// Rows one claim takes.
pub const BATCH_SIZE: usize = 500;
/// Consecutive events of one entity one claim takes at most.
pub const EVENTS_PER_ENTITY: usize = 4;
/// Messages awaiting their confirm at once, over the batches in flight.
pub const CONFIRM_WINDOW: usize = 1000;
/// How long a claim is held before another relay may take it over.
pub const LEASE: Duration = Duration::from_secs(30);
/// The longest wait for new rows between claims when no notification arrives.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long notifications are gathered before a claim when the outbox was idle.
pub const LINGER: Duration = Duration::from_millis(200);
/// The wait between claims while a backlog drains.
pub const FAST_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How long a batch's confirms are awaited.
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a graceful shutdown waits for the confirms in flight.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);
/// The exchange events are published to.
pub const EXCHANGE: &str = "outbox.events";
/// Rows marked published after which the relay vacuums `outbox_events` itself.
pub const VACUUM_AFTER_ROWS: u64 = 100_000;
/// The least time between two looks of a relay below its queue's low water for rows no signal
/// announced (see [`RelayBuilder::recheck_passed_rows`](crate::RelayBuilder::recheck_passed_rows)).
pub const RECHECK_PASSED_ROWS: Duration = Duration::from_secs(30);
/// How often a relay reads the backlog into its gauges.
pub const GAUGE_INTERVAL: Duration = Duration::from_secs(10);
/// How often a relay logs its summary line at `info`.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);
/// How often a relay with retention deletes old final rows.
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(60);
/// How long a connection of a relay with a bounded pool
/// ([`RelayBuilder::max_connections`](crate::RelayBuilder::max_connections), every relay of a
/// fleet) stays open unused before it closes.
pub const IDLE_CONNECTION: Duration = Duration::from_secs(10);
