//! The relay: publishes committed outbox rows to the broker, in per-entity order, crash-safe, with
//! any number of instances on one database. See `docs/architecture.md` for how claiming, ordering
//! and recovery work.
//!
//! One concern per file. Building and running a relay:
//! - `builder.rs`: [`RelayBuilder`], every setting with its default, and the relay's own
//!   connections;
//! - `settings.rs`: the settings the builder makes, and the crash points of failure tests;
//! - `shared.rs`: the state the relay's tasks share, which every step below takes as an argument;
//! - `run.rs`: the [`Relay`]: starts the claim loop and the background tasks, winds them down, and
//!   [`Relay::run_batch`];
//! - `handle.rs`: [`RelayHandle`], the handle of a spawned relay;
//! - `health.rs`: [`Health`], what the claim loop tells liveness and readiness probes.
//!
//! A batch, in the order it flows through the steps (each uses only the steps after it):
//! - `claim_loop.rs`: when to claim, the batches in flight against the confirm window, the
//!   back-offs after a failing database or broker;
//! - `claim.rs`: one claim, with the corrupt rows it found set aside;
//! - `low_water.rs`: where the claim's scan starts, and the task that moves it;
//! - `deliver.rs`: one batch's delivery: publishing it run by run and awaiting its confirms, then
//!   its outcomes decided, counted and recorded;
//! - `outcome.rs`: what each row's outcome means for the row, pure decisions over what became of
//!   the batch's messages and the retry policy; [`BatchReport`];
//! - `record.rs`: recording the outcomes, fenced by the claim token, through database blips.
//!
//! Beside them:
//! - `presence.rs`: whether commits notify this relay: a session of its own that holds a lock while
//!   the relay waits;
//! - `tasks.rs`: the background tasks: LISTEN, housekeeping, vacuum, gauges, retention, the summary
//!   line;
//! - `summary.rs`: what the relay did since its last summary line.

mod builder;
mod claim;
mod claim_loop;
mod deliver;
mod handle;
mod health;
mod low_water;
mod outcome;
mod presence;
mod record;
mod run;
mod settings;
mod shared;
mod summary;
mod tasks;

pub use builder::{IntoConnectOptions, RelayBuilder};
pub use handle::{RelayHandle, RelayProbe};
pub use health::Health;
pub use outcome::BatchReport;
pub use run::Relay;
#[cfg(feature = "fail-points")]
pub use settings::CrashPoint;
