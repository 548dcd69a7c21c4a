//! [`Replayer`]: runs a replay job to its end, batch after batch from its recorded cursor, while
//! holding the job's lock (a session advisory lock: freed the moment the process or its connection
//! dies, so a restarted run resumes at once, and two runs of one job never overlap).

use std::future::Future;
use std::time::{Duration, Instant};

use outbox_ops::replay::{self, BatchProgress, Cursor, JobState, ReplayJob};
use outbox_types::{Backoff, Publisher};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgPool};
use uuid::Uuid;

use super::send::{self, Batch};
use super::settings::{ReplayProgress, Settings};
use crate::{Error, Result};

/// The advisory lock class of replay jobs (the job's id hashed is the key).
const JOB_LOCK: i32 = 1_869_771_120;

/// Runs replay jobs recorded with [`outbox_ops::replay::create`]: sends each job's events from
/// its cursor, records its progress after every batch, and stops when the job is done, paused,
/// cancelled or failed, or when asked to.
///
/// ```no_run
/// use outbox_ops::replay::{self, NewReplayJob, ReplaySelection, ReplayTarget};
/// use outbox_relayer::{AmqpPublisher, replay::Replayer};
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let target = ReplayTarget::queue("read-model.orders");
/// let (job, _survey) = replay::create(&pool, NewReplayJob::new(ReplaySelection::all(), target).rate(2_000)).await?;
/// let publisher = AmqpPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f").build()?;
/// let report = Replayer::builder(&pool, publisher).build()?.run(job.id).await?;
/// println!("{} events sent again, job {}", report.sent, report.state);
/// # Ok(()) }
/// ```
pub struct Replayer<P> {
    connect: PgConnectOptions,
    pool: PgPool,
    publisher: P,
    settings: Settings,
}

impl<P> std::fmt::Debug for Replayer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer").field("runner", &self.settings.runner).finish_non_exhaustive()
    }
}

/// What a run of a job did, and the state it left the job in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// The job.
    pub job: Uuid,
    /// Its state at the end of the run: `Done`, `Paused` or `Cancelled` by an operator, `Failed`,
    /// or `Running` when the run was asked to stop (another run resumes it).
    pub state: JobState,
    /// Events sent and confirmed in this run.
    pub sent: u64,
    /// Rows passed over in this run because their payload was scrubbed.
    pub scrubbed: u64,
    /// Rows passed over in this run because their payload could not be opened.
    pub unopenable: u64,
}

impl<P: Publisher> Replayer<P> {
    pub(super) fn new(connect: PgConnectOptions, pool: PgPool, publisher: P, settings: Settings) -> Self {
        Self { connect, pool, publisher, settings }
    }

    /// Runs job `id` until it ends (done, paused, cancelled, failed).
    ///
    /// # Errors
    /// See [`run_until`](Self::run_until).
    pub async fn run(&self, id: Uuid) -> Result<ReplayReport> {
        self.run_until(id, std::future::pending()).await
    }

