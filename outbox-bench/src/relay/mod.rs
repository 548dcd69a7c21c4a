//! The relay benchmark: how fast one relay drains a backlog compared with what the broker takes,
//! how long a committed event needs to reach a consumer at a steady load, whether a large backlog
//! slows the drain down, and how much memory a relay process needs.
//!
//! Every phase uses the same broker topology: a durable topic exchange and one durable queue bound
//! with `#` ([`TestBroker`], deleted at the end), and messages of the same shape: wire contract v1
//! of the producer benchmark's ~300-byte JSON payload with an entity key, persistent, `mandatory`,
//! routing key `order.updated`. In every phase one consumer with automatic acknowledgement is
//! attached to the queue (on a connection of its own): it counts arrivals, or timestamps them in the
//! latency phase. So every phase is measured the same way and the queue stays short instead of
//! growing to a depth that would slow the broker down; the queue is also purged between phases.
//!
//! Phases, in order:
//!
//! 1. `ceiling`, before and after each drain: raw lapin publishing with publisher confirms, 1,024
//!    messages in flight (sliding window): what the broker takes on this machine. Each drain is
//!    compared with the mean of the rounds on either side of it, so with the broker's state around
//!    it.
//! 2. `drain`: three times (once with `--quick`), alternating with the ceiling rounds; the round
//!    with the median ratio gives the figures, the peak RSS is the highest of all rounds. Each
//!    round drains a backlog of committed events, written with `enqueue_many` interleaved across its
//!    entities, drained by one relay with default settings (only the exchange is set, and not
//!    declared). The relay runs as a child process of this benchmark (`outbox-bench relay-process`)
//!    so that its peak RSS (`VmHWM`) is its own. The clock starts when the child says it is ready
//!    (connected to the database, about to run) and stops when every row is marked `published`.
//! 3. `latency`: one event per transaction at a steady 1,000 events/s over 100 entities (ten
//!    producer tasks, each committing once per 10 ms tick, their ticks spread evenly so that one
//!    commit arrives every millisecond), relay in-process with defaults. Latency
//!    is the consumer's arrival time minus the moment `COMMIT` returned to the producer.
//! 4. `backlog`: the drain rate of a large backlog against a small one over the same 1,000 entities,
//!    each in a fresh database, relay in-process with defaults. The small backlog is drained before
//!    and after the large one (each in its own database) and its rate is the mean of both.
//! 5. `quorum`: phases 1 and 2 again with a quorum queue (on the shared node) in place of the
//!    classic one, the ceiling measured on the quorum queue too: what a cluster's queue type costs.
//!
//! On request (`OUTBOX_BENCH_RELAY_PHASES=<name>`): `gauges`, `sealed` (what each costs), `replay`
//! (a replay's rate beside the relay's drain of the same backlog, and the live latency while a
//! rate-limited replay runs), `retention`.
//!
//! Before every drain the table is brought to a comparable state, the one a backlog that built up
//! while the relay was down has where autovacuum runs: `VACUUM ANALYZE`, then `CHECKPOINT`. Every
//! drain has a time limit ([`Plan::new`]) well above what a relay near its targets needs; a drain
//! still running then is cut off, its rate counts the rows it published until then, and a `#` line
//! says where the pending rows stand (claimed, due, deferred; ready or behind their predecessor). A
//! drain that published nothing by then fails with the same account. Every other wait has a
//! deadline too ([`crate::wait`]); an error names its phase (`quorum phase: waited ...`).
//!
//! This file holds the command: the order of the phases and the figures they print. The rest, one
//! concern per file: the sizes and durations of a run (`plan`), where every phase publishes and
//! consumes (`target`), the consumer attached in every phase (`arrivals`), the broker's ceiling
//! (`ceiling`), filling a backlog (`fill`), draining it and reporting the drain (`drain`), the
//! latency phase (`latency`), the replay phase (`replay`), the retention phase (`retention`), the relay's settings
//! (`settings`), a relay in-process (`in_process`) and the relay process, the hidden command
//! `relay-process` (`process`).

