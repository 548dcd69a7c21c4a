//! Phase 3, latency at a steady load: producers committing one event per transaction at a steady
//! rate, a relay in-process, and the time from each `COMMIT` to the event's arrival at the
//! consumer, with where that time went according to the relay's histograms.

use std::collections::HashMap;
use std::time::Duration;

use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use sqlx::postgres::PgPoolOptions;
use tokio::task::JoinSet;
use tokio::time::Instant;
use uuid::Uuid;

use super::arrivals::Arrivals;
use super::in_process::InProcess;
use super::plan::Plan;
use super::target::Target;
use crate::counters;
use crate::error::BoxError;
use crate::figure::comment;
use crate::producer::commit_one;
use crate::wait::{FLOOR, Progress, allow, join_tasks, until};

/// Producer tasks of the latency phase, each committing one event per tick.
const PRODUCERS: u64 = 10;
/// Entities of the latency phase, spread round-robin over the producers.
const LATENCY_ENTITIES: u64 = 100;
/// The tick of each latency producer: 10 producers × one event per 10 ms = 1,000 events/s.
const TICK: Duration = Duration::from_millis(10);

/// The relay's histograms that show where an event's time goes, and what each measures.
pub(crate) const RELAY_STAGES: [(&str, &str); 5] = [
    ("outbox_event_age_at_claim_seconds", "event age when claimed"),
    ("outbox_relay_claim_seconds", "claim statement"),
    ("outbox_publish_to_confirm_seconds", "publish to confirm"),
    ("outbox_relay_record_seconds", "recording a batch's outcomes"),
    ("outbox_commit_to_confirm_seconds", "event age when confirmed"),
];

/// What the latency phase measured.
#[derive(Debug)]
pub(super) struct Latency {
    pub(super) offered: f64,
    pub(super) samples: u64,
    pub(super) p50: f64,
    pub(super) p99: f64,
    pub(super) max: f64,
}

/// One committed event of the latency phase.
#[derive(Debug)]
pub(crate) struct Commit {
    pub(crate) id: Uuid,
    /// When `COMMIT` returned.
    pub(crate) at: Instant,
    /// Whether its tick fell in the measured window (not the warm-up).
    pub(crate) measured: bool,
}

/// Runs the steady load against an in-process relay over `db` (its gauge interval as
/// [`InProcess::start`] takes it) and measures each event's latency from its `COMMIT` to its
/// arrival; prints the detail as `#` lines.
pub(super) async fn measure_latency(
    db: &TestDb,
    target: Target<'_>,
    plan: Plan,
    gauge_interval_ms: Option<u64>,
) -> Result<Latency, BoxError> {
    target.purge().await?;
    counters::install();
    let claims_before = claims();
    start_sampling();
    let arrivals = Arrivals::start(target, u64::MAX, true).await?;
    let outcome = load(db, target, plan, &arrivals, gauge_interval_ms).await;
    let arrived = arrivals.stop().await;
    counters::sample_histograms(false);
    let claims_after = claims();
    let commits = outcome?;
    let arrived = arrived?;
    target.purge().await?;

    let measured = commits.iter().filter(|c| c.measured).count();
    let latencies = latencies(&commits, arrived);
    report_samples(plan, measured, latencies.len());
    if latencies.is_empty() {
        return Err("no event of the latency phase arrived".into());
    }
    let p90 = percentile(&latencies, 0.90);
    let p999 = percentile(&latencies, 0.999);
    comment(format_args!("latency: p90 {p90:.2} ms, p99.9 {p999:.2} ms"));
    report_claims(claims_before, claims_after, commits.len());
    report_stages();
    Ok(Latency {
        offered: measured as f64 / plan.latency_window.as_secs_f64(),
        samples: latencies.len() as u64,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or(0.0),
    })
}

/// The relay's claims so far: those that found rows, and all of them.
fn claims() -> (u64, u64) {
    let rows = counters::get("outbox_relay_claims_total{found=\"rows\"}");
    (rows, rows + counters::get("outbox_relay_claims_total{found=\"none\"}"))
}

/// Drops what the relay's stage histograms kept so far and has them keep their values from now on.
fn start_sampling() {
    for (name, _) in RELAY_STAGES {
        counters::take_samples(name);
    }
    counters::sample_histograms(true);
}

/// Starts a relay, runs the steady load, waits up to [`FLOOR`] for the stragglers (every event
/// committed, warm-up included) to arrive (those that do not count as missing), then stops the
/// relay. Returns the commits.
async fn load(
    db: &TestDb,
    target: Target<'_>,
    plan: Plan,
    arrivals: &Arrivals,
    gauge_interval_ms: Option<u64>,
) -> Result<Vec<Commit>, BoxError> {
    let relay = InProcess::start(db, target, gauge_interval_ms).await?;
    let produced = produce(db, plan).await;
    let expected = produced.as_ref().map(|c| c.len() as u64).unwrap_or(0);
    let straggled =
        until(format_args!("all {expected} events committed"), FLOOR, Duration::from_millis(20), async || {
            arrivals.check_consuming()?;
            Ok(if arrivals.count() >= expected { Progress::Done(()) } else { Progress::Waiting(arrivals.describe()) })
        })
        .await;
    if let Err(e) = straggled {
        comment(format_args!("latency: {e}; the events that did not arrive count as missing"));
    }
    let stopped = relay.stop().await;
    let produced = produced?;
    stopped?;
    Ok(produced)
}

