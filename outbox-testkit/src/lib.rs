//! Test support for outbox users and for the product's own tests: isolated environments on the
//! real PostgreSQL and RabbitMQ, failure injection at every boundary, and reconciliation.
//!
//! # A failure test for your own flow
//!
//! [`Harness`] gives a test its own database, exchange and queues, a relay, your handler running
//! in the inbox, a [`Recorder`] at the broker, and tears it all down. This test of an order flow
//! loses the broker's confirm of its event and proves that the order ships once:
//!
#![doc = concat!("```no_run\n", include_str!("../tests/user_flow/lost_confirm.rs"), "```")]
//!
//! # What is here
//!
//! - [`Harness`]: one call for a complete environment; accessors `pool()`, `outbox()`,
//!   `exchange()`, `queue()`, `recorder()`, `relay_handle()`, `consumer_handle()`, `reconcile()`;
//!   faults through `faults()` (a [`FaultyPublisher`]), `relay_proxy()` / `consumer_proxy()`
//!   (a [`ChaosProxy`]), crash points through `start_relay_with(|b| b.crash_at(..))` and
//!   `start_consumer_crashing_at(..)`; `kill_relay()` / `kill_consumer()` as if the process died.
//! - [`Reconciliation`] (from `outbox_ops::reconcile`, with [`RecorderDeliveries::broker`]):
//!   compares your business query (entity versions or event ids) with the outbox, what the broker
//!   delivered and what a consumer's inbox applied; returns a [`ReconciliationReport`]
//!   (`is_clean()`, a readable `Display` without payloads).
//! - [`TestDb`]: a fresh database per test, with the outbox and inbox migrations applied, dropped
//!   afterwards (also when the test panics).
//! - [`TestBroker`]: exchange and queue names with a random suffix, deleted afterwards.
//! - [`ChaosProxy`]: a loopback TCP proxy that cuts, refuses, stalls or slows connections.
//! - [`FaultyPublisher`]: fails, nacks, returns, delays or loses the confirms of chosen publishes.
//! - [`Recorder`]: records every delivery of a queue; checks ids, duplicates and per-entity order.
//! - [`LogCapture`]: what the test process logs, as text, through the product's redacting filter.
//! - [`rows_fetched`]: the rows of a table the current transaction has read, to prove that a
//!   statement's plan reads only the rows it should.
//! - [`SnapshotHolder`]: a session idle in a transaction that holds an old snapshot, as a long
//!   report does, holding back vacuum (for tests of what `outbox_ops::horizon` shows).
//! - Crash points: its `fail-points` feature enables those of the relay and the consumer runner
//!   (`outbox_relayer::CrashPoint`, `outbox_inbox::CrashPoint`); the crates whose tests arm them turn
//!   it on in their dev-dependencies, so no release build compiles them in.
//!
//! The ten failure scenarios of the design (rollback, broker down, relay crashes before and after
//! publishing, competing relays, entity order, quarantine, backlog, retention, reconciliation) are
//! the tests `scenario_01_...` to `scenario_10_...` in `outbox-system-tests/tests/system/scenarios.rs`, each
//! written on the harness and checking the consumer's business outcome.
//!
//! The servers are found through `OUTBOX_TEST_DATABASE_URL` (or `DATABASE_URL`) and
//! `OUTBOX_TEST_AMQP_URL` (or `AMQP_URL`); the defaults are the local servers
//! `postgres://postgres@127.0.0.1:5432/test` and `amqp://guest:guest@127.0.0.1:5672/%2f`.

mod broker;
mod cluster;
mod db;
mod error;
mod faulty;
mod harness;
mod log_capture;
mod logging;
mod proxy;
mod reads;
mod reconcile;
mod recorder;
mod snapshot;
mod suffix;
mod wait;

pub use broker::{TestBroker, amqp_url, close_connections_named};
pub use cluster::{ClusterNode, TestCluster};
pub use db::TestDb;
pub use error::{Error, Result};
pub use faulty::{Fault, FaultyPublisher};
pub use harness::{Harness, HarnessBuilder, HarnessPublisher};
pub use log_capture::LogCapture;
pub use logging::init_logging;
pub use proxy::{ChaosProxy, Mode};
pub use reads::rows_fetched;
pub use reconcile::{
    BrokerFindings, Change, EventRef, InboxFindings, InboxRow, OrderViolation, OutboxRow, Reconciliation,
    ReconciliationReport, RecorderDeliveries, Snapshot, compare,
};
pub use recorder::{Record, Recorder};
pub use snapshot::{SNAPSHOT_HOLDER_APP, SnapshotHolder};
pub use suffix::unique_suffix;
pub use wait::{Check, at_least, equal, wait_for};

/// The guides under `docs/`, compiled as doc tests so that their code cannot rot.
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../../docs/configuration.md")]
    mod configuration {}
    #[doc = include_str!("../../docs/deployment.md")]
    mod deployment {}
    #[doc = include_str!("../../docs/failure-scenarios.md")]
    mod failure_scenarios {}
    #[doc = include_str!("../../docs/many-databases.md")]
    mod many_databases {}
    #[doc = include_str!("../../docs/ordering.md")]
    mod ordering {}
    #[doc = include_str!("../../docs/quarantine.md")]
    mod quarantine {}
    #[doc = include_str!("../../docs/replay.md")]
    mod replay {}
    #[doc = include_str!("../../docs/retention.md")]
    mod retention {}
    #[doc = include_str!("../../docs/scaling.md")]
    mod scaling {}
    #[doc = include_str!("../../docs/security.md")]
    mod security {}
    /// Arms crash points: compiled with the `fail-points` feature (on in `cargo test --workspace`).
    #[cfg(feature = "fail-points")]
    #[doc = include_str!("../../docs/testing.md")]
    mod testing {}
    #[doc = include_str!("../../docs/wire-contract.md")]
    mod wire_contract {}
}
