//! `outbox-bench fleet`: one fleet of relays over many databases ([`outbox_relayer::fleet`]).
//!
//! 1. **Drain**: the same total backlog spread over 1, 10 and 50 databases, drained by one fleet
//!    process (the hidden command `fleet-process`, as `outbox relay --databases-file` runs it): the
//!    rate over the last nine tenths (the fleet takes its databases at its second look, 2 s after
//!    it starts, which the first tenth absorbs), the process's peak RSS, and the most connections
//!    to the benchmark's databases seen (sampled every 100 ms).
//! 2. **Faults**: the 50 databases' backlog again, with two more databases listed: one behind a
//!    proxy that accepts connections and passes no bytes, one without the outbox's tables. The
//!    healthy databases' rate against the run without them.
//! 3. **Latency**: 1,000 events/s committed one per transaction, spread evenly over the 50
//!    databases, from each `COMMIT` to the event's arrival at a consumer; then again with the two
//!    faulty databases of phase 2 listed besides, and once more without them (the runs before
//!    and after bracket the drift of tables that grow from phase to phase). The fleet holds 51
//!    or 52 connections and the server's `max_connections` is 100, so 42 databases get a
//!    producer connection of their own and the other 8 share two producers that open a
//!    connection per visit (every 100 ms, each database gets the events due since the last).
//!    Every producer commits the events due by the clock, so one that falls behind catches up
//!    instead of committing fewer.
//!
//! Figures: `fleet_drain_<n>_dbs_events_per_s`, `fleet_drain_50_over_1_dbs`,
//! `fleet_peak_rss_<n>_dbs_mib`, `fleet_rss_per_database_kib`, `fleet_connections_<n>_dbs`,
//! `fleet_drain_50_dbs_with_2_faulty_events_per_s`, `fleet_drain_faulty_over_healthy`,
//! `fleet_latency_p50_ms`, `fleet_latency_p99_ms`, `fleet_latency_with_2_faulty_p50_ms`,
//! `fleet_latency_with_2_faulty_p99_ms`, `fleet_latency_again_p50_ms`, `fleet_latency_again_p99_ms`.

mod databases;
mod process;

use std::time::Duration;

use outbox_producer::Outbox;
use outbox_testkit::{ChaosProxy, TestBroker};
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::time::Instant;
use uuid::Uuid;

use self::databases::Databases;
pub(crate) use self::process::{ProcessArgs, process};
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::process::Subprocess;
use crate::relay::{Arrivals, Target, percentile, topology};
use crate::steal::Steal;
use crate::wait::{FLOOR, Progress, allow_for, until, within};

/// Databases the benchmark creates.
const DATABASES: usize = 50;
/// Databases whose producer holds a connection through the latency phase (see the module's
/// documentation); the others' producer connects per visit.
const HELD_CONNECTIONS: usize = 42;
/// Producers sharing the other databases, each visiting its share in turn.
const VISITORS: usize = 2;
/// How often the producer of the other databases commits into each the events due since its last
/// visit.
const VISIT: Duration = Duration::from_millis(100);

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    backlog: u64,
    entities: u64,
    warmup: Duration,
    window: Duration,
}

impl Plan {
    pub(crate) fn new(quick: bool) -> Self {
        if quick {
            Self { backlog: 10_000, entities: 500, warmup: Duration::from_secs(3), window: Duration::from_secs(5) }
        } else {
            Self { backlog: 100_000, entities: 1_000, warmup: Duration::from_secs(5), window: Duration::from_secs(30) }
        }
    }
}

/// What one drain measured.
struct Drained {
    rate: f64,
    peak_rss_kib: u64,
    connections: i64,
}

/// Runs the benchmark and prints its figures.
pub(crate) async fn run(plan: Plan) -> Result<(), BoxError> {
    crate::broker::with_broker(async |broker| bench(broker, plan).await).await?;
    Ok(())
}

