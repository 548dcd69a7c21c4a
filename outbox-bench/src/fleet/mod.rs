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
//!    databases, from each `COMMIT` to the event's arrival at a consumer, in 2N + 1 phases:
//!    without the faulty databases of phase 2, with them, without, ... (`--faulty-phases N`, 2 by
//!    default; see [`latency`]).
//!
//! Figures: `fleet_drain_<n>_dbs_events_per_s`, `fleet_drain_50_over_1_dbs`,
//! `fleet_peak_rss_<n>_dbs_mib`, `fleet_rss_per_database_kib`, `fleet_connections_<n>_dbs`,
//! `fleet_drain_50_dbs_with_2_faulty_events_per_s`, `fleet_drain_faulty_over_healthy`,
//! `fleet_latency_p50_ms`, `fleet_latency_p99_ms`, `fleet_latency_with_2_faulty_p50_ms`,
//! `fleet_latency_with_2_faulty_p99_ms`, `fleet_latency_faulty_over_neighbours_p50`,
//! `fleet_latency_faulty_over_neighbours_p99`, and `fleet_latency_cpu_ms_per_1k_events{part}` and
//! `fleet_latency_with_2_faulty_cpu_ms_per_1k_events{part}` (the fleet process, its backends, the
//! broker, and their total).

mod databases;
mod latency;
mod plan;
mod process;

use std::time::Duration;

use outbox_testkit::{ChaosProxy, TestBroker};
use sqlx::{ConnectOptions, Connection};
use tokio::time::Instant;

use self::databases::Databases;
use self::plan::DATABASES;
pub(crate) use self::plan::{Args, Plan};
pub(crate) use self::process::{ProcessArgs, process};
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::process::Subprocess;
use crate::relay::{Arrivals, Target, topology};
use crate::steal::Steal;
use crate::wait::{FLOOR, Progress, allow_for, until, within};

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
    let stalled = within("a proxy", FLOOR, ChaosProxy::start(databases.server_addr()?)).await?;
    stalled.stall();
    if !plan.latency_only {
        drains(&databases, target, plan, stalled.addr()).await?;
    }
    latency::bracketed(&databases, target, plan, stalled.addr()).await?;
    comment(format_args!("fleet: {}", steal.describe()));
    Ok(())
}

/// The drains over 1, 10 and 50 databases, and over the 50 with the faulty ones listed besides
/// (behind `stalled`, a proxy that passes no bytes, and unmigrated); prints their figures.
async fn drains(
    databases: &Databases,
    target: Target<'_>,
    plan: Plan,
    stalled: std::net::SocketAddr,
) -> Result<(), BoxError> {
    let alone = drain(databases, target, plan, 0, None).await?;
    figure("relay_drain_1_db_alone_events_per_s", Value::Rate(alone.rate), "events/s");
    figure("relay_peak_rss_1_db_alone_mib", Value::Mebibytes(alone.peak_rss_kib as f64 / 1024.0), "MiB");
    let mut drained = Vec::new();
    for n in [1, 10, DATABASES] {
        let d = drain(databases, target, plan, n, None).await?;
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
    let faulty = drain(databases, target, plan, DATABASES, Some(stalled)).await?;
    figure("fleet_drain_50_dbs_with_2_faulty_events_per_s", Value::Rate(faulty.rate), "events/s");
    figure("fleet_drain_faulty_over_healthy", Value::Ratio(faulty.rate / fifty.rate), "ratio (target >= 0.9)");
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