mod arrivals;
mod ceiling;
mod drain;
mod fill;
mod in_process;
mod latency;
mod plan;
mod process;
mod replay;
mod retention;
mod settings;
mod target;

use outbox_testkit::TestBroker;

pub(crate) use self::arrivals::Arrivals;
use self::ceiling::ceiling;
use self::drain::drain_in_process;
pub(crate) use self::drain::{ANY_PENDING, RelayChild, drain_in_child};
pub(crate) use self::fill::enqueue_spread;
pub(crate) use self::in_process::InProcess;
use self::latency::measure_latency;
pub(crate) use self::latency::{Commit, RELAY_STAGES, latencies, percentile};
pub(crate) use self::plan::{Backlog, Plan};
pub(crate) use self::process::{ProcessArgs, process};
pub(crate) use self::settings::experiment;
pub(crate) use self::target::Target;
use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::producer::event;
use crate::wait::{FLOOR, in_phase, within};

/// Whether a phase runs: all by default; `OUTBOX_BENCH_RELAY_PHASES` (a comma-separated subset of
/// `drain`, `latency`, `backlog`, `quorum`) narrows an experiment down.
fn phase(name: &str) -> bool {
    std::env::var("OUTBOX_BENCH_RELAY_PHASES").map_or(true, |phases| phases.split(',').any(|p| p.trim() == name))
}

/// Whether the phase `name`, run only on request, is named in `OUTBOX_BENCH_RELAY_PHASES`.
fn asked_for(name: &str) -> bool {
    std::env::var("OUTBOX_BENCH_RELAY_PHASES").is_ok_and(|phases| phases.split(',').any(|p| p.trim() == name))
}

/// Runs the relay benchmark and prints its figures.
pub(crate) async fn run(plan: Plan) -> Result<(), BoxError> {
    crate::broker::with_broker(async |broker| bench(broker, plan).await).await?;
    Ok(())
}

/// Declares a durable topic exchange and a queue (with `arguments`) bound to it with `#`, named
/// after `base`; returns their names.
pub(crate) async fn topology(
    broker: &TestBroker,
    base: &str,
    arguments: lapin::types::FieldTable,
) -> Result<(String, String), BoxError> {
    let declared = async {
        let exchange = broker.declare_exchange(base, lapin::ExchangeKind::Topic).await?;
        let queue = broker.declare_queue_with(base, arguments).await?;
        broker.bind(&queue, &exchange, "#").await?;
        Ok::<_, BoxError>((exchange, queue))
    };
    within(format_args!("the exchange and queue {base} to be declared and bound"), FLOOR, declared).await
}

async fn bench(broker: &TestBroker, plan: Plan) -> Result<(), BoxError> {
    let (exchange, queue) = topology(broker, "bench.relay", lapin::types::FieldTable::default()).await?;
    let target = Target { url: broker.url(), exchange: &exchange, queue: &queue, admin: broker.channel() };
    comment(format_args!(
        "relay: payload {} bytes, durable topic exchange -> one durable queue (#), persistent, mandatory; \
         one auto-ack consumer attached in every phase",
        event(1)?.event_payload().bytes().len()
    ));

    if phase("drain") {
        in_phase("drain", drain_phase(target, plan)).await?;
    }
    if phase("latency") {
        in_phase("latency", latency_phase(target, plan)).await?;
    }
    if phase("backlog") {
        in_phase("backlog", backlog_phase(target, plan)).await?;
    }
    if phase("quorum") {
        in_phase("quorum", quorum_phase(broker, plan)).await?;
    }
    if asked_for("gauges") {
        in_phase("gauges", gauges_phase(target, plan)).await?;
    }
    if asked_for("sealed") {
        in_phase("sealed", sealed_phase(target, plan)).await?;
    }
    if asked_for("replay") {
        in_phase("replay", replay::replay_phase(broker, target, plan)).await?;
    }
    if asked_for("retention") {
        let old = if plan.drain.events < 100_000 { 100_000 } else { 1_000_000 };
        in_phase("retention", retention::retention_phase(target, plan, old)).await?;
    }
    comment(
        "target: relay_drain_ratio >= 0.6, relay_latency_p99_ms <= 25 with relay_latency_p50_ms <= 5, \
         relay_backlog_1m_ratio >= 0.9, relay_peak_rss_mib <= 64",
    );
    Ok(())
}

