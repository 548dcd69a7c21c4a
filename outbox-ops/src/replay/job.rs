//! A replay job's record in `outbox_replay_jobs`: created with what it selects and where it sends,
//! then advanced batch by batch by the process running it, paused, resumed or cancelled by an
//! operator. The state changes are conditional on the state they leave, so two operators (or an
//! operator and the runner) cannot undo each other's change unseen.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::selection::ReplaySelection;
use super::survey::{self, Survey};
use super::target::ReplayTarget;
use crate::{Error, Result};

/// Where a replay job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// To be sent: a process is sending it, or will when one runs it (`outbox replay resume`).
    Running,
    /// Stopped by an operator; resumes where it stopped.
    Paused,
    /// Stopped by an operator for good.
    Cancelled,
    /// Stopped by a failure that retrying cannot mend (the target refuses the events); resumes
    /// once the cause is repaired.
    Failed,
    /// Every selected event was sent.
    Done,
}

impl JobState {
    /// The name stored and shown (`running`, `paused`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::Done => "done",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "running" => Self::Running,
            "paused" => Self::Paused,
            "cancelled" => Self::Cancelled,
            "failed" => Self::Failed,
            "done" => Self::Done,
            other => return Err(Error::Corrupt(format!("replay job state {other:?}"))),
        })
    }

    /// Whether the job will send nothing more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Cancelled | Self::Done)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How far a job got: the last event sent and confirmed, in the job's order (an entity's events
/// by sequence, entities by key, then the events of no entity by id).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cursor {
    /// Nothing sent yet.
    Start,
    /// Up to this entity's event `seq`.
    Entity {
        /// The entity key.
        key: String,
        /// Its sequence.
        seq: i64,
    },
    /// Every event of an entity, and the events of no entity up to this id (the nil id: none yet).
    Unordered(Uuid),
}

/// A replay job as recorded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReplayJob {
    /// The job's id, also in the header `x-outbox-replay` of every event it sends.
    pub id: Uuid,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Who asked for it.
    pub created_by: String,
    /// What it sends.
    pub selection: ReplaySelection,
    /// Where it sends.
    pub target: ReplayTarget,
    /// Events per second at most (none: as fast as the broker confirms).
    pub rate: Option<u32>,
    /// Rows positioned after this are live traffic, not part of the job.
    pub up_to_position: i64,
    /// Its state.
    pub state: JobState,
    /// How far it got.
    pub cursor: Cursor,
    /// Events selected when it was created.
    pub total: u64,
    /// Events sent and confirmed.
    pub sent: u64,
    /// Events met while sending whose payload had been scrubbed since.
    pub scrubbed: u64,
    /// Events met while sending that are sealed with a key the runner did not have.
    pub unopenable: u64,
    /// The process that ran it last.
    pub runner: Option<String>,
    /// When it last recorded progress.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// When it ended (done, cancelled or failed).
    pub finished_at: Option<DateTime<Utc>>,
    /// Why a failed job stopped.
    pub last_error: Option<String>,
}

/// What a new job is: its selection, target, rate and author.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NewReplayJob {
    /// What it sends.
    pub selection: ReplaySelection,
    /// Where it sends.
    pub target: ReplayTarget,
    /// Events per second at most.
    pub rate: Option<u32>,
    /// Who asks (none: the database role).
    pub created_by: Option<String>,
}

impl NewReplayJob {
    /// A job sending `selection` to `target`, unlimited in rate, by the database role.
    pub fn new(selection: ReplaySelection, target: ReplayTarget) -> Self {
        Self { selection, target, rate: None, created_by: None }
    }

    /// At most `per_second` events per second.
    #[must_use]
    pub fn rate(mut self, per_second: u32) -> Self {
        self.rate = Some(per_second);
        self
    }

    /// Records `who` as the job's author.
    #[must_use]
    pub fn created_by(mut self, who: impl Into<String>) -> Self {
        self.created_by = Some(who.into());
        self
    }
}

#[derive(sqlx::FromRow)]
struct JobRow {
    id: Uuid,
    created_at: DateTime<Utc>,
    created_by: String,
    selection: serde_json::Value,
    target: serde_json::Value,
    rate: Option<i32>,
    up_to_position: i64,
    state: String,
    cursor_entity: Option<String>,
    cursor_seq: Option<i64>,
    cursor_id: Option<Uuid>,
    total: i64,
    sent: i64,
    scrubbed: i64,
    unopenable: i64,
    runner: Option<String>,
    heartbeat_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    last_error: Option<String>,
}

const COLUMNS: &str = "id, created_at, created_by, selection, target, rate, up_to_position, state, cursor_entity, \
     cursor_seq, cursor_id, total, sent, scrubbed, unopenable, runner, heartbeat_at, finished_at, last_error";

