//! The AMQP consumer loop around an [`InboxService`](crate::InboxService): prefetch, bounded
//! concurrency, ack after commit only, backoff on transient failures, dead-lettering,
//! reconnection, graceful shutdown.
//!
//! - `builder`: the settings and their defaults;
//! - `settings`: the settings the builder makes, and the crash points of failure tests;
//! - `shared`: the state the runner's tasks share, which every step below takes as an argument;
//! - `run`: the runner: sessions one after another, until shut down;
//! - `handle`: a running runner, its counts and its shutdown;
//! - `session`: one connection's life, from subscribing to closing;
//! - `schedule`: which deliveries make the next batch (an entity in hand waits);
//! - `batch`: what happens to the deliveries taken together (decode, apply, ack or dead-letter);
//! - `gauges` and `retention`: the background tasks beside the sessions.

mod batch;
mod builder;
mod gauges;
mod handle;
mod retention;
mod run;
mod schedule;
mod session;
mod settings;
mod shared;

pub use builder::InboxRunnerBuilder;
pub use handle::{RunnerHandle, RunnerHealth, RunnerProbe, RunnerStats};
pub use run::InboxRunner;
#[cfg(feature = "fail-points")]
pub use settings::CrashPoint;