/// The median round of [`drain_rounds`].
#[derive(Debug, Clone, Copy)]
struct Rounds {
    ratio: f64,
    ceiling: f64,
    rate: f64,
    cpu: crate::cpu::Spent,
    /// The highest of every round.
    peak_rss_mib: f64,
}

/// Drains alternating with ceiling rounds (ceiling, drain, ceiling, drain, ...); each drain is set
/// against the mean of the ceilings on either side of it, and the round with the median ratio gives
/// the figures. The capacity of a shared host drifts within a minute, so one drain against one pair
/// of ceilings varies from run to run.
async fn drain_rounds(target: Target<'_>, plan: Plan, label: &str) -> Result<Rounds, BoxError> {
    let mut rounds = Vec::new();
    let mut before = ceiling(target, plan.ceiling_messages).await?;
    let mut peak_rss_mib: f64 = 0.0;
    for round in 1..=plan.drain_rounds {
        let drain = with_db(async |db| drain_in_child(db, target, plan.drain, RelayChild::default()).await).await?;
        let after = ceiling(target, plan.ceiling_messages).await?;
        let ceiling = (before + after) / 2.0;
        let ratio = drain.rate / ceiling;
        comment(format_args!(
            "{label} round {round}: ceiling {ceiling:.1} msgs/s, drain {:.1} events/s, ratio {ratio:.3}",
            drain.rate
        ));
        peak_rss_mib = peak_rss_mib.max(drain.peak_rss_mib);
        rounds.push(Rounds { ratio, ceiling, rate: drain.rate, cpu: drain.cpu, peak_rss_mib: 0.0 });
        before = after;
    }
    rounds.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
    Ok(Rounds { peak_rss_mib, ..rounds[rounds.len() / 2] })
}

async fn drain_phase(target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    // 1 and 2.
    let rounds = drain_rounds(target, plan, "drain").await?;
    figure("broker_ceiling_msgs_per_s", Value::Rate(rounds.ceiling), "msgs/s");
    figure("relay_drain_backlog_events", Value::Count(plan.drain.events), "events");
    figure("relay_drain_events_per_s", Value::Rate(rounds.rate), "events/s");
    figure("relay_drain_ratio", Value::Ratio(rounds.ratio), "x");
    figure("relay_peak_rss_mib", Value::Mebibytes(rounds.peak_rss_mib), "MiB");
    rounds.cpu.print("relay", plan.drain.events);
    Ok(())
}

/// 5: phases 1 and 2 again with a quorum queue in place of the classic one (a quorum queue of one
/// node: the shared server), its ceiling measured on the same queue.
async fn quorum_phase(broker: &TestBroker, plan: Plan) -> Result<(), BoxError> {
    let mut quorum = lapin::types::FieldTable::default();
    quorum.insert("x-queue-type".into(), lapin::types::AMQPValue::LongString("quorum".into()));
    let (exchange, queue) = topology(broker, "bench.relay.quorum", quorum).await?;
    let target = Target { url: broker.url(), exchange: &exchange, queue: &queue, admin: broker.channel() };
    let rounds = drain_rounds(target, plan, "quorum drain").await?;
    figure("broker_ceiling_quorum_msgs_per_s", Value::Rate(rounds.ceiling), "msgs/s");
    figure("relay_drain_quorum_events_per_s", Value::Rate(rounds.rate), "events/s");
    figure("relay_drain_ratio_quorum", Value::Ratio(rounds.ratio), "x");
    rounds.cpu.print("relay_quorum", plan.drain.events);
    Ok(())
}