impl TryFrom<JobRow> for ReplayJob {
    type Error = Error;

    fn try_from(r: JobRow) -> Result<Self> {
        let corrupt = |what: &str| Error::Corrupt(format!("replay job {}: {what}", r.id));
        let cursor = match (r.cursor_id, r.cursor_entity.clone(), r.cursor_seq) {
            (Some(id), _, _) => Cursor::Unordered(id),
            (None, Some(key), Some(seq)) => Cursor::Entity { key, seq },
            (None, None, None) => Cursor::Start,
            _ => return Err(corrupt("an entity cursor without its sequence")),
        };
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(Self {
            id: r.id,
            created_at: r.created_at,
            selection: serde_json::from_value(r.selection.clone())
                .map_err(|_| corrupt("its selection does not read"))?,
            target: serde_json::from_value(r.target.clone()).map_err(|_| corrupt("its target does not read"))?,
            rate: r.rate.and_then(|n| u32::try_from(n).ok()),
            up_to_position: r.up_to_position,
            state: JobState::parse(&r.state)?,
            cursor,
            total: count(r.total),
            sent: count(r.sent),
            scrubbed: count(r.scrubbed),
            unopenable: count(r.unopenable),
            created_by: r.created_by,
            runner: r.runner,
            heartbeat_at: r.heartbeat_at,
            finished_at: r.finished_at,
            last_error: r.last_error,
        })
    }
}

/// Records a new job, in state `running`, with what its selection holds now (the returned
/// survey: counts, and what cannot be replayed). Rows positioned after this moment are not part
/// of it.
///
/// # Errors
/// The database's.
pub async fn create(pool: &PgPool, job: NewReplayJob) -> Result<(ReplayJob, Survey)> {
    let up_to = survey::last_position(pool).await?;
    let found = survey::survey_up_to(pool, &job.selection, up_to).await?;
    let sql = format!(
        "INSERT INTO outbox_replay_jobs (id, created_by, selection, target, rate, up_to_position, total) \
         VALUES ($1, coalesce($2, current_user), $3, $4, $5, $6, $7) RETURNING {COLUMNS}"
    );
    let to_json = |v: serde_json::Result<serde_json::Value>| v.map_err(|e| Error::Corrupt(e.to_string()));
    let row: JobRow = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(Uuid::now_v7())
        .bind(job.created_by)
        .bind(to_json(serde_json::to_value(&job.selection))?)
        .bind(to_json(serde_json::to_value(&job.target))?)
        .bind(job.rate.map(|r| i32::try_from(r).unwrap_or(i32::MAX)))
        .bind(up_to)
        .bind(i64::try_from(found.total).unwrap_or(i64::MAX))
        .fetch_one(pool)
        .await?;
    Ok((row.try_into()?, found))
}

/// The job `id`, if there is one.
///
/// # Errors
/// The database's; [`Error::Corrupt`] if its record does not read.
pub async fn job(executor: impl PgExecutor<'_>, id: Uuid) -> Result<Option<ReplayJob>> {
    let sql = format!("SELECT {COLUMNS} FROM outbox_replay_jobs WHERE id = $1");
    let row: Option<JobRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(executor).await?;
    row.map(ReplayJob::try_from).transpose()
}

/// The latest `limit` jobs, newest first; with `unfinished`, only those not done or cancelled.
///
/// # Errors
/// The database's; [`Error::Corrupt`] if a record does not read.
pub async fn jobs(pool: &PgPool, unfinished: bool, limit: i64) -> Result<Vec<ReplayJob>> {
    let filter = if unfinished { "WHERE state NOT IN ('done', 'cancelled')" } else { "" };
    let sql = format!("SELECT {COLUMNS} FROM outbox_replay_jobs {filter} ORDER BY created_at DESC, id DESC LIMIT $1");
    let rows: Vec<JobRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(limit).fetch_all(pool).await?;
    rows.into_iter().map(ReplayJob::try_from).collect()
}

/// Moves job `id` to `to` if it is in one of `from`; returns the job as it is afterwards (moved or
/// not), or none if there is no such job.
async fn transition(pool: &PgPool, id: Uuid, from: &[&str], to: JobState) -> Result<Option<(ReplayJob, bool)>> {
    let finished = if to.is_final() { "now()" } else { "NULL" };
    let sql = format!(
        "UPDATE outbox_replay_jobs SET state = $2, finished_at = {finished}, \
         last_error = CASE WHEN $2 = 'running' THEN NULL ELSE last_error END \
         WHERE id = $1 AND state = ANY($3) RETURNING {COLUMNS}"
    );
    let from: Vec<String> = from.iter().map(|s| (*s).to_owned()).collect();
    let moved: Option<JobRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).bind(to.as_str()).bind(from).fetch_optional(pool).await?;
    match moved {
        Some(row) => Ok(Some((row.try_into()?, true))),
        None => Ok(job(pool, id).await?.map(|j| (j, false))),
    }
}

