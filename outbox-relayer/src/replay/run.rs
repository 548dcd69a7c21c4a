//! [`Replayer`]: runs a replay job to its end, batch after batch from its recorded cursor, while
//! holding the job's lock (a session advisory lock: freed the moment the process or its connection
//! dies, so a restarted run resumes at once, and two runs of one job never overlap).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_ops::replay::{self, BatchProgress, Cursor, JobState, ReplayJob};
use outbox_types::{Backoff, Publisher};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgPool};
use uuid::Uuid;

use super::send::{self, Batch, Published, Sent};
use super::settings::{ReplayProgress, Settings};
use crate::routing::RoutingStrategy;
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

    /// Runs job `id` until it ends or `stop` completes (then once the batches out are confirmed and
    /// recorded).
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
        let report = ReplayReport { job: id, state: job.state, sent: 0, scrubbed: 0, unopenable: 0 };
        if job.state != JobState::Running {
            return Ok(report);
        }
        let routing = send::router(&job.target, &self.settings)?;
        crate::metrics::describe();
        crate::metrics::replayed(0, 0, remaining(&job, &report));
        tracing::info!(job = %id, target = %job.target, from = ?job.cursor, "outbox.replay: running");
        let mut run = Run::new(self, job, routing, report);
        tokio::pin!(stop);
        loop {
            if let Some(state) = run.step(&mut stop).await? {
                run.report.state = state;
                return Ok(run.report);
            }
        }
    }
}

/// Batches of a run published before the oldest one's confirms are in: the next batch is read and
/// sent while the broker confirms the one before (as the relay keeps its confirm window full).
const IN_FLIGHT: usize = 2;

/// One run of a job: what it has read, what is out with the broker, what it has recorded.
struct Run<'r, P> {
    replayer: &'r Replayer<P>,
    job: ReplayJob,
    routing: Arc<dyn RoutingStrategy>,
    /// After the last row read (ahead of what is confirmed while batches are out).
    read: Cursor,
    /// Every row the job selects has been read.
    exhausted: bool,
    /// After the last row confirmed and recorded.
    confirmed: Cursor,
    in_flight: VecDeque<Published>,
    report: ReplayReport,
    pace: Pace,
    backoff: Backoff,
    /// Rows per batch: a limited rate goes in about ten batches a second rather than in bursts.
    limit: usize,
}

impl<'r, P: Publisher> Run<'r, P> {
    fn new(replayer: &'r Replayer<P>, job: ReplayJob, routing: Arc<dyn RoutingStrategy>, report: ReplayReport) -> Self {
        let batch_size = replayer.settings.batch_size;
        let limit = job.rate.map_or(batch_size, |rate| batch_size.min((rate as usize / 10).max(1)));
        Self {
            replayer,
            read: job.cursor.clone(),
            confirmed: job.cursor.clone(),
            exhausted: false,
            in_flight: VecDeque::new(),
            pace: Pace::new(job.rate),
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
            limit,
            job,
            routing,
            report,
        }
    }

    /// Sends the next batch if there is room, else settles the oldest one out; the state the run
    /// ends in, if it ends.
    async fn step(&mut self, stop: &mut Pin<&mut impl Future<Output = ()>>) -> Result<Option<JobState>> {
        if self.in_flight.len() < IN_FLIGHT && !self.exhausted {
            return self.send_next(stop).await;
        }
        let Some(published) = self.in_flight.pop_front() else {
            replay::finish(&self.replayer.pool, self.job.id).await?;
            crate::metrics::replayed(0, 0, 0);
            tracing::info!(job = %self.job.id, sent = self.report.sent, "outbox.replay: done");
            return Ok(Some(JobState::Done));
        };
        let sent = published.settle(self.replayer.settings.confirm_timeout).await;
        self.settled(sent, stop).await
    }

