//! Phases 2 to 5 as the benchmark drives them: the consumer process applies the queue's events,
//! then drops the replayed ones as duplicates, each phase verified, and its peak RSS is read.

use std::time::Duration;

use outbox_inbox::RunnerStats;
use outbox_testkit::TestDb;
use outbox_types::wire::WireMessage;
use tokio::time::Instant;

use super::fill::fill;
use super::plan::Plan;
use super::settings::{APPLICATION_NAME, CONSUMER};
use super::shipments::Handler;
use super::stats::{CONSUMING, STATS, format_stats, handled, parse_stats};
use super::target::{REPLAY_KEY, Target};
use super::verify::{check_stats, verify};
use crate::cpu::{Meter, Spent};
use crate::error::BoxError;
use crate::figure::comment;
use crate::process::Subprocess;
use crate::wait::{Progress, until};

/// How often the benchmark asks the consumer process how far it got.
pub(super) const POLL: Duration = Duration::from_millis(5);

/// What the consumer process measured.
#[derive(Debug)]
pub(super) struct Measured {
    /// Until every event was applied.
    pub(super) inbox: Duration,
    /// Until every duplicate was dropped.
    pub(super) duplicates: Duration,
    /// Peak RSS of the process, kB.
    pub(super) peak_kib: u64,
    /// CPU spent while applying, and while dropping the duplicates.
    pub(super) cpu: Spent,
    pub(super) duplicates_cpu: Spent,
}

/// Starts the consumer process on the filled queue, times its applying every event, then has it
/// consume `replayed` again from the second queue and times its dropping them; verifies both
/// phases and reads the process's peak RSS before it shuts down.
pub(super) async fn inbox(
    db: &TestDb,
    target: Target<'_>,
    plan: Plan,
    replayed: &[WireMessage],
) -> Result<Measured, BoxError> {
    let pool = db.pool();
    let mut process = spawn_consumer(&db.url(), target.url, target.queue).await?;
    let meter = Meter::new(process.child.id().ok_or("the consumer process has ended")?, APPLICATION_NAME);
    let outcome = async {
        let before = meter.sample(pool).await?;
        let start = Instant::now();
        let (inbox, stats) = await_handled(&mut process, plan.events, start, plan.limit).await?;
        let cpu = before.spent_until(&meter.sample(pool).await?);
        comment(format_args!("inbox: {stats:?} after {:.3} s", inbox.as_secs_f64()));
        check_stats(&stats, plan.events, 0)?;
        verify(pool, plan).await?;

        fill(target, "duplicates", REPLAY_KEY, replayed).await?;
        let before = meter.sample(pool).await?;
        let start = Instant::now();
        let answer = process.request(&format!("consume {}", target.replay)).await?;
        if answer != CONSUMING {
            return Err(format!("the consumer process did not start consuming the duplicates: {answer:?}").into());
        }
        let expected = plan.events + plan.duplicates;
        let (duplicates, stats) = await_handled(&mut process, expected, start, plan.limit).await?;
        let duplicates_cpu = before.spent_until(&meter.sample(pool).await?);
        comment(format_args!("duplicates: {stats:?} after {:.3} s", duplicates.as_secs_f64()));
        check_stats(&stats, plan.events, plan.duplicates)?;
        verify(pool, plan).await?;

        // Read the peak before the shutdown, which allocates nothing worth measuring.
        let (peak_kib, now_kib) = process.memory().await?;
        comment(format_args!("consumer process memory after both phases: VmHWM {peak_kib} kB, VmRSS {now_kib} kB"));
        Ok::<_, BoxError>(Measured { inbox, duplicates, peak_kib, cpu, duplicates_cpu })
    }
    .await;
    let stopped = process.stop().await;
    let measured = outcome?;
    stopped?;
    Ok(measured)
}

/// Polls the consumer process until it has handled `expected` deliveries in all (applied,
/// duplicate, stale, parked or dead-lettered), or fails `limit` after `start` with the counts it
/// last reported. Fails at once if the process ends.
pub(super) async fn await_handled(
    process: &mut Subprocess,
    expected: u64,
    start: Instant,
    limit: Duration,
) -> Result<(Duration, RunnerStats), BoxError> {
    let what = format!("the consumer process to handle {expected} deliveries");
    until(what, limit.saturating_sub(start.elapsed()), POLL, async || {
        let stats = stats(process).await?;
        if handled(&stats) >= expected {
            return Ok(Progress::Done((start.elapsed(), stats)));
        }
        process.check_alive()?;
        Ok(Progress::Waiting(format!("{} handled ({})", handled(&stats), format_stats(&stats))))
    })
    .await
}

/// Starts the consumer process on `queue` of the broker at `amqp_url`, applying events in the
/// database at `database_url` as the inbox consumer [`CONSUMER`].
pub(crate) async fn spawn_consumer(database_url: &str, amqp_url: &str, queue: &str) -> Result<Subprocess, BoxError> {
    spawn_consumer_with(database_url, amqp_url, queue, Handler::Shipments).await
}

/// [`spawn_consumer`] with the business write of `handler`.
pub(crate) async fn spawn_consumer_with(
    database_url: &str,
    amqp_url: &str,
    queue: &str,
    handler: Handler,
) -> Result<Subprocess, BoxError> {
    let args = ["consumer-process", "--queue", queue, "--consumer", CONSUMER, "--handler", handler.arg()];
    Subprocess::spawn("the consumer process", &args, database_url, amqp_url).await
}

/// The consumer process's counts now, summed over its runners.
pub(crate) async fn stats(process: &mut Subprocess) -> Result<RunnerStats, BoxError> {
    Ok(parse_stats(&process.request(STATS).await?)?)
}