/// What the gauges cost, on request (`OUTBOX_BENCH_RELAY_PHASES=gauges`): drains with the gauges
/// off and with them read every second (ten times the default rate), alternating, each against the
/// ceilings on either side (the median ratio of each); then the latency at a steady load, gauges
/// off and every second, one after the other.
async fn gauges_phase(target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut before = ceiling(target, plan.ceiling_messages).await?;
    for round in 1..=plan.drain_rounds {
        for (i, interval_ms) in [0, 1_000].into_iter().enumerate() {
            let child = RelayChild { gauge_interval_ms: Some(interval_ms), sealed: false };
            let drain = with_db(async |db| drain_in_child(db, target, plan.drain, child).await).await?;
            let after = ceiling(target, plan.ceiling_messages).await?;
            let ratio = drain.rate / ((before + after) / 2.0);
            comment(format_args!("gauges round {round}, interval {interval_ms} ms (0: off): ratio {ratio:.3}"));
            ratios[i].push(ratio);
            before = after;
        }
    }
    for (name, mut r) in ["relay_drain_ratio_gauges_off", "relay_drain_ratio_gauges_every_1s"].into_iter().zip(ratios) {
        r.sort_by(f64::total_cmp);
        figure(name, Value::Ratio(r[r.len() / 2]), "x");
    }
    for (suffix, interval_ms) in [("gauges_off", 0), ("gauges_every_1s", 1_000)] {
        let latency = with_db(async |db| measure_latency(db, target, plan, Some(interval_ms)).await).await?;
        figure(&format!("relay_latency_p50_ms_{suffix}"), Value::Millis(latency.p50), "ms");
        figure(&format!("relay_latency_p99_ms_{suffix}"), Value::Millis(latency.p99), "ms");
    }
    Ok(())
}

/// What encryption at rest costs, on request (`OUTBOX_BENCH_RELAY_PHASES=sealed`): drains of
/// plain and of sealed payloads (the benchmark's key; the relay opens each before publishing),
/// alternating, each against the ceilings on either side; the median ratio of each.
async fn sealed_phase(target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut before = ceiling(target, plan.ceiling_messages).await?;
    for round in 1..=plan.drain_rounds {
        for (i, sealed) in [false, true].into_iter().enumerate() {
            let child = RelayChild { gauge_interval_ms: None, sealed };
            let drain = with_db(async |db| drain_in_child(db, target, plan.drain, child).await).await?;
            let after = ceiling(target, plan.ceiling_messages).await?;
            let ratio = drain.rate / ((before + after) / 2.0);
            comment(format_args!("sealed round {round}, sealed {sealed}: ratio {ratio:.3}"));
            ratios[i].push(ratio);
            before = after;
        }
    }
    for (name, mut r) in ["relay_drain_ratio_sealed_off", "relay_drain_ratio_sealed_on"].into_iter().zip(ratios) {
        r.sort_by(f64::total_cmp);
        figure(name, Value::Ratio(r[r.len() / 2]), "x");
    }
    Ok(())
}

async fn latency_phase(target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    // 3: latency at a steady load.
    let latency = with_db(async |db| measure_latency(db, target, plan, None).await).await?;
    figure("relay_latency_offered_events_per_s", Value::Rate(latency.offered), "events/s");
    figure("relay_latency_samples", Value::Count(latency.samples), "events");
    figure("relay_latency_p50_ms", Value::Millis(latency.p50), "ms");
    figure("relay_latency_p99_ms", Value::Millis(latency.p99), "ms");
    figure("relay_latency_max_ms", Value::Millis(latency.max), "ms");
    Ok(())
}

async fn backlog_phase(target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    // 4: a large backlog against a small one, the small one before and after the large one.
    let small_before = with_db(async |db| drain_in_process(db, target, plan.small).await).await?;
    let large = with_db(async |db| drain_in_process(db, target, plan.large).await).await?;
    let small_after = with_db(async |db| drain_in_process(db, target, plan.small).await).await?;
    let small = (small_before + small_after) / 2.0;
    comment(format_args!(
        "relay_backlog_1m_ratio: {} events against {} events, both over {} entities",
        plan.large.events, plan.small.events, plan.large.entities
    ));
    figure("relay_backlog_small_events_per_s", Value::Rate(small), "events/s");
    figure("relay_backlog_large_events_per_s", Value::Rate(large), "events/s");
    figure("relay_backlog_1m_ratio", Value::Ratio(large / small), "x");
    Ok(())
}
