//! Test support for outbox users and for the product's own tests: isolated environments on the
//! real PostgreSQL and RabbitMQ.
//!
//! - [`TestDb`]: a fresh database per test, with the outbox and inbox migrations applied, dropped
//!   afterwards (also when the test panics).
//! - [`TestBroker`]: exchange and queue names with a random suffix, deleted afterwards.
//! - [`ChaosProxy`]: a loopback TCP proxy that cuts, refuses, stalls or slows connections.
//! - [`FaultyPublisher`]: fails, nacks, returns, delays or loses the confirms of chosen publishes.
//! - [`Recorder`]: records every delivery of a queue; checks ids, duplicates and per-entity order.
//!
//! The servers are found through `OUTBOX_TEST_DATABASE_URL` (or `DATABASE_URL`) and
//! `OUTBOX_TEST_AMQP_URL` (or `AMQP_URL`); the defaults are the local servers
//! `postgres://postgres@127.0.0.1:5432/test` and `amqp://guest:guest@127.0.0.1:5672/%2f`.
//!
//! ```no_run
//! use outbox_testkit::TestDb;
//!
//! # async fn demo() -> Result<(), outbox_testkit::Error> {
//! let db = TestDb::new().await?; // own database, migrations applied
//! let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
//!     .fetch_one(db.pool())
//!     .await?;
//! assert_eq!(pending, 0);
//! db.close().await?; // or let it drop
//! # Ok(()) }
//! ```

mod broker;
mod db;
mod error;
mod faulty;
mod proxy;
mod reconcile;
mod recorder;

pub use broker::{TestBroker, amqp_url, close_connections_named};
pub use db::TestDb;
pub use error::{Error, Result};
pub use faulty::{Fault, FaultyPublisher};
pub use proxy::{ChaosProxy, Mode};
pub use reconcile::{
    BrokerFindings, Change, EventRef, InboxFindings, InboxRow, OrderViolation, OutboxRow, Reconciliation,
    ReconciliationReport, Snapshot, compare,
};
pub use recorder::{Record, Recorder};

/// A random lowercase suffix for names of test resources.
pub fn unique_suffix() -> String {
    use rand::Rng;
    let n: u64 = rand::rng().random();
    format!("{n:016x}")
}

/// Waits until `check` returns `Some`, polling every 20 ms, or fails after `deadline`.
///
/// # Errors
/// [`Error::Timeout`] naming `what` if the deadline passes first.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: std::time::Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= until {
            return Err(Error::Timeout { what: what.to_owned(), after: deadline });
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
