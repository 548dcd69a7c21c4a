//! The sizes of a run of `outbox-bench fleet`, and its arguments.

use std::time::Duration;

/// Databases the benchmark creates.
pub(super) const DATABASES: usize = 50;

/// Arguments of the `fleet` command.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Latency phases with the faulty databases listed, each between two without.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=20))]
    faulty_phases: u16,
    /// Only the latency phases: no drains.
    #[arg(long)]
    latency_only: bool,
}

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(super) backlog: u64,
    pub(super) entities: u64,
    pub(super) warmup: Duration,
    pub(super) window: Duration,
    pub(super) faulty_phases: usize,
    pub(super) latency_only: bool,
}

impl Plan {
    pub(crate) fn new(args: &Args, quick: bool) -> Self {
        let (faulty_phases, latency_only) = (usize::from(args.faulty_phases), args.latency_only);
        let (backlog, entities, warmup, window) = if quick {
            (10_000, 500, Duration::from_secs(3), Duration::from_secs(5))
        } else {
            (100_000, 1_000, Duration::from_secs(5), Duration::from_secs(30))
        };
        Self { backlog, entities, warmup, window, faulty_phases, latency_only }
    }
}