    /// Runs job `id` until it ends or `stop` completes (then after the batch in flight, recorded).
    ///
    /// # Errors
    /// [`Error::NoSuchJob`]; [`Error::JobBusy`] if another process is running it; the database's
    /// when it cannot record progress (the job resumes from its last record);
    /// [`Error::InvalidConfig`] if the job routes with the application's strategy and this runner
    /// was not given one.
    pub async fn run_until(&self, id: Uuid, stop: impl Future<Output = ()>) -> Result<ReplayReport> {
        let mut lock = self.connect.connect().await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext($2))")
            .bind(JOB_LOCK)
            .bind(id.to_string())
            .fetch_one(&mut lock)
            .await?;
        if !locked {
            let _ = lock.close().await;
            return Err(Error::JobBusy(id));
        }
        let outcome = self.run_locked(id, stop).await;
        // Closing the session frees the lock.
        let _ = lock.close().await;
        outcome
    }

    async fn run_locked(&self, id: Uuid, stop: impl Future<Output = ()>) -> Result<ReplayReport> {
        let job = replay::job(&self.pool, id).await?.ok_or(Error::NoSuchJob(id))?;
        let mut report = ReplayReport { job: id, state: job.state, sent: 0, scrubbed: 0, unopenable: 0 };
        if job.state != JobState::Running {
            return Ok(report);
        }
        let routing = send::router(&job.target, &self.settings)?;
        crate::metrics::describe();
        crate::metrics::replayed(0, 0, remaining(&job, &report));
        tracing::info!(job = %id, target = %job.target, from = ?job.cursor, "outbox.replay: running");
        tokio::pin!(stop);
        let mut cursor = job.cursor.clone();
        let mut pace = Pace::new(job.rate);
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        // A limited rate goes in about five batches a second rather than bursts of a full batch.
        let limit = match job.rate {
            Some(rate) => self.settings.batch_size.min((rate as usize / 5).max(1)),
            None => self.settings.batch_size,
        };
        loop {
            let rows = replay::next_rows(&self.pool, &job, &cursor, limit as i64).await?;
            if rows.is_empty() {
                match cursor {
                    Cursor::Unordered(_) => {
                        replay::finish(&self.pool, id).await?;
                        crate::metrics::replayed(0, 0, 0);
                        report.state = JobState::Done;
                        tracing::info!(job = %id, sent = report.sent, "outbox.replay: done");
                        return Ok(report);
                    }
                    _ => {
                        cursor = replay::unordered_start();
                        continue;
                    }
                }
            }
            let batch = Batch::new(&rows, id, &job.target, routing.as_ref(), &self.settings)?;
            tokio::select! {
                () = pace.wait(rows.len()) => {}
                () = &mut stop => return Ok(report),
            }
            let sent = batch.send(&self.publisher, self.settings.confirm_timeout).await;
            let state = self.record(&job, &mut cursor, &sent, &mut report).await?;
            if state != JobState::Running {
                tracing::info!(job = %id, %state, sent = report.sent, "outbox.replay: stopped by an operator");
                report.state = state;
                return Ok(report);
            }
            if let Some(failure) = sent.failure {
                if failure.kind.is_permanent() {
                    let reason = format!("{}: {}", failure.kind, failure.reason);
                    tracing::warn!(job = %id, %reason, "outbox.replay: the target refuses the events; job failed");
                    replay::fail(&self.pool, id, &reason).await?;
                    report.state = JobState::Failed;
                    return Ok(report);
                }
                let wait = backoff.fail();
                tracing::info!(job = %id, kind = %failure.kind, reason = %failure.reason, retry_in_ms = wait.as_millis() as u64,
                    "outbox.replay: a batch was not confirmed; sending again from the last confirmed event");
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = &mut stop => return Ok(report),
                }
            } else {
                backoff.reset();
            }
        }
    }

    /// Records what a batch did and moves the cursor; the job's state afterwards.
    async fn record(
        &self,
        job: &ReplayJob,
        cursor: &mut Cursor,
        sent: &send::Sent,
        report: &mut ReplayReport,
    ) -> Result<JobState> {
        if let Some(next) = &sent.cursor {
            *cursor = next.clone();
        }
        let progress = BatchProgress::new(cursor.clone(), sent.sent, sent.scrubbed, sent.unopenable);
        let state = replay::record_batch(&self.pool, job.id, &self.settings.runner, &progress).await?;
        report.sent += sent.sent;
        report.scrubbed += sent.scrubbed;
        report.unopenable += sent.unopenable;
        crate::metrics::replayed(sent.sent, sent.scrubbed + sent.unopenable, remaining(job, report));
        if let Some(f) = &self.settings.on_progress {
            f(ReplayProgress { sent: sent.sent, passed_over: sent.scrubbed + sent.unopenable });
        }
        Ok(state)
    }
}

/// Events the job has still to go through: what it counted when created, less what it did.
fn remaining(job: &ReplayJob, report: &ReplayReport) -> u64 {
    let done = job.sent + job.scrubbed + job.unopenable + report.sent + report.scrubbed + report.unopenable;
    job.total.saturating_sub(done)
}

/// The job's rate: a batch of `n` events waits until `n / rate` seconds after the previous batch
/// was allowed.
struct Pace {
    per_second: Option<u32>,
    next: Instant,
}

impl Pace {
    fn new(per_second: Option<u32>) -> Self {
        Self { per_second, next: Instant::now() }
    }

    async fn wait(&mut self, n: usize) {
        let Some(rate) = self.per_second else { return };
        let now = Instant::now();
        let start = self.next.max(now);
        self.next = start + Duration::from_secs_f64(n as f64 / f64::from(rate.max(1)));
        if start > now {
            tokio::time::sleep(start - now).await;
        }
    }
}
