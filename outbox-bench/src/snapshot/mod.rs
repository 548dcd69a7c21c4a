//! The snapshot benchmark (issue 28): what a snapshot held by another session costs the relay, the
//! producer and the inbox. In production a long report, a `pg_dump` or a session left idle in a
//! transaction holds an old snapshot; until it ends, vacuum and pruning cannot remove the row
//! versions that became dead after it began, and the queue scans, the per-entity counters and the
//! inbox's rows walk ever more of them.
//!
//! ```text
//! cargo run --release -p outbox-bench -- snapshot                   # full run, about 105 minutes
//! cargo run --release -p outbox-bench -- snapshot --only relay      # the relay alone, about 22 minutes
//! cargo run --release -p outbox-bench -- snapshot --quick           # smoke run, about three minutes
//! cargo run --release -p outbox-bench -- snapshot --steady-secs 60 --load-secs 60
//! ```
//!
//! Every run is made twice, `free` (nothing holds vacuum back) and `held`: another connection to
//! the run's database runs `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM
//! outbox_events;` before the run writes anything, stays idle in that transaction for the whole
//! run, and commits at its end ([`hold`]); the run fails if the server no longer counted the
//! snapshot by then. Every run has a fresh database of its own ([`outbox_testkit::TestDb`]); the
//! broker's exchanges and queues have a random suffix and are deleted at the end. Each ratio is held
//! ÷ free, both measured in the same run of the command. The host's CPU steal is printed for every
//! run and sample, and for the whole command as `snapshot_cpu_steal`; so is the age of the oldest
//! transaction with an xid anywhere on the server ([`horizon`]), which holds vacuum back in a free
//! run too. Apart from the drains' `VACUUM ANALYZE` the runs leave vacuum and analyze to the
//! server's autovacuum (its setting is printed first): with it off, a free run has page pruning
//! only, and no table is ever analyzed.
//!
//! Parts, in order (`--only relay|producer|inbox` runs one):
//!
//! 1. `relay`, drain ([`drain`]): a backlog of 200,000 events over 1,000 entities (20,000 with
//!    `--quick`) written with `enqueue_many`, vacuumed (`VACUUM ANALYZE`, `CHECKPOINT`), drained by
//!    the relay benchmark's relay process with default settings. The held snapshot begins before
//!    the backlog is written. Figures: `snapshot_drain_free`, `snapshot_drain_held` (events/s),
//!    `snapshot_drain_ratio`, and the CPU per 1,000 events of each drain.
//! 2. `relay`, steady ([`steady`]): writers offer 16 events per transaction at half the free drain
//!    rate over 1,000 entities for `--steady-secs` (600 s; 20 s with `--quick`) to a relay
//!    in-process with default settings; the snapshot is held from the start of the run. The backlog
//!    (events committed minus events the relay recorded as published, both counted in this process:
//!    no query of the history) is read every 100 ms; every 5 s a `#` line gives it with the relay's
//!    commit-to-confirm and claim times. Figures: `snapshot_steady_target` (half the free drain),
//!    `snapshot_steady_offered` and `snapshot_steady_offered_held` (events/s the writers committed
//!    in the free and the held run: below the target where the host cannot commit that many
//!    events beside the relay, which a `#` line then says),
//!    `snapshot_steady_backlog_max_{free,held}` (events), `snapshot_steady_backlog_max_held_seconds`
//!    (the held maximum ÷ the held run's offered rate; target below 1 s),
//!    `snapshot_steady_p{50,99}_{free,held}` (commit to confirm, ms, over the whole run) and
//!    `snapshot_steady_p99_ratio`.
//! 3. `producer` ([`enqueue`]): 8 writers commit one `Outbox::enqueue` per transaction as fast as
//!    they can, each event to a random one of 10 hot entities (`hot`) or of 1,000 (`many`), for
//!    `--load-secs` (600 s; 10 s with `--quick`). A held snapshot costs more the longer it is held,
//!    so each figure is the rate over the last minute of its run (the last fifth of a run shorter
//!    than five minutes: 2 s with `--quick`); a `#` line gives it beside the rate over the first
//!    window. Figures: `snapshot_enqueue_{hot,many}_{free,held}`
//!    (tps) and `snapshot_enqueue_{hot,many}_ratio`.
//! 4. `inbox` ([`inbox`]): the consumer benchmark's consumer process (runner defaults, the inbox
//!    middleware, a handler that inserts one row per event and updates none) applies a gapless stream over 10 or 1,000 entities for
//!    `--load-secs`, the rate taken as in part 3 from its count of handled deliveries. A queue that
//!    lasts ten minutes would hold millions of messages, so the queue is kept full instead: 40,000
//!    messages are published before the consumer starts, and another 20,000 whenever fewer than
//!    40,000 are ready ([`feed`]), so the consumer does not wait for work (a `#` line says the
//!    fewest ready it saw, and how many readings found the queue empty, if any did). Figures:
//!    `snapshot_inbox_{hot,many}_{free,held}` (events/s) and `snapshot_inbox_{hot,many}_ratio`.
//!
//! The full run takes about 105 minutes: the drains a few minutes, the steady runs 2 × 10, the
//! producer and the inbox 4 × 10 each.
//!
//! This file holds the command: its arguments and the order of the parts. The rest, one concern per
//! file: the sizes and durations (`plan`), the held snapshot (`hold`), the watch of the server's
//! oldest transaction (`horizon`), the drains (`drain`), the steady runs (`steady`) and their
//! intervals (`interval`), the writers of parts 2 and 3 (`writers`), a count sampled over a run
//! (`series`), the free-and-held runs of parts 3 and 4 over two entity sets (`compare`), the
//! producer part (`enqueue`), the inbox part (`inbox`) and the feeder of its queue (`feed`).

