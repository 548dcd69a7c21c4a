//! Part 2, the relay at a steady load: writers offering [`PER_TRANSACTION`] events per transaction at half the
//! relay's free drain rate, over 1,000 entities, to a relay in-process with default settings, once
//! free and once with a snapshot held from the start of the run. Every [`POLL`] the backlog is read
//! without touching the database: the events the writers committed (counted as each `COMMIT`
//! returns) minus those the relay recorded as published (its `outbox_published_total`, read from
//! the benchmark's own metrics recorder). Every [`SAMPLE`] a `#` line gives the offered rate, the
//! backlog (its highest since the last line), the relay's commit-to-confirm time
//! (`outbox_commit_to_confirm_seconds`) and claim statement time of those seconds, and the steal.
//! A consumer on the queue takes every message, so the queue stays short.

use std::time::Duration;

use outbox_testkit::TestDb;
use tokio::time::Instant;

use super::hold::{Snapshot, in_fresh_db};
use super::interval::Interval;
use super::plan::Plan;
use super::writers::{Load, Writers};
use crate::counters;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::relay::{Arrivals, InProcess, RELAY_STAGES, Target, percentile};
use crate::steal::Steal;

/// How often the backlog is read.
const POLL: Duration = Duration::from_millis(100);
/// How often a `#` line is printed.
const SAMPLE: Duration = Duration::from_secs(5);
/// The relay's count of events recorded as published.
const PUBLISHED: &str = "outbox_published_total";
/// Events per second each writer offers at most: writers are added above it (4 to 16).
const PER_WRITER: f64 = 1_500.0;
/// Events per writer transaction, each to an entity of its own. The writers share this 2-core host
/// with the relay, PostgreSQL and the broker: at one event per transaction it commits only about
/// 2,800 events/s beside the relay, and at four per transaction (12 writers) half the free drain
/// rate took both cores and the relay fell behind without any snapshot held.
const PER_TRANSACTION: u64 = 16;

/// What one steady run measured.
#[derive(Debug, Default)]
struct Steady {
    /// Events committed per second over the run.
    offered: f64,
    /// The highest backlog read.
    backlog_max: u64,
    /// Commit-to-confirm time of every event confirmed during the run, in ms, sorted.
    latencies: Vec<f64>,
}

/// Runs the part at half of `drain_free` events per second and prints its figures.
pub(super) async fn steady(target: Target<'_>, plan: Plan, drain_free: f64) -> Result<(), BoxError> {
    let rate = drain_free / 2.0;
    let writers = ((rate / PER_WRITER).ceil() as u64).clamp(4, 16);
    comment(format_args!(
        "steady: {rate:.1} events/s offered (half the free drain) by {writers} writers over {} entities, {PER_TRANSACTION} events \
         per transaction, for {:?}; relay in-process with default settings",
        plan.steady_entities, plan.steady
    ));
    let load = Load {
        writers,
        entities: plan.steady_entities,
        rate: Some(rate),
        per_transaction: PER_TRANSACTION,
        length: plan.steady,
    };
    let mut runs = Vec::with_capacity(2);
    for snapshot in Snapshot::BOTH {
        let label = format!("steady {}", snapshot.name());
        let measured = in_fresh_db(snapshot, &label, async |db| run(db, target, load, &label).await).await?;
        runs.push(measured);
    }
    print(rate, &runs[0], &runs[1]);
    Ok(())
}

