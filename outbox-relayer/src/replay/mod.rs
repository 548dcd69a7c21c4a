//! Replay: published events sent again, by jobs recorded in `outbox_replay_jobs`
//! ([`outbox_ops::replay`] creates, lists, pauses, resumes and cancels them). A [`Replayer`] runs
//! one: each entity's events in sequence order, then the events of no entity, with the same event
//! ids, sequences, headers and payloads as their first delivery (sealed ones opened with the
//! keyring, or forwarded end to end), plus the header `x-outbox-replay` with the job's id.
//!
//! Safe by the inbox's rules: a consumer that applied an event drops the replayed copy as a
//! duplicate, and one that runs ahead parks its live events until the replayed ones before them
//! arrive. One file each:
//! - `builder.rs`: [`ReplayerBuilder`], every setting with its default;
//! - `settings.rs`: the settings it makes, and [`ReplayProgress`];
//! - `run.rs`: [`Replayer`], a job run to its end under the job's lock, its rate and its
//!   progress record;
//! - `send.rs`: one batch: rows into messages (or passed over, with the reason), published on one
//!   confirm channel, and how far it was confirmed.

mod builder;
mod run;
mod send;
mod settings;

pub use builder::ReplayerBuilder;
pub use run::{ReplayReport, Replayer};
pub use settings::{DEFAULT_BATCH_SIZE, ReplayProgress};