/// Pauses a running job: the process sending it stops once its batches out are confirmed (it records
/// how far it got). Returns the job, and whether it was running.
///
/// # Errors
/// The database's.
pub async fn pause(pool: &PgPool, id: Uuid) -> Result<Option<(ReplayJob, bool)>> {
    transition(pool, id, &["running"], JobState::Paused).await
}

/// Makes a paused or failed job running again (a process must then run it). Returns the job, and
/// whether it moved.
///
/// # Errors
/// The database's.
pub async fn resume(pool: &PgPool, id: Uuid) -> Result<Option<(ReplayJob, bool)>> {
    transition(pool, id, &["paused", "failed"], JobState::Running).await
}

/// Cancels a job that is not done: nothing more of it is sent. Returns the job, and whether it
/// moved.
///
/// # Errors
/// The database's.
pub async fn cancel(pool: &PgPool, id: Uuid) -> Result<Option<(ReplayJob, bool)>> {
    transition(pool, id, &["running", "paused", "failed"], JobState::Cancelled).await
}

/// What one batch of a job did, for [`record_batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchProgress {
    /// The cursor after the batch.
    pub cursor: Cursor,
    /// Events sent and confirmed.
    pub sent: u64,
    /// Rows passed over because their payload was scrubbed.
    pub scrubbed: u64,
    /// Rows passed over because their payload is sealed with a key the runner lacks.
    pub unopenable: u64,
}

impl BatchProgress {
    /// A batch that moved the cursor to `cursor`, having sent `sent` events and passed over
    /// `scrubbed` and `unopenable` rows.
    pub fn new(cursor: Cursor, sent: u64, scrubbed: u64, unopenable: u64) -> Self {
        Self { cursor, sent, scrubbed, unopenable }
    }
}

/// Records a batch's progress by `runner`, while the job is running; returns the job's state
/// afterwards (an operator may have paused or cancelled it meanwhile: then nothing is recorded
/// but the heartbeat, and the runner stops).
///
/// # Errors
/// The database's; [`Error::Corrupt`] if the job is gone.
pub async fn record_batch(pool: &PgPool, id: Uuid, runner: &str, batch: &BatchProgress) -> Result<JobState> {
    let (entity, seq, unordered) = match &batch.cursor {
        Cursor::Start => (None, None, None),
        Cursor::Entity { key, seq } => (Some(key.as_str()), Some(*seq), None),
        Cursor::Unordered(id) => (None, None, Some(*id)),
    };
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let state: Option<String> = sqlx::query_scalar(
        "UPDATE outbox_replay_jobs SET runner = $2, heartbeat_at = now(), \
           cursor_entity = CASE WHEN state = 'running' THEN $3 ELSE cursor_entity END, \
           cursor_seq = CASE WHEN state = 'running' THEN $4 ELSE cursor_seq END, \
           cursor_id = CASE WHEN state = 'running' THEN $5 ELSE cursor_id END, \
           sent = sent + CASE WHEN state = 'running' THEN $6 ELSE 0 END, \
           scrubbed = scrubbed + CASE WHEN state = 'running' THEN $7 ELSE 0 END, \
           unopenable = unopenable + CASE WHEN state = 'running' THEN $8 ELSE 0 END \
         WHERE id = $1 RETURNING state",
    )
    .bind(id)
    .bind(runner)
    .bind(entity)
    .bind(seq)
    .bind(unordered)
    .bind(n(batch.sent))
    .bind(n(batch.scrubbed))
    .bind(n(batch.unopenable))
    .fetch_optional(pool)
    .await?;
    JobState::parse(&state.ok_or_else(|| Error::Corrupt(format!("replay job {id} is gone")))?)
}

/// Marks a running job done (every selected event sent).
///
/// # Errors
/// The database's.
pub async fn finish(pool: &PgPool, id: Uuid) -> Result<()> {
    sqlx::query(
        "UPDATE outbox_replay_jobs SET state = 'done', finished_at = now() WHERE id = $1 AND state = 'running'",
    )
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Marks a running job failed with `reason` (a failure kind and its reason; never a payload).
///
/// # Errors
/// The database's.
pub async fn fail(pool: &PgPool, id: Uuid, reason: &str) -> Result<()> {
    sqlx::query(
        "UPDATE outbox_replay_jobs SET state = 'failed', last_error = $2, finished_at = now() \
         WHERE id = $1 AND state = 'running'",
    )
    .bind(id)
    .bind(reason)
    .execute(pool)
    .await?;
    Ok(())
}