async fn bench(broker: &TestBroker, plan: Plan) -> Result<(), BoxError> {
    let (exchange, queue) = topology(broker, "bench.fleet", lapin::types::FieldTable::default()).await?;
    let target = Target { url: broker.url(), exchange: &exchange, queue: &queue, admin: broker.channel() };
    let databases = Databases::create(DATABASES).await?;
    comment(format_args!(
        "fleet: {DATABASES} databases on one server, one fleet process with its defaults (1 connection per \
         database, polling every 250 ms); backlog {} events over {} entities in all, split evenly",
        plan.backlog, plan.entities
    ));
    let steal = Steal::start();
    let alone = drain(&databases, target, plan, 0, None).await?;
    figure("relay_drain_1_db_alone_events_per_s", Value::Rate(alone.rate), "events/s");
    figure("relay_peak_rss_1_db_alone_mib", Value::Mebibytes(alone.peak_rss_kib as f64 / 1024.0), "MiB");
    let mut drained = Vec::new();
    for n in [1, 10, DATABASES] {
        let d = drain(&databases, target, plan, n, None).await?;
        figure(&format!("fleet_drain_{n}_dbs_events_per_s"), Value::Rate(d.rate), "events/s");
        figure(&format!("fleet_peak_rss_{n}_dbs_mib"), Value::Mebibytes(d.peak_rss_kib as f64 / 1024.0), "MiB");
        figure(&format!("fleet_connections_{n}_dbs"), Value::Count(d.connections.max(0) as u64), "connections");
        drained.push(d);
    }
    let (one, fifty) = (&drained[0], &drained[2]);
    figure("fleet_drain_50_over_1_dbs", Value::Ratio(fifty.rate / one.rate), "ratio (target >= 0.8)");
    figure("fleet_drain_1_db_over_relay_alone", Value::Ratio(one.rate / alone.rate), "ratio");
    let per_db = fifty.peak_rss_kib.saturating_sub(one.peak_rss_kib) as f64 / (DATABASES - 1) as f64;
    figure("fleet_rss_per_database_kib", Value::Rate(per_db), "KiB");
    let stalled = within("a proxy", FLOOR, ChaosProxy::start(databases.server_addr()?)).await?;
    stalled.stall();
    let faulty = drain(&databases, target, plan, DATABASES, Some(stalled.addr())).await?;
    figure("fleet_drain_50_dbs_with_2_faulty_events_per_s", Value::Rate(faulty.rate), "events/s");
    figure("fleet_drain_faulty_over_healthy", Value::Ratio(faulty.rate / fifty.rate), "ratio (target >= 0.9)");
    let (p50, p99) = latency(&databases, target, plan, None).await?;
    figure("fleet_latency_p50_ms", Value::Millis(p50), "ms");
    figure("fleet_latency_p99_ms", Value::Millis(p99), "ms");
    let (p50, p99) = latency(&databases, target, plan, Some(stalled.addr())).await?;
    figure("fleet_latency_with_2_faulty_p50_ms", Value::Millis(p50), "ms");
    figure("fleet_latency_with_2_faulty_p99_ms", Value::Millis(p99), "ms");
    // Without them again: the healthy runs on both sides bracket the drift of a growing table.
    let (p50, p99) = latency(&databases, target, plan, None).await?;
    figure("fleet_latency_again_p50_ms", Value::Millis(p50), "ms");
    figure("fleet_latency_again_p99_ms", Value::Millis(p99), "ms");
    comment(format_args!("fleet: {}", steal.describe()));
    Ok(())
}

/// Fills the backlog over the first `n` databases and drains it with a fleet process; with
/// `faults`, the list holds two faulty databases besides (see `Databases::list_with_faults`).
/// With `n` = 0, the relay of one database as it runs alone (`relay-process`, its defaults: a pool
/// for its confirm window, LISTEN) over the first database: the baseline.
async fn drain(
    databases: &Databases,
    target: Target<'_>,
    plan: Plan,
    n: usize,
    faults: Option<std::net::SocketAddr>,
) -> Result<Drained, BoxError> {
    databases.fill(n.max(1), plan.backlog, plan.entities).await?;
    target.purge().await?;
    let arrivals = Arrivals::start(target, plan.backlog, false).await?;
    let list = match faults {
        Some(stalled) => databases.list_with_faults(n, stalled)?,
        None => databases.list(n.max(1))?,
    };
    let list = list.to_str().ok_or("a list path that is not UTF-8")?;
    let mut process = if n == 0 {
        let url = databases.options(0).to_url_lossy().to_string();
        let args = ["relay-process", "--exchange", target.exchange];
        Subprocess::spawn("the relay process", &args, &url, target.url).await?
    } else {
        let args = ["fleet-process", "--databases-file", list, "--exchange", target.exchange];
        Subprocess::spawn("the fleet process", &args, "", target.url).await?
    };
    let start = Instant::now();
    let mut admin = databases.admin().await?;
    let mut connections = 0;
    let drained = until(
        format_args!("{} events from {n} databases", plan.backlog),
        allow_for(plan.backlog, 1_000),
        Duration::from_millis(100),
        async || {
            process.check_alive()?;
            connections = connections.max(databases.connections(&mut admin).await?);
            Ok(match arrivals.all() {
                Some(at) => Progress::Done(at),
                None => Progress::Waiting(arrivals.describe()),
            })
        },
    )
    .await;
    let memory = process.memory().await;
    let stopped = process.stop().await;
    let _ = admin.close().await;
    let tenths = arrivals.tenths(start);
    arrivals.stop().await?;
    let all = drained?.saturating_duration_since(start);
    stopped?;
    let first_tenth = tenths.first().copied().unwrap_or_default();
    let rate = plan.backlog as f64 * 0.9 / (all - first_tenth).as_secs_f64();
    let (peak_rss_kib, _) = memory?;
    let what = match (n, faults) {
        (0, _) => "the relay alone, 1".to_owned(),
        (n, Some(_)) => format!("{n} (and 2 faulty)"),
        (n, None) => n.to_string(),
    };
    comment(format_args!(
        "fleet: {what} databases: first tenth after {:.2} s, all after {:.2} s; {rate:.0} events/s over the last nine \
         tenths; peak RSS {peak_rss_kib} kB; at most {connections} connections",
        first_tenth.as_secs_f64(),
        all.as_secs_f64()
    ));
    target.purge().await?;
    Ok(Drained { rate, peak_rss_kib, connections })
}

