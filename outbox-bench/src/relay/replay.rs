//! The replay phase, on request (`OUTBOX_BENCH_RELAY_PHASES=replay`): a backlog drained by an
//! in-process relay, then the same events replayed to the benchmark queue by a `Replayer`, in one
//! database and one run, so the replay's rate stands beside the relay's drain rate; then the
//! latency phase's steady load while a rate-limited replay of a published backlog goes to a queue
//! of its own (live commit-to-arrival while the broker and the database also serve a replay).

use std::time::Instant;

use outbox_ops::replay::{self, NewReplayJob, ReplaySelection, ReplayTarget};
use outbox_relayer::AmqpPublisher;
use outbox_relayer::replay::Replayer;
use outbox_testkit::{TestBroker, TestDb};
use outbox_types::Publisher;

use super::arrivals::Arrivals;
use super::drain::drain_in_process;
use super::latency::measure_latency;
use super::plan::Plan;
use super::target::Target;
use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::wait::{FLOOR, within};

/// The rate of the replay that runs beside the steady load: twice the load's 1,000 events/s.
const REPLAY_RATE: u32 = 2_000;

/// Runs the phase and prints its figures.
pub(super) async fn replay_phase(broker: &TestBroker, target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    let backlog = plan.drain;
    let (drained, replayed) = with_db(async |db| {
        let drained = drain_in_process(db, target, backlog).await?;
        let replayed = replay_rate(db, target, backlog.events).await?;
        Ok::<_, BoxError>((drained, replayed))
    })
    .await?;
    figure("replay_backlog_events", Value::Count(backlog.events), "events");
    figure("replay_relay_drain_events_per_s", Value::Rate(drained), "events/s");
    figure("replay_events_per_s", Value::Rate(replayed), "events/s");
    figure("replay_to_drain_ratio", Value::Ratio(replayed / drained), "x");

    let side = within("the replay's own queue", FLOOR, broker.declare_queue("bench.replay.side")).await?;
    let side_target = Target { queue: &side, ..target };
    let latency = with_db(async |db| {
        drain_in_process(db, target, backlog).await?;
        let job = NewReplayJob::new(ReplaySelection::all(), ReplayTarget::queue(side.clone())).rate(REPLAY_RATE);
        let (job, _) = replay::create(db.pool(), job).await?;
        let publisher = connected_publisher(target).await?;
        let replayer = Replayer::builder(db.pool(), publisher.clone()).build()?;
        let running = tokio::spawn(async move { replayer.run(job.id).await });
        let latency = measure_latency(db, target, plan, None).await;
        let still_running = !running.is_finished();
        replay::cancel(db.pool(), job.id).await?;
        let report = running.await??;
        publisher.close().await;
        side_target.purge().await?;
        comment(format_args!(
            "replay beside the steady load: {} events replayed at most {REPLAY_RATE}/s, {}",
            report.sent,
            if still_running { "still running when the window ended" } else { "ended before the window did" }
        ));
        latency
    })
    .await?;
    figure("replay_live_latency_p50_ms", Value::Millis(latency.p50), "ms");
    figure("replay_live_latency_p99_ms", Value::Millis(latency.p99), "ms");
    Ok(())
}

/// A publisher for the replay, connected before any clock starts.
async fn connected_publisher(target: Target<'_>) -> Result<AmqpPublisher, BoxError> {
    let publisher = AmqpPublisher::builder(target.url).connection_name("outbox-bench-replay").build_unchecked();
    let connected = async { publisher.connect().await.map_err(|f| format!("{} ({})", f.reason, f.kind)) };
    within("the replay's publisher to connect", FLOOR, connected).await?;
    Ok(publisher)
}

/// Replays every published event of `db` to the benchmark exchange (the queue's consumer counts
/// them) without a rate limit; events per second from the run's start to its end.
async fn replay_rate(db: &TestDb, target: Target<'_>, events: u64) -> Result<f64, BoxError> {
    target.purge().await?;
    let arrivals = Arrivals::start(target, events, false).await?;
    let (job, _) =
        replay::create(db.pool(), NewReplayJob::new(ReplaySelection::all(), ReplayTarget::exchange(target.exchange)))
            .await?;
    let publisher = connected_publisher(target).await?;
    let replayer = Replayer::builder(db.pool(), publisher.clone()).build()?;
    let started = Instant::now();
    let report = replayer.run(job.id).await;
    let secs = started.elapsed().as_secs_f64();
    publisher.close().await;
    arrivals.stop().await?;
    target.purge().await?;
    let report = report?;
    comment(format_args!("replay: {} events in {secs:.1} s, job {}", report.sent, report.state));
    Ok(report.sent as f64 / secs)
}
