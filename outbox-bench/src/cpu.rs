//! CPU time spent per 1,000 events, split by where it was spent: the measured process (the relay or
//! the consumer), the PostgreSQL backends serving it, and the broker. Unlike a rate, this figure
//! does not move with what else the host runs: a step that lowers it is real even when the rate
//! hides it in noise.
//!
//! Read from `/proc/<pid>/stat` (user plus system time, in clock ticks) at the start and the end of
//! a phase. The backends are found in `pg_stat_activity` by their `application_name`; a backend that
//! appears during the phase counts from zero, one that ends during it is not counted (the pools
//! measured keep their connections). The broker is every `beam.smp` process of the host running
//! RabbitMQ (`-s rabbit`).

use std::collections::HashMap;

use sqlx::PgPool;

use crate::error::BoxError;
use crate::figure::{Value, figure};
use crate::wait::{FLOOR, within};

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on x86 and arm64).
const TICKS_PER_SECOND: f64 = 100.0;

/// Where CPU time is read.
#[derive(Debug, Clone)]
pub(crate) struct Meter {
    /// The measured process.
    pid: u32,
    /// `application_name` of its database connections.
    application_name: String,
}

/// CPU ticks of every process measured, at one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sample {
    process: u64,
    backends: HashMap<u32, u64>,
    broker: HashMap<u32, u64>,
}

/// CPU milliseconds spent during a phase, by part.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Spent {
    pub(crate) process: f64,
    pub(crate) postgres: f64,
    pub(crate) broker: f64,
}

impl std::ops::Add for Spent {
    type Output = Spent;

    /// The CPU of two phases together.
    fn add(self, other: Spent) -> Spent {
        Spent {
            process: self.process + other.process,
            postgres: self.postgres + other.postgres,
            broker: self.broker + other.broker,
        }
    }
}

impl Meter {
    pub(crate) fn new(pid: u32, application_name: impl Into<String>) -> Self {
        Self { pid, application_name: application_name.into() }
    }

    /// Reads every part now; `pool` finds the backends.
    pub(crate) async fn sample(&self, pool: &PgPool) -> Result<Sample, BoxError> {
        let query = sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE application_name = $1")
            .bind(&self.application_name)
            .fetch_all(pool);
        let pids: Vec<i32> = within("the database backends of the measured process", FLOOR, query).await?;
        let backends =
            pids.into_iter().filter_map(|p| u32::try_from(p).ok()).filter_map(|p| Some((p, ticks(p)?))).collect();
        let broker = broker_pids().into_iter().filter_map(|p| Some((p, ticks(p)?))).collect();
        let process = ticks(self.pid).ok_or_else(|| format!("cannot read /proc/{}/stat", self.pid))?;
        Ok(Sample { process, backends, broker })
    }
}

impl Sample {
    /// What was spent from `self` (the start) to `end`.
    pub(crate) fn spent_until(&self, end: &Sample) -> Spent {
        let grown = |start: &HashMap<u32, u64>, end: &HashMap<u32, u64>| -> u64 {
            end.iter().map(|(pid, t)| t.saturating_sub(start.get(pid).copied().unwrap_or(0))).sum()
        };
        let millis = |t: u64| t as f64 * 1000.0 / TICKS_PER_SECOND;
        Spent {
            process: millis(end.process.saturating_sub(self.process)),
            postgres: millis(grown(&self.backends, &end.backends)),
            broker: millis(grown(&self.broker, &end.broker)),
        }
    }
}

impl Spent {
    /// Prints `<prefix>_cpu_ms_per_1k_events{part}` for each part and the total, for `events`.
    pub(crate) fn print(&self, prefix: &str, events: u64) {
        let per_1k = |ms: f64| Value::Millis(ms * 1000.0 / events.max(1) as f64);
        let name = format!("{prefix}_cpu_ms_per_1k_events");
        let total = self.process + self.postgres + self.broker;
        for (part, ms) in
            [("process", self.process), ("postgres", self.postgres), ("broker", self.broker), ("total", total)]
        {
            figure(&format!("{name}{{{part}}}"), per_1k(ms), "ms");
        }
    }
}

/// User plus system ticks of `pid`, if it exists.
fn ticks(pid: u32) -> Option<u64> {
    parse_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Fields 14 and 15 (utime, stime) of a `/proc/<pid>/stat` line. The second field, the command
/// name in parentheses, may hold spaces: the fields are counted after its closing parenthesis.
fn parse_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// The pids of the host's RabbitMQ nodes (`beam.smp` started with `-s rabbit`).
fn broker_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmd| {
                let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
                args.first().is_some_and(|a| a.ends_with(b"beam.smp"))
                    && args.windows(2).any(|w| w[0] == b"-s" && w[1] == b"rabbit")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_user_plus_system_after_the_command_name() {
        let stat = "4242 (tokio runtime) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 56 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_ticks(stat), Some(1290));
        assert_eq!(parse_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn spent_counts_backends_that_appeared_from_zero() {
        let start = Sample { process: 100, backends: HashMap::from([(1, 50)]), broker: HashMap::from([(9, 10)]) };
        let end =
            Sample { process: 300, backends: HashMap::from([(1, 80), (2, 20)]), broker: HashMap::from([(9, 60)]) };
        let spent = start.spent_until(&end);
        assert_eq!(spent, Spent { process: 2000.0, postgres: 500.0, broker: 500.0 });
    }

    #[test]
    fn this_process_has_ticks() {
        assert!(ticks(std::process::id()).is_some());
    }
}