/// 1,000 events/s over the [`DATABASES`] (a producer each for the first [`HELD_CONNECTIONS`],
/// [`VISITORS`] visiting the others); commit to arrival p50 and p99 in milliseconds.
async fn latency(
    databases: &Databases,
    target: Target<'_>,
    plan: Plan,
    faults: Option<std::net::SocketAddr>,
) -> Result<(f64, f64), BoxError> {
    target.purge().await?;
    let arrivals = Arrivals::start(target, u64::MAX, true).await?;
    let n = DATABASES;
    let list = match faults {
        Some(stalled) => databases.list_with_faults(n, stalled)?,
        None => databases.list(n)?,
    };
    let list = list.to_str().ok_or("a list path that is not UTF-8")?;
    let args = ["fleet-process", "--databases-file", list, "--exchange", target.exchange];
    let process = Subprocess::spawn("the fleet process", &args, "", target.url).await?;
    // The fleet takes its databases at its second look: wait until every database publishes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut producers = tokio::task::JoinSet::new();
    // One event per `tick` into each database: 1,000 a second in all.
    let tick = Duration::from_millis(n as u64);
    let (warmup, window) = (plan.warmup, plan.window);
    for i in 0..HELD_CONNECTIONS {
        let options = vec![databases.options(i)];
        producers.spawn(async move { produce(options, tick, warmup, window, i).await });
    }
    for v in 0..VISITORS {
        let visited: Vec<_> = (HELD_CONNECTIONS + v..n).step_by(VISITORS).map(|i| databases.options(i)).collect();
        producers.spawn(async move { produce(visited, tick, warmup, window, HELD_CONNECTIONS + v).await });
    }
    let mut commits = Vec::new();
    while let Some(done) = producers.join_next().await {
        commits.extend(done??);
    }
    let expected = commits.len() as u64;
    let _ = until(format_args!("all {expected} events"), FLOOR, Duration::from_millis(50), async || {
        Ok(if arrivals.count() >= expected { Progress::Done(()) } else { Progress::Waiting(arrivals.describe()) })
    })
    .await;
    let arrived = arrivals.stop().await?;
    process.stop().await?;
    target.purge().await?;
    let first: std::collections::HashMap<Uuid, Instant> = arrived.into_iter().rev().collect();
    let mut latencies: Vec<f64> = commits
        .iter()
        .filter(|(_, _, measured)| *measured)
        .filter_map(|(id, at, _)| first.get(id).map(|a| a.saturating_duration_since(*at).as_secs_f64() * 1e3))
        .collect();
    latencies.sort_by(f64::total_cmp);
    let measured = commits.iter().filter(|c| c.2).count();
    comment(format_args!(
        "fleet latency: {measured} events committed in {:?} over {n} databases{} ({:.0} events/s), {} arrived",
        plan.window,
        if faults.is_some() { " and 2 faulty ones listed" } else { "" },
        measured as f64 / plan.window.as_secs_f64(),
        latencies.len()
    ));
    if latencies.is_empty() {
        return Err("no event of the latency phase arrived".into());
    }
    Ok((percentile(&latencies, 0.50), percentile(&latencies, 0.99)))
}

/// Commits one event per `tick` into each database of `sources` for `warmup` then `window`, by
/// the clock (the events due so far, so a late producer catches up): into one over a connection
/// held throughout, into several over a connection opened per visit (every [`VISIT`]). Each
/// commit's id, time, and whether it falls in the window.
async fn produce(
    sources: Vec<sqlx::postgres::PgConnectOptions>,
    tick: Duration,
    warmup: Duration,
    window: Duration,
    i: usize,
) -> Result<Vec<(Uuid, Instant, bool)>, BoxError> {
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
                commits.push((id, Instant::now(), measured));
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
