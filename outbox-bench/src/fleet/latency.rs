//! The fleet's latency phases: 1,000 events/s committed one per transaction, spread evenly over the
//! [`DATABASES`], from each `COMMIT` to the event's arrival at a consumer, and the CPU the fleet
//! process, its database backends and the broker spent per 1,000 events.
//!
//! The phases alternate: without faults, with the two faulty databases listed besides, without,
//! and so on (`--faulty-phases`, 2 by default), ending without. Each phase with faults is compared
//! with the mean of the two phases around it, so that the drift of tables growing from phase to
//! phase, and of a host whose speed wanders, falls on both sides of the comparison.
//!
//! The fleet holds 51 or 52 connections, the CPU meter one, and the server's `max_connections` is
//! 100 (3 of them for superusers only), so 42 databases get a producer connection of their own and the other 8 share two producers that open a
//! connection per visit (every 100 ms, each database gets the events due since the last). Every
//! producer commits the events due by the clock, so one that falls behind catches up instead of
//! committing fewer.

use std::net::SocketAddr;
use std::time::Duration;

use outbox_producer::Outbox;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::time::Instant;
use uuid::Uuid;

use super::databases::{APPLICATION_NAME, Databases};
use super::plan::{DATABASES, Plan};
use crate::cpu::{Meter, Spent};
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::process::Subprocess;
use crate::relay::{Arrivals, Commit, Target, latencies, percentile};
use crate::wait::{FLOOR, Progress, until};

/// Databases whose producer holds a connection through a phase; the others' producer connects
/// per visit.
const HELD_CONNECTIONS: usize = 42;
/// Producers sharing the other databases, each visiting its share in turn.
const VISITORS: usize = 2;
/// How often the producer of the other databases commits into each the events due since its last
/// visit.
const VISIT: Duration = Duration::from_millis(100);

/// What one phase measured.
struct Phase {
    p50: f64,
    p99: f64,
    spent: Spent,
    events: u64,
}

/// Runs the phases and prints the figures: `fleet_latency_p50_ms` and `_p99_ms` (the median of
/// the phases without faults), `fleet_latency_with_2_faulty_p50_ms` and `_p99_ms` (the median of
/// the phases with them), `fleet_latency_faulty_over_neighbours_p50` and `_p99` (the median over
/// the phases with faults of each against the mean of its two neighbours), and the CPU spent per 1,000
/// events with and without the faults.
pub(super) async fn bracketed(
    databases: &Databases,
    target: Target<'_>,
    plan: Plan,
    stalled: SocketAddr,
) -> Result<(), BoxError> {
    let mut phases = Vec::new();
    for i in 0..=2 * plan.faulty_phases {
        let faulty = i % 2 == 1;
        phases.push((faulty, phase(databases, target, plan, faulty.then_some(stalled)).await?));
    }
    let of = |faulty: bool| phases.iter().filter(move |(f, _)| *f == faulty).map(|(_, p)| p);
    for (name, pick) in [("p50", (|p: &Phase| p.p50) as fn(&Phase) -> f64), ("p99", |p: &Phase| p.p99)] {
        figure(&format!("fleet_latency_{name}_ms"), Value::Millis(median(of(false).map(pick).collect())), "ms");
        let faulty = median(of(true).map(pick).collect());
        figure(&format!("fleet_latency_with_2_faulty_{name}_ms"), Value::Millis(faulty), "ms");
        let ratio = against_neighbours(&phases, name, pick);
        figure(&format!("fleet_latency_faulty_over_neighbours_{name}"), Value::Ratio(ratio), "ratio (target <= 1.1)");
    }
    for (prefix, faulty) in [("fleet_latency", false), ("fleet_latency_with_2_faulty", true)] {
        let spent = of(faulty).map(|p| p.spent).fold(Spent::default(), |a, b| a + b);
        spent.print(prefix, of(faulty).map(|p| p.events).sum());
    }
    Ok(())
}

/// The median, over the phases with faults (the odd ones), of each one's figure against the mean
/// of the phases before and after it; each of these ratios in a comment.
fn against_neighbours(phases: &[(bool, Phase)], name: &str, pick: fn(&Phase) -> f64) -> f64 {
    let ratios: Vec<f64> = (1..phases.len() - 1)
        .step_by(2)
        .map(|i| pick(&phases[i].1) / ((pick(&phases[i - 1].1) + pick(&phases[i + 1].1)) / 2.0))
        .collect();
    let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
    comment(format_args!("fleet latency {name}, each phase with faults against its neighbours: {}", listed.join(", ")));
    median(ratios)
}

/// The median of `values` (not empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    (values[(values.len() - 1) / 2] + values[values.len() / 2]) / 2.0
}