/// The part's figures from the free and the held run, at the `target` rate. The backlog's seconds
/// are counted at the rate the held run's writers reached (below the target when the host cannot
/// commit that many transactions).
fn print(target: f64, free: &Steady, held: &Steady) {
    for run in [free, held] {
        if run.offered < 0.9 * target {
            comment(format_args!(
                "steady: the writers committed {:.1} events/s of the {target:.1} offered: this host cannot commit more \
                 events beside the relay",
                run.offered
            ));
        }
    }
    figure("snapshot_steady_target", Value::Rate(target), "events/s");
    figure("snapshot_steady_offered", Value::Rate(free.offered), "events/s");
    figure("snapshot_steady_offered_held", Value::Rate(held.offered), "events/s");
    figure("snapshot_steady_backlog_max_free", Value::Count(free.backlog_max), "events");
    figure("snapshot_steady_backlog_max_held", Value::Count(held.backlog_max), "events");
    let seconds = held.backlog_max as f64 / held.offered;
    figure("snapshot_steady_backlog_max_held_seconds", Value::Seconds(seconds), "s");
    let p = |run: &Steady, q| if run.latencies.is_empty() { f64::NAN } else { percentile(&run.latencies, q) };
    figure("snapshot_steady_p50_free", Value::Millis(p(free, 0.50)), "ms");
    figure("snapshot_steady_p99_free", Value::Millis(p(free, 0.99)), "ms");
    figure("snapshot_steady_p50_held", Value::Millis(p(held, 0.50)), "ms");
    figure("snapshot_steady_p99_held", Value::Millis(p(held, 0.99)), "ms");
    figure("snapshot_steady_p99_ratio", Value::Ratio(p(held, 0.99) / p(free, 0.99)), "x");
    comment("target: snapshot_steady_backlog_max_held_seconds < 1");
}

/// One run in `db`: a consumer on the queue, a relay in-process, the writers, watched until they
/// stop; then the relay, the consumer and the histograms' sampling are stopped on every path.
async fn run(db: &TestDb, target: Target<'_>, load: Load, label: &str) -> Result<Steady, BoxError> {
    let steal = Steal::start();
    target.purge().await?;
    counters::install();
    for (name, _) in RELAY_STAGES {
        counters::take_samples(name);
    }
    counters::sample_histograms(true);
    let outcome = async {
        let arrivals = Arrivals::start(target, u64::MAX, false).await?;
        let steady = relay_under_load(db, target, &arrivals, load, label).await;
        let stopped = arrivals.stop().await;
        let steady = steady?;
        stopped?;
        Ok::<_, BoxError>(steady)
    }
    .await;
    counters::sample_histograms(false);
    let steady = outcome?;
    target.purge().await?;
    comment(format_args!(
        "{label}: {:.1} events/s committed, backlog at most {}, {} over the run",
        steady.offered,
        steady.backlog_max,
        steal.describe()
    ));
    Ok(steady)
}

/// Starts the relay, runs and watches the writers, stops the relay.
async fn relay_under_load(
    db: &TestDb,
    target: Target<'_>,
    arrivals: &Arrivals,
    load: Load,
    label: &str,
) -> Result<Steady, BoxError> {
    let relay = InProcess::start(db, target, None).await?;
    let watched = async {
        let mut writers = Writers::start(db, load).await?;
        let watched = watch(&mut writers, &relay, arrivals, label).await;
        let committed = writers.finish().await;
        let steady = watched?;
        Ok::<_, BoxError>(Steady { offered: committed? as f64 / load.length.as_secs_f64(), ..steady })
    }
    .await;
    let stopped = relay.stop().await;
    let steady = watched?;
    stopped?;
    Ok(steady)
}

/// Reads the backlog every [`POLL`] and prints an interval every [`SAMPLE`] until the writers
/// stop; fails at once if a writer, the relay or the consumer ends.
async fn watch(writers: &mut Writers, relay: &InProcess, arrivals: &Arrivals, label: &str) -> Result<Steady, BoxError> {
    let published_before = counters::get(PUBLISHED);
    let end = writers.end_time();
    let mut steady = Steady::default();
    let mut interval = Interval::start(writers.committed());
    while Instant::now() < end {
        tokio::time::sleep(POLL.min(end.saturating_duration_since(Instant::now()))).await;
        writers.check()?;
        relay.check_running()?;
        arrivals.check_consuming()?;
        let committed = writers.committed();
        let backlog = committed.saturating_sub(counters::get(PUBLISHED).saturating_sub(published_before));
        interval.saw(backlog);
        if interval.elapsed() >= SAMPLE || Instant::now() >= end {
            let at = writers.start_time().elapsed();
            let ended = interval.end(label, at, committed, backlog);
            steady.backlog_max = steady.backlog_max.max(ended.backlog_max);
            steady.latencies.extend(ended.latencies);
            interval = Interval::start(committed);
        }
    }
    steady.latencies.sort_by(f64::total_cmp);
    Ok(steady)
}