    /// Reads the rows after the read cursor and publishes them, at the job's pace; at the end of
    /// the entities' part, moves on to the events of no entity.
    async fn send_next(&mut self, stop: &mut Pin<&mut impl Future<Output = ()>>) -> Result<Option<JobState>> {
        let mut tx = self.replayer.pool.begin().await?;
        let rows = replay::next_rows(&mut tx, &self.job, &self.read, self.limit as i64).await?;
        tx.commit().await?;
        if rows.is_empty() {
            match self.read {
                Cursor::Unordered(_) => self.exhausted = true,
                _ => self.read = replay::unordered_start(),
            }
            return Ok(None);
        }
        let batch = Batch::new(&rows, self.job.id, &self.job.target, self.routing.as_ref(), &self.replayer.settings)?;
        tokio::select! {
            () = self.pace.wait(rows.len()) => {}
            () = stop.as_mut() => return self.wind_down().await,
        }
        self.read = batch.last().cloned().unwrap_or_else(|| self.read.clone());
        self.in_flight.push_back(batch.publish(&self.replayer.publisher).await);
        Ok(None)
    }

    /// Records a settled batch; after a failure, drops what is out (it may arrive twice) and reads
    /// again from the last confirmed row, after a back-off, or fails the job if the target refuses.
    async fn settled(&mut self, sent: Sent, stop: &mut Pin<&mut impl Future<Output = ()>>) -> Result<Option<JobState>> {
        let state = self.record(&sent).await?;
        if state != JobState::Running {
            tracing::info!(job = %self.job.id, %state, sent = self.report.sent, "outbox.replay: stopped by an operator");
            return Ok(Some(state));
        }
        let Some(failure) = sent.failure else {
            self.backoff.reset();
            return Ok(None);
        };
        self.in_flight.clear();
        self.read = self.confirmed.clone();
        self.exhausted = false;
        let id = self.job.id;
        if failure.kind.is_permanent() {
            let reason = format!("{}: {}", failure.kind, failure.reason);
            tracing::warn!(job = %id, %reason, "outbox.replay: the target refuses the events; job failed");
            replay::fail(&self.replayer.pool, id, &reason).await?;
            return Ok(Some(JobState::Failed));
        }
        let wait = self.backoff.fail();
        tracing::info!(job = %id, kind = %failure.kind, reason = %failure.reason, retry_in_ms = wait.as_millis() as u64,
            "outbox.replay: a batch was not confirmed; sending again from the last confirmed event");
        tokio::select! {
            () = tokio::time::sleep(wait) => Ok(None),
            () = stop.as_mut() => Ok(Some(JobState::Running)),
        }
    }

    /// Asked to stop: the batches out are settled and recorded (so that a resumed run does not send
    /// them again), and the job stays running for a resume.
    async fn wind_down(&mut self) -> Result<Option<JobState>> {
        while let Some(published) = self.in_flight.pop_front() {
            let sent = published.settle(self.replayer.settings.confirm_timeout).await;
            let failed = sent.failure.is_some();
            let state = self.record(&sent).await?;
            if failed || state != JobState::Running {
                return Ok(Some(state));
            }
        }
        Ok(Some(JobState::Running))
    }

    /// Records what a batch did and moves the confirmed cursor; the job's state afterwards.
    async fn record(&mut self, sent: &Sent) -> Result<JobState> {
        if let Some(next) = &sent.cursor {
            self.confirmed = next.clone();
        }
        let progress = BatchProgress::new(self.confirmed.clone(), sent.sent, sent.scrubbed, sent.unopenable);
        let replayer = self.replayer;
        let state = replay::record_batch(&replayer.pool, self.job.id, &replayer.settings.runner, &progress).await?;
        let report = &mut self.report;
        report.sent += sent.sent;
        report.scrubbed += sent.scrubbed;
        report.unopenable += sent.unopenable;
        crate::metrics::replayed(sent.sent, sent.scrubbed + sent.unopenable, remaining(&self.job, report));
        if let Some(f) = &replayer.settings.on_progress {
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