mod compare;
mod drain;
mod enqueue;
mod feed;
mod hold;
mod horizon;
mod inbox;
mod interval;
mod plan;
mod series;
mod steady;
mod writers;

use outbox_testkit::TestBroker;

use self::plan::Plan;
use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::relay::{Target, topology};
use crate::steal::Steal;
use crate::wait::in_phase;

/// Arguments of the `snapshot` command.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Run one part only (all three by default).
    #[arg(long, value_enum)]
    only: Option<Part>,
    /// Seconds of each steady relay run [default: 600; 20 with --quick].
    #[arg(long)]
    steady_secs: Option<u64>,
    /// Seconds of each producer and inbox run [default: 600; 10 with --quick].
    #[arg(long)]
    load_secs: Option<u64>,
}

/// A part of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Part {
    /// The drain and the steady load of the relay.
    Relay,
    /// `Outbox::enqueue` on hot and on many entities.
    Producer,
    /// The inbox's apply rate on hot and on many entities.
    Inbox,
}

/// Runs the benchmark and prints its figures.
pub(crate) async fn run(args: Args, quick: bool) -> Result<(), BoxError> {
    let plan = Plan::new(quick, args.steady_secs, args.load_secs);
    let steal = Steal::start();
    with_db(async |db| {
        crate::machine::describe(db.pool()).await;
        Ok(())
    })
    .await?;
    crate::broker::with_broker(async |broker| parts(broker, plan, args.only).await).await?;
    if let Some(pct) = steal.percent() {
        figure("snapshot_cpu_steal", Value::Percent(pct), "%");
    }
    Ok(())
}

/// Runs the parts `only` names (all when `None`), in order.
async fn parts(broker: &TestBroker, plan: Plan, only: Option<Part>) -> Result<(), BoxError> {
    let wanted = |part| only.is_none_or(|only| only == part);
    if wanted(Part::Relay) {
        relay(broker, plan).await?;
    }
    if wanted(Part::Producer) {
        in_phase("producer", enqueue::enqueue(plan)).await?;
    }
    if wanted(Part::Inbox) {
        in_phase("inbox", inbox::inbox(broker, plan)).await?;
    }
    Ok(())
}

/// Parts 1 and 2 on one exchange and queue: the drains, then the steady load at half the free
/// drain rate.
async fn relay(broker: &TestBroker, plan: Plan) -> Result<(), BoxError> {
    let (exchange, queue) = topology(broker, "bench.snapshot", lapin::types::FieldTable::default()).await?;
    let target = Target { url: broker.url(), exchange: &exchange, queue: &queue, admin: broker.channel() };
    comment(format_args!(
        "relay: a backlog of {} events over {} entities, drained by one relay process",
        plan.drain.events, plan.drain.entities
    ));
    let free = in_phase("drain", drain::drain(target, plan)).await?;
    in_phase("steady", steady::steady(target, plan, free)).await
}