/// One phase: a fleet process over the [`DATABASES`] (and the faulty ones if `faults`), 1,000
/// events/s from the producers; commit to arrival p50 and p99 in milliseconds, and the CPU spent.
async fn phase(
    databases: &Databases,
    target: Target<'_>,
    plan: Plan,
    faults: Option<SocketAddr>,
) -> Result<Phase, BoxError> {
    target.purge().await?;
    let arrivals = Arrivals::start(target, u64::MAX, true).await?;
    let list = match faults {
        Some(stalled) => databases.list_with_faults(DATABASES, stalled)?,
        None => databases.list(DATABASES)?,
    };
    let list = list.to_str().ok_or("a list path that is not UTF-8")?;
    let args = ["fleet-process", "--databases-file", list, "--exchange", target.exchange];
    let process = Subprocess::spawn("the fleet process", &args, "", target.url).await?;
    let meter = Meter::new(process.child.id().ok_or("the fleet process has ended")?, APPLICATION_NAME);
    let pool = databases.admin_pool().await?;
    // The fleet takes its databases at its second look: wait until every database publishes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = meter.sample(&pool).await?;
    let commits = produce_all(databases, plan).await?;
    let expected = commits.len() as u64;
    let _ = until(format_args!("all {expected} events"), FLOOR, Duration::from_millis(50), async || {
        Ok(if arrivals.count() >= expected { Progress::Done(()) } else { Progress::Waiting(arrivals.describe()) })
    })
    .await;
    let spent = before.spent_until(&meter.sample(&pool).await?);
    pool.close().await;
    let arrived = arrivals.stop().await?;
    process.stop().await?;
    target.purge().await?;
    let (p50, p99) = percentiles(&commits, arrived)?;
    comment(format_args!(
        "fleet latency: {} events committed in {:?} over {DATABASES} databases{}: p50 {p50:.2} ms, p99 {p99:.2} ms; \
         the fleet process spent {:.0} ms of CPU",
        commits.iter().filter(|c| c.measured).count(),
        plan.window,
        if faults.is_some() { " and 2 faulty ones listed" } else { "" },
        spent.process
    ));
    Ok(Phase { p50, p99, spent, events: expected })
}

/// Commit to first arrival p50 and p99, in milliseconds, of the commits in the measured window.
fn percentiles(commits: &[Commit], arrived: Vec<(Uuid, Instant)>) -> Result<(f64, f64), BoxError> {
    let latencies = latencies(commits, arrived);
    if latencies.is_empty() {
        return Err("no event of the latency phase arrived".into());
    }
    Ok((percentile(&latencies, 0.50), percentile(&latencies, 0.99)))
}

/// Runs the producers of a phase (one per database for the first [`HELD_CONNECTIONS`],
/// [`VISITORS`] visiting the others) to the end of its window; their commits.
async fn produce_all(databases: &Databases, plan: Plan) -> Result<Vec<Commit>, BoxError> {
    let mut producers = tokio::task::JoinSet::new();
    // One event per `tick` into each database: 1,000 a second in all.
    let tick = Duration::from_millis(DATABASES as u64);
    let (warmup, window) = (plan.warmup, plan.window);
    for i in 0..HELD_CONNECTIONS {
        let options = vec![databases.options(i)];
        producers.spawn(async move { produce(options, tick, warmup, window, i).await });
    }
    for v in 0..VISITORS {
        let visited = (HELD_CONNECTIONS + v..DATABASES).step_by(VISITORS).map(|i| databases.options(i)).collect();
        producers.spawn(async move { produce(visited, tick, warmup, window, HELD_CONNECTIONS + v).await });
    }
    let mut commits = Vec::new();
    while let Some(done) = producers.join_next().await {
        commits.extend(done??);
    }
    Ok(commits)
}

/// Commits one event per `tick` into each database of `sources` for `warmup` then `window`, by
/// the clock (the events due so far, so a late producer catches up): into one over a connection
/// held throughout, into several over a connection opened per visit (every [`VISIT`]).
async fn produce(
    sources: Vec<PgConnectOptions>,
    tick: Duration,
    warmup: Duration,
    window: Duration,
    i: usize,
) -> Result<Vec<Commit>, BoxError> {
    let mut held = match sources.as_slice() {
        [one] => Some(PgConnection::connect_with(one).await?),
        _ => None,
    };
    let outbox = Outbox::new();
    // Spread the producers' ticks over one tick.
    tokio::time::sleep(tick / DATABASES as u32 * (i % DATABASES) as u32).await;
    let started = Instant::now();
    let mut every = tokio::time::interval(if held.is_some() { tick } else { VISIT });
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut done = vec![0_u128; sources.len()];
    let mut commits = Vec::new();
    loop {
        every.tick().await;
        if started.elapsed() >= warmup + window {
            break;
        }
        for (source, done) in sources.iter().zip(&mut done) {
            let due = started.elapsed().as_nanos() / tick.as_nanos() + 1;
            if due <= *done {
                continue;
            }
            let mut visiting = None;
            let conn = match &mut held {
                Some(conn) => conn,
                None => visiting.insert(PgConnection::connect_with(source).await?),
            };
            for _ in *done..due {
                let measured = started.elapsed() >= warmup;
                let id = crate::producer::commit_one(conn, &outbox, (commits.len() % 20) as i64).await?;
                commits.push(Commit { id, at: Instant::now(), measured });
            }
            *done = due;
            if let Some(conn) = visiting {
                conn.close().await?;
            }
        }
    }
    if let Some(conn) = held {
        conn.close().await?;
    }
    Ok(commits)
}