/// The latency in milliseconds of every measured commit that arrived (its first arrival), sorted.
pub(crate) fn latencies(commits: &[Commit], arrived: Vec<(Uuid, Instant)>) -> Vec<f64> {
    let mut first_arrival: HashMap<Uuid, Instant> = HashMap::with_capacity(arrived.len());
    for (id, at) in arrived {
        first_arrival.entry(id).or_insert(at);
    }
    let mut latencies: Vec<f64> = commits
        .iter()
        .filter(|c| c.measured)
        .filter_map(|c| first_arrival.get(&c.id).map(|at| at.saturating_duration_since(c.at).as_secs_f64() * 1e3))
        .collect();
    latencies.sort_by(f64::total_cmp);
    latencies
}

/// How many events were committed in the measured window and how many of them arrived.
fn report_samples(plan: Plan, measured: usize, arrived: usize) {
    let missing = measured - arrived;
    comment(format_args!(
        "latency: {measured} events committed in {:?} after {:?} of warm-up ({PRODUCERS} producers, \
         {LATENCY_ENTITIES} entities, one event per transaction), {arrived} arrived, {missing} missing",
        plan.latency_window, plan.latency_warmup,
    ));
}

/// The relay's claims during the phase, against the events committed.
fn report_claims(before: (u64, u64), after: (u64, u64), commits: usize) {
    let (with_rows, all) = (after.0 - before.0, after.1 - before.1);
    comment(format_args!(
        "latency: {all} claims ({with_rows} found rows), {:.2} claims per event committed",
        all as f64 / commits.max(1) as f64
    ));
}

/// Percentiles of each of the relay's [`RELAY_STAGES`] over the whole phase.
fn report_stages() {
    for (name, what) in RELAY_STAGES {
        let mut took: Vec<f64> = counters::take_samples(name).into_iter().map(|s| s * 1e3).collect();
        took.sort_by(f64::total_cmp);
        if let Some(max) = took.last() {
            comment(format_args!(
                "latency: {what} (whole phase, {} samples): p50 {:.2} ms, p99 {:.2} ms, max {max:.2} ms",
                took.len(),
                percentile(&took, 0.50),
                percentile(&took, 0.99),
            ));
        }
    }
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The steady load: [`PRODUCERS`] tasks, each with its own connection, committing one event per
/// [`TICK`] (missed ticks are caught up, so the offered rate holds), each over its own entities.
/// The producers' ticks are spread evenly over a tick, so the load arrives as one commit every
/// `TICK / PRODUCERS` rather than as bursts of [`PRODUCERS`] simultaneous commits.
async fn produce(db: &TestDb, plan: Plan) -> Result<Vec<Commit>, BoxError> {
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(PRODUCERS)?)
        .min_connections(u32::try_from(PRODUCERS)?)
        .connect_with(db.connect_options().clone())
        .await?;
    let lead = Duration::from_millis(100);
    let begin = Instant::now() + lead;
    let measure_from = begin + plan.latency_warmup;
    let end = measure_from + plan.latency_window;
    let mut tasks = JoinSet::new();
    for producer in 0..PRODUCERS {
        let pool = pool.clone();
        tasks.spawn(async move {
            let outbox = Outbox::new();
            let mut conn = pool.acquire().await?;
            let offset = TICK * u32::try_from(producer)? / u32::try_from(PRODUCERS)?;
            let mut ticks = tokio::time::interval_at(begin + offset, TICK);
            let mut commits = Vec::new();
            for n in 0_u64.. {
                let tick = ticks.tick().await;
                if tick >= end {
                    break;
                }
                let order = i64::try_from(producer + PRODUCERS * (n % (LATENCY_ENTITIES / PRODUCERS)) + 1)?;
                let id = commit_one(&mut conn, &outbox, order).await?;
                commits.push(Commit { id, at: Instant::now(), measured: tick >= measure_from });
            }
            Ok::<_, BoxError>(commits)
        });
    }
    let load = lead + plan.latency_warmup + plan.latency_window;
    let what = format!("{PRODUCERS} producers to commit one event per {TICK:?} each for {load:?}");
    let outcome = join_tasks(what, allow(load), tasks).await;
    // The producers are done or aborted: their connections are back or closed.
    let _ = tokio::time::timeout(FLOOR, pool.close()).await;
    Ok(outcome?.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.50), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&values, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
    }
}
