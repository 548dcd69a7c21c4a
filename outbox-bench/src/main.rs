//! `outbox-bench`: benchmarks of the transactional outbox.
//!
//! ```text
//! cargo run --release -p outbox-bench -- producer           # full run, about two minutes
//! cargo run --release -p outbox-bench -- producer --quick   # smoke run, under a minute
//! cargo run --release -p outbox-bench -- relay              # full run, about four minutes
//! cargo run --release -p outbox-bench -- relay --quick      # smoke run, under a minute
//! cargo run --release -p outbox-bench -- consumer           # full run, two to four minutes
//! cargo run --release -p outbox-bench -- consumer --quick   # smoke run, under 20 seconds
//! cargo run --release -p outbox-bench -- fleet              # full run, about six minutes
//! cargo run --release -p outbox-bench -- fleet --quick      # smoke run, about a minute
//! cargo run --release -p outbox-bench -- fleet --latency-only --faulty-phases 6   # latency only
//! cargo run --release -p outbox-bench -- gauges             # full run, about five minutes
//! cargo run --release -p outbox-bench -- gauges --quick     # smoke run, under a minute
//! cargo run --release -p outbox-bench -- snapshot           # full run, about 105 minutes
//! cargo run --release -p outbox-bench -- snapshot --quick   # smoke run, about three minutes
//! cargo run --release -p outbox-bench -- snapshot --only relay|producer|inbox   # one part
//! ```
//!
//! - `producer`: what `Outbox::enqueue` adds to a business transaction ([`producer`]).
//! - `relay`: the relay's drain rate against raw confirmed publishing on the same queue, commit-to-
//!   arrival latency at a steady load, a large backlog against a small one, and the peak RSS of a
//!   relay process ([`relay`]). The relay process is this program again, run with the hidden
//!   command `relay-process`.
//! - `consumer`: the inbox's apply rate against a raw consumer on the same queue, the rate at which
//!   it drops duplicates, and the peak RSS of a consumer process ([`consumer`]), which is this
//!   program run with the hidden command `consumer-process`.
//! - `fleet`: one fleet of relays over many databases: the same backlog drained over 1, 10 and 50
//!   databases, the fleet process's RSS and connections, latency over the 50 ([`fleet`]).
//! - `gauges`: the backlog query behind the relays' gauges and `outbox status`, timed with
//!   1,000,000 pending rows and with 10,000,000 published rows plus 1,000 pending ([`gauges`]).
//! - `snapshot`: the relay's drain and steady load, the producer and the inbox, each without and
//!   with a snapshot held by another session, which keeps vacuum from removing dead row versions
//!   ([`snapshot`]).
//!
//! Every figure is printed on its own line as `figure: <name> = <value> <unit>`; every other line
//! of standard output starts with `#` (targets, per-run detail). Absolute figures drift on a
//! shared machine, so compare the ratios, which are measured within one run.
//!
//! Every wait has a deadline scaled to its work, several times what it should take and at least
//! 30 s ([`wait`]): on a stuck host a benchmark fails with what it waited for and what it saw
//! (`quorum phase: waited 30 s for ...; saw ...`), cleans up as below and exits non-zero.
//!
//! Each benchmark creates fresh databases of its own with the migrations applied
//! ([`outbox_testkit::TestDb`]) and drops them at the end; `relay`, `consumer` and `snapshot` also declare an
//! exchange and queues with a random suffix on RabbitMQ ([`outbox_testkit::TestBroker`]) and delete
//! them at the end. The broker is read from `OUTBOX_TEST_AMQP_URL`, else `AMQP_URL`, else
//! `amqp://guest:guest@127.0.0.1:5672/%2f`. The database server is read from
//! `OUTBOX_TEST_DATABASE_URL`, else `DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/test`;
//! the role needs `CREATEDB`, and `CHECKPOINT` between variants needs a superuser or
//! `pg_checkpoint` (when denied, the benchmark goes on without it).

mod amqp;
mod broker;
mod consumer;
mod counters;
mod cpu;
mod db;
mod error;
mod figure;
mod fleet;
mod gauges;
mod machine;
mod process;
mod producer;
mod relay;
mod sealed;
mod snapshot;
mod steal;
mod wait;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "outbox-bench", about = "Benchmarks of the transactional outbox")]
struct Cli {
    /// Shrink every size and duration for a smoke run under a minute.
    #[arg(long, global = true)]
    quick: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Cost of `Outbox::enqueue` in a business transaction, against a hand-written insert
    /// (8 concurrent clients).
    Producer,
    /// The relay: drain rate against the broker's ceiling, latency at 1,000 events/s, a backlog of
    /// 1,000,000 against 10,000 events, peak RSS of a relay process.
    Relay,
    /// Runs one relay with default settings until SIGTERM, SIGINT or the end of standard input
    /// (the relay process of the `relay` benchmark).
    #[command(hide = true)]
    RelayProcess(relay::ProcessArgs),
    /// The consumer: inbox apply rate against a raw consumer on the same queue, duplicate drop
    /// rate, peak RSS of a consumer process.
    Consumer,
    /// Runs an inbox consumer applying events to `shipments` until SIGTERM, SIGINT or the end of
    /// standard input (the consumer process of the `consumer` benchmark).
    #[command(hide = true)]
    ConsumerProcess(consumer::ProcessArgs),
    /// Many databases: one fleet process draining the same backlog over 1, 10 and 50 databases
    /// (rate, peak RSS, connections), and latency at 1,000 events/s over the 50.
    Fleet(fleet::Args),
    /// Runs a fleet of relays over the databases of a list until SIGTERM, SIGINT or the end of
    /// standard input (the process of the `fleet` benchmark).
    #[command(hide = true)]
    FleetProcess(fleet::ProcessArgs),
    /// The backlog query of the gauges: with 1,000,000 pending rows, and with 10,000,000 published
    /// rows plus 1,000 pending.
    Gauges,
    /// The relay, the producer and the inbox without and with a snapshot held by another session:
    /// drain, steady load, enqueue and apply rates after a long run.
    Snapshot(snapshot::Args),
}

/// Runs the command; a failure is printed to standard error as one line (`outbox-bench: <error>`)
/// and the exit status is 1.
#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Producer => producer::run(producer::Plan::new(cli.quick)).await,
        Command::Relay => relay::run(relay::Plan::new(cli.quick)).await,
        Command::RelayProcess(args) => relay::process(args).await,
        Command::Consumer => consumer::run(consumer::Plan::new(cli.quick)).await,
        Command::ConsumerProcess(args) => consumer::process(args).await,
        Command::Fleet(args) => fleet::run(fleet::Plan::new(&args, cli.quick)).await,
        Command::FleetProcess(args) => fleet::process(args).await,
        Command::Gauges => gauges::run(gauges::Plan::new(cli.quick)).await,
        Command::Snapshot(args) => snapshot::run(args, cli.quick).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outbox-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
