//! Replay: published events sent again, to a consumer that joined late, lost its database or had
//! a bug, as recorded jobs (`outbox_replay_jobs`). This module is the jobs' record and what they
//! select; the relay's crate sends them (`outbox_relayer::replay`), the `outbox replay` command
//! drives both.
//!
//! A job selects published events ([`ReplaySelection`]: entities, types, a time range, ids) among
//! the rows that existed when it was created, and sends them to a [`ReplayTarget`] in its order:
//! each entity's events in sequence order, then the events of no entity. Its [`Cursor`] is the
//! last event sent and confirmed, recorded after every batch, so a job survives the process that
//! runs it. What it cannot send is said in its [`Survey`]: events not published, payloads
//! scrubbed, entities whose first events retention deleted.
//!
//! ```no_run
//! use outbox_ops::replay::{self, NewReplayJob, ReplaySelection, ReplayTarget};
//!
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_ops::Error> {
//! let selection = ReplaySelection::all().event_type("order.*");
//! let (job, survey) = replay::create(&pool, NewReplayJob::new(selection, ReplayTarget::queue("read-model"))).await?;
//! println!("job {} will send {} events; {} cannot be sent", job.id, survey.total, survey.scrubbed);
//! # Ok(()) }
//! ```

mod job;
mod rows;
mod selection;
mod survey;
mod target;

pub use job::{
    BatchProgress, Cursor, JobState, NewReplayJob, ReplayJob, cancel, create, fail, finish, job, jobs, pause,
    record_batch, resume,
};
pub use rows::{next_rows, unordered_start};
pub use selection::ReplaySelection;
pub use survey::{Survey, survey};
pub use target::{ReplayRouting, ReplayTarget};
