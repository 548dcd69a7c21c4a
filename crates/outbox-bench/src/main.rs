//! `outbox-bench`: benchmarks of the transactional outbox.
//!
//! ```text
//! cargo run --release -p outbox-bench -- producer           # full run, about two minutes
//! cargo run --release -p outbox-bench -- producer --quick   # smoke run, under a minute
//! ```
//!
//! Every figure is printed on its own line as `figure: <name> = <value> <unit>`; every other line
//! of standard output starts with `#` (targets, per-run detail). Absolute figures drift on a
//! shared machine, so compare the ratios, which are measured within one run.
//!
//! Each benchmark creates a fresh database of its own with the migrations applied
//! ([`outbox_testkit::TestDb`]) and drops it at the end. The server is read from
//! `OUTBOX_TEST_DATABASE_URL`, else `DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/test`;
//! the role needs `CREATEDB`, and `CHECKPOINT` between variants needs a superuser or
//! `pg_checkpoint` (when denied, the benchmark goes on without it).

mod figure;
mod producer;

use std::error::Error;

use clap::{Parser, Subcommand};

/// The error type of the benchmarks: anything, as long as it can cross tasks.
type BoxError = Box<dyn Error + Send + Sync>;

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
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let cli = Cli::parse();
    match cli.command {
        Command::Producer => producer::run(producer::Plan::new(cli.quick)).await,
    }
}
