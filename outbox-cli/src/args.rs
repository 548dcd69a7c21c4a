//! The command line: commands, flags, and the value parsers that refuse every number the commands
//! cannot use (a usage error, exit status 2) instead of clamping it or panicking on it later.
//!
//! Self-contained (clap and std only): the flag tests include this file to walk the command.

use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use outbox_relayer::defaults;

// A path that reads the same whether this file is `crate::args` or included by a test with `#[path]`.
#[path = "args/list.rs"]
mod list;
pub(crate) use list::DatabaseList;
#[path = "args/repair.rs"]
mod repair;
pub(crate) use repair::{CleanupArgs, EventsCommand, InboxCommand, QuarantineCommand, ReconcileArgs};
#[path = "args/grant.rs"]
mod grant;
pub(crate) use grant::GrantArgs;
#[path = "args/values.rs"]
mod values;
pub(crate) use values::{MAX_BATCH_SIZE, MAX_PARTITIONS};
#[cfg(test)]
use values::{MAX_DURATION, MIN_DURATION};
use values::{in_bounds, seconds};
#[path = "args/replay.rs"]
pub(crate) mod replay;
pub(crate) use replay::ReplayCommand;

/// At most 1,000,000 messages awaiting confirms: the relay keeps each in memory until its confirm.
pub(crate) const MAX_CONFIRM_WINDOW: u64 = 1_000_000;
/// At most 10^12 rows between vacuums: more than any table will publish, so a larger value is a
/// typo (0 is the way to say "never").
pub(crate) const MAX_VACUUM_AFTER_ROWS: u64 = 1_000_000_000_000;

#[derive(Debug, Parser)]
#[command(name = "outbox", version, about = "Operate the transactional outbox")]
pub(crate) struct Cli {
    /// PostgreSQL connection URL (`postgres://user:password@host:port/database`).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub(crate) database_url: Option<String>,
    /// Seconds to keep trying to reach the database before `migrate` and `status` give up; for
    /// `relay`, the longest one connection attempt may take (it retries until the database
    /// answers). At most one day.
    #[arg(long, default_value = "5", value_parser = seconds, global = true)]
    pub(crate) connect_timeout_secs: Duration,
    /// How log lines are written to standard error: `text` for people, `json` (one object per
    /// line) for a log pipeline.
    #[arg(long, env = "OUTBOX_LOG_FORMAT", value_enum, default_value = "text", global = true)]
    pub(crate) log_format: LogFormat,
    /// Many databases: every command works on each listed one in turn (in place of
    /// --database-url) and reports per database and a total.
    #[command(flatten)]
    pub(crate) list: DatabaseList,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the outbox and inbox tables (tracked in `_outbox_migrations` and
    /// `_inbox_migrations`, apart from the application's own `_sqlx_migrations`).
    Migrate {
        /// Only the outbox (producer) tables.
        #[arg(long, conflicts_with = "inbox_only")]
        outbox_only: bool,
        /// Only the inbox (consumer) tables.
        #[arg(long)]
        inbox_only: bool,
    },
    /// Print the state of the outbox: what waits and since when, what is held or quarantined, what
    /// was published lately, which entities are behind, which relays hold claims, and each inbox
    /// consumer's gaps and failed events. Cheap on a big table: every figure is index-served.
    Status {
        /// One JSON object on standard output instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Publish committed outbox rows to RabbitMQ until SIGTERM or SIGINT.
    Relay(Box<RelayArgs>),
    /// Look at events: one event's record, or an entity's events.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// The quarantine: list, show, retry or skip the events that could not be published.
    Quarantine {
        #[command(subcommand)]
        command: QuarantineCommand,
    },
    /// A consumer's inbox: its gaps and failed events, and their repair by the running consumer.
    Inbox {
        #[command(subcommand)]
        command: InboxCommand,
    },
    /// Send published events again, as recorded jobs (to a consumer that joined late, lost its
    /// database or had a bug): start (with --dry-run to count), list, show, pause, resume, cancel.
    Replay {
        #[command(subcommand)]
        command: ReplayCommand,
    },
    /// Delete old published outbox rows (and, with --inbox, a consumer's old processed event ids)
    /// in bounded batches, with progress; never a waiting, claimed, held, quarantined or parked row.
    Cleanup(CleanupArgs),
    /// Prove that every business change has its event: your query of business changes against
    /// the outbox (and a consumer's inbox); exit status 1 when a change has no event.
    Reconcile(ReconcileArgs),
    /// Print the SQL that gives the relay, the consumers and the producing application roles
    /// with only the privileges they need (migrations/roles.sql with the names filled in), or
    /// run it with --apply.
    Grant(GrantArgs),
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One readable line per event, colored on a terminal.
    Text,
    /// One JSON object per line, with the span fields.
    Json,
}

/// Exchange types the relay can declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExchangeKindArg {
    /// Routing keys matched against binding patterns.
    Topic,
    /// Routing keys matched exactly.
    Direct,
    /// Every bound queue gets every message.
    Fanout,
    /// Matched on message headers.
    Headers,
}

/// The type of the queues `outbox relay --declare-queue` declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum QueueTypeArg {
    /// A queue on one node.
    Classic,
    /// A replicated queue (a cluster).
    Quorum,
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RelayArgs {
    /// RabbitMQ URL (`amqp://user:password@host:port/vhost` or `amqps://`). For a cluster, give
    /// each node: the flag repeated, or the URLs separated by commas (in `AMQP_URL` too); when the
    /// connection drops, the relay connects to the next node that answers.
    #[arg(long, env = "AMQP_URL", hide_env_values = true, value_delimiter = ',', required = true)]
    pub(crate) amqp_url: Vec<String>,
    /// Exchange to publish to.
    #[arg(long, default_value = defaults::EXCHANGE)]
    pub(crate) exchange: String,
    /// Exchange type used when declaring it.
    #[arg(long, value_enum, default_value_t = ExchangeKindArg::Topic)]
    pub(crate) exchange_kind: ExchangeKindArg,
    /// Assume the exchange exists instead of declaring it.
    #[arg(long, conflicts_with = "declare_queue")]
    pub(crate) no_declare_exchange: bool,
    /// Also declare the consumer's queue on every connection, bound to the exchange (a topic
    /// exchange) with `#`, with its dead letters `<QUEUE>.dlx` and `<QUEUE>.dead`; with
    /// --partitions, the partition queues `<QUEUE>.<n>`. The same topology a consumer declares
    /// with `InboxRunnerBuilder::topology`, so either may start first.
    #[arg(long, value_name = "QUEUE")]
    pub(crate) declare_queue: Option<String>,
    /// With --declare-queue (one queue, not partitions): bind it with this routing-key pattern in
    /// place of `#` (repeat the flag for several, as the consumer's `Topology::bindings`).
    #[arg(long, value_name = "KEY", requires = "declare_queue", conflicts_with = "partitions")]
    pub(crate) bind: Vec<String>,
    /// The type of the queues --declare-queue declares: `classic` (one node) or `quorum`
    /// (replicated, for a cluster).
    #[arg(long, value_enum, default_value_t = QueueTypeArg::Classic, requires = "declare_queue")]
    pub(crate) queue_type: QueueTypeArg,
    /// Route by a stable hash of the entity key into this many partitions
    /// (routing key `partition.<n>`) instead of by event type. 1 to 10,000.
    #[arg(long, value_parser = RangedU64ValueParser::<u32>::new().range(1..=MAX_PARTITIONS))]
    pub(crate) partitions: Option<u32>,
    /// Rows per claim. 1 to 100,000.
    #[arg(long, default_value_t = defaults::BATCH_SIZE, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_BATCH_SIZE))]
    pub(crate) batch_size: usize,
    /// Messages awaiting confirms at once. 1 to 1,000,000.
    #[arg(long, default_value_t = defaults::CONFIRM_WINDOW, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_CONFIRM_WINDOW))]
    pub(crate) confirm_window: usize,
    /// Claim lease in seconds (a crashed relay's rows are taken over after it). At most one day.
    #[arg(long, default_value = "30", value_parser = seconds)]
    pub(crate) lease_secs: Duration,
    /// Polling interval in milliseconds: a safety net behind LISTEN/NOTIFY for one database
    /// (default 1000); how soon an idle database's new events are found when relaying many (they
    /// poll, default 250). 1 to 86,400,000 (a day).
    #[arg(long, value_parser = milliseconds)]
    pub(crate) poll_interval_ms: Option<Duration>,
    /// Seconds to wait for a batch's confirms; shorter than --lease-secs.
    #[arg(long, default_value = "10", value_parser = seconds)]
    pub(crate) confirm_timeout_secs: Duration,
    /// Seconds a graceful shutdown may take. At most one day.
    #[arg(long, default_value = "10", value_parser = seconds)]
    pub(crate) shutdown_deadline_secs: Duration,
    /// Vacuum the outbox table after this many rows published by this relay (0: never, leave it
    /// to autovacuum). At most 10^12.
    #[arg(long, default_value_t = defaults::VACUUM_AFTER_ROWS, value_parser = RangedU64ValueParser::<u64>::new().range(0..=MAX_VACUUM_AFTER_ROWS))]
    pub(crate) vacuum_after_rows: u64,
    /// AMQP `app_id` on every message.
    #[arg(long)]
    pub(crate) app_id: Option<String>,
    /// Name recorded as the owner of this relay's claims.
    #[arg(long)]
    pub(crate) relay_id: Option<String>,
    /// Seconds between two reads of the backlog into the gauges (outbox_events_waiting, ...).
    /// At most one day.
    #[arg(long, default_value = "10", value_parser = seconds)]
    pub(crate) gauge_interval_secs: Duration,
    /// Seconds between two summary lines at info (`outbox.summary`: published, failed by kind,
    /// taken over, waiting, oldest age). At most one day.
    #[arg(long, default_value = "60", value_parser = seconds)]
    pub(crate) summary_interval_secs: Duration,
    /// Delete outbox rows published longer ago than this, every minute, in bounded batches (`7d`,
    /// `12h`, ...). Every relay may run it at once.
    #[arg(long, default_value = "7d", value_parser = repair::age)]
    pub(crate) retention: Duration,
    /// Clear the payload of rows published longer ago than this (`1d`, ...), keeping the row until
    /// --retention deletes it; shorter than --retention. Off unless given.
    #[arg(long, value_parser = repair::age)]
    pub(crate) scrub_payload_after: Option<Duration>,
    /// Publish sealed payloads sealed (end-to-end encryption; consumers open them), with the key
    /// id in the header x-outbox-payload-key. Without it, the relay opens them with the keys in
    /// OUTBOX_PAYLOAD_KEYS.
    #[arg(long)]
    pub(crate) end_to_end: bool,
    /// Run no retention in this relay (another relay or `outbox cleanup` does it).
    #[arg(long)]
    pub(crate) no_retention: bool,
    /// Serve /metrics (Prometheus text format), /healthz and /readyz on this address, for example
    /// 127.0.0.1:9464. Off unless given, so that several relays can run on one host.
    #[arg(long, env = "OUTBOX_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub(crate) fleet: FleetArgs,
}

/// The databases of `outbox relay` when it relays many.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FleetArgs {
    /// The database (by NAME) in which the relay processes of the fleet find each other; every
    /// process must name the same one. Defaults to the first listed (the first --database, else
    /// the file's first line).
    #[arg(long, value_name = "NAME")]
    pub(crate) fleet_database: Option<String>,
    /// Connections each database's relay opens at most when relaying many; they close after 10 s
    /// unused. 1 to 100.
    #[arg(long, default_value_t = 1, value_parser = RangedU64ValueParser::<u32>::new().range(1..=100))]
    pub(crate) connections_per_database: u32,
}

impl Cli {
    /// Parses `args` and checks the rules between flags.
    ///
    /// # Errors
    /// A clap error: help or version to print, or a usage error.
    pub(crate) fn parse_checked<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Self::command().try_get_matches_from(args)?;
        let cli = Self::from_arg_matches(&matches)?;
        cli.check()?;
        let given = matches!(matches.value_source("database_url"), Some(clap::parser::ValueSource::CommandLine));
        if cli.list.is_given() && given {
            let message = "--database-url names one database: give the others with --database or --databases-file, \
                 or leave --database and --databases-file out";
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        Ok(cli)
    }

    /// The rules between flags that clap cannot express.
    fn check(&self) -> Result<(), clap::Error> {
        if !self.list.only.is_empty() && !self.list.is_given() {
            let message = "--only picks among the databases of --database or --databases-file: give them";
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        if let Some(message) = self.refused_with_a_list() {
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        if !self.list.only.is_empty() && matches!(self.command, Command::Relay(_)) {
            let message =
                "--only is not for `outbox relay`, whose processes must share one list: give it a file of its own";
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        if let Command::Relay(relay) = &self.command
            && relay.declare_queue.is_some()
            && relay.exchange_kind != ExchangeKindArg::Topic
        {
            let message =
                "--declare-queue binds to a topic exchange: drop --exchange-kind, or declare the queues yourself";
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        if let Command::Relay(relay) = &self.command
            && relay.confirm_timeout_secs >= relay.lease_secs
        {
            let message = format!(
                "--confirm-timeout-secs ({} s) must be shorter than --lease-secs ({} s): \
                 a batch's claim must outlive the wait for its confirms",
                relay.confirm_timeout_secs.as_secs_f64(),
                relay.lease_secs.as_secs_f64()
            );
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        Ok(())
    }
}

impl Cli {
    /// Why the command cannot take the list of databases, if it cannot.
    fn refused_with_a_list(&self) -> Option<&'static str> {
        if !self.list.is_given() {
            return None;
        }
        match &self.command {
            Command::Grant(grant) if !grant.apply => {
                Some("`outbox grant` prints the SQL for any database: give --apply to run it in each listed one")
            }
            _ => None,
        }
    }
}

/// A clap error as one line: the message up to clap's first blank line (the usage and the
/// "For more information" hint dropped), its lines joined.
pub(crate) fn one_line(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let first = rendered.split("\n\n").next().unwrap_or_default();
    first.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// A whole number of milliseconds between 1 ms and one day (`values::MIN_DURATION`, `MAX_DURATION`).
fn milliseconds(text: &str) -> Result<Duration, String> {
    let ms: u64 = text.trim().parse().map_err(|_| "expected a whole number of milliseconds".to_owned())?;
    // Exact up to 2^53; anything that large is refused as over a day anyway.
    in_bounds(ms as f64, "milliseconds", 0.001)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(extra: &[&str]) -> Result<Cli, clap::Error> {
        let mut args = vec!["outbox", "relay", "--amqp-url", "amqp://localhost"];
        args.extend_from_slice(extra);
        Cli::parse_checked(args)
    }

    fn relay_args(extra: &[&str]) -> RelayArgs {
        match relay(extra).map(|cli| cli.command) {
            Ok(Command::Relay(args)) => *args,
            other => panic!("expected relay arguments, got {other:?}"),
        }
    }

    #[test]
    fn the_command_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The duration flags' defaults are written as text for clap: they must say what the
    /// library's defaults say.
    #[test]
    fn defaults_are_the_librarys() {
        let args = relay_args(&[]);
        assert_eq!(args.lease_secs, defaults::LEASE);
        assert_eq!(args.confirm_timeout_secs, defaults::CONFIRM_TIMEOUT);
        assert_eq!(args.shutdown_deadline_secs, defaults::SHUTDOWN_DEADLINE);
        assert_eq!(args.poll_interval_ms, None, "the relay's default, {:?}", defaults::POLL_INTERVAL);
        assert_eq!(args.exchange, defaults::EXCHANGE);
        assert_eq!(args.gauge_interval_secs, defaults::GAUGE_INTERVAL);
        assert_eq!(args.summary_interval_secs, defaults::SUMMARY_INTERVAL);
        let counts = (args.batch_size, args.confirm_window, args.vacuum_after_rows);
        assert_eq!(counts, (defaults::BATCH_SIZE, defaults::CONFIRM_WINDOW, defaults::VACUUM_AFTER_ROWS));
        assert_eq!(args.partitions, None);
        assert_eq!(args.exchange_kind, ExchangeKindArg::Topic);
        let cli = Cli::parse_checked(["outbox", "status"]).expect("status");
        assert_eq!(cli.connect_timeout_secs, Duration::from_secs(5));
    }

    #[test]
    fn durations_take_decimals_and_stay_within_a_day() {
        assert_eq!(seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(seconds("86400"), Ok(MAX_DURATION));
        assert_eq!(seconds("0.001"), Ok(MIN_DURATION));
        for bad in ["0", "-0", "-1", "nan", "NaN", "inf", "-inf", "infinity", "1e30", "86400.5", "0.0001", "abc", ""] {
            assert!(seconds(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(milliseconds("1"), Ok(Duration::from_millis(1)));
        assert_eq!(milliseconds("86400000"), Ok(MAX_DURATION));
        for bad in ["0", "-1", "1.5", "nan", "86400001", "18446744073709551615", "abc"] {
            assert!(milliseconds(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn counts_are_refused_outside_their_range() {
        assert_eq!(relay_args(&["--partitions", "10000"]).partitions, Some(10_000));
        assert_eq!(relay_args(&["--batch-size", "1"]).batch_size, 1);
        assert_eq!(relay_args(&["--confirm-window", "1000000"]).confirm_window, 1_000_000);
        for (flag, bad) in [
            ("--partitions", "0"),
            ("--partitions", "10001"),
            ("--batch-size", "0"),
            ("--batch-size", "100001"),
            ("--confirm-window", "0"),
            ("--confirm-window", "1000001"),
            ("--vacuum-after-rows", "1000000000001"),
        ] {
            let error = relay(&[&format!("{flag}={bad}")]).expect_err(flag);
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{flag}={bad}");
        }
    }

    #[test]
    fn zero_vacuum_rows_leaves_it_to_autovacuum() {
        assert_eq!(relay_args(&["--vacuum-after-rows", "0"]).vacuum_after_rows, 0);
    }

    #[test]
    fn the_confirm_timeout_must_be_shorter_than_the_lease() {
        assert!(relay(&["--lease-secs", "2", "--confirm-timeout-secs", "1.5"]).is_ok());
        for (lease, timeout) in [("2", "2"), ("2", "3"), ("30", "86400")] {
            let error = relay(&["--lease-secs", lease, "--confirm-timeout-secs", timeout]).expect_err(lease);
            assert_eq!(error.kind(), ErrorKind::ArgumentConflict);
            assert_eq!(error.exit_code(), 2);
            let line = one_line(&error);
            assert!(line.starts_with("error: --confirm-timeout-secs"), "{line}");
        }
    }

    #[test]
    fn usage_errors_fit_on_one_line() {
        let missing = Cli::parse_checked(["outbox", "relay"]);
        // AMQP_URL may be set in the environment of the test run; only check when it is not.
        if std::env::var_os("AMQP_URL").is_none() {
            let line = one_line(&missing.expect_err("no AMQP URL"));
            assert!(
                line.starts_with("error: the following required arguments were not provided: --amqp-url"),
                "{line}"
            );
        }
        let line = one_line(&relay(&["--lease-secs", "nan"]).expect_err("nan"));
        assert!(!line.contains('\n'));
        assert!(line.starts_with("error: invalid value 'nan' for '--lease-secs"), "{line}");
    }

    /// Every flag of every `outbox` command (clap's command tree, walked) appears in
    /// docs/configuration.md as `--flag`, so the reference cannot fall behind the binary.
    #[test]
    fn every_flag_of_every_command_is_in_the_configuration_reference() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let reference = std::fs::read_to_string(path).expect("docs/configuration.md");
        let mut missing = Vec::new();
        let mut stack = vec![(String::from("outbox"), Cli::command())];
        while let Some((path, command)) = stack.pop() {
            for arg in command.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if long != "help" && long != "version" && !reference.contains(&format!("--{long}")) {
                    missing.push(format!("{path} --{long}"));
                }
            }
            for sub in command.get_subcommands() {
                stack.push((format!("{path} {}", sub.get_name()), sub.clone()));
            }
        }
        assert!(missing.is_empty(), "flags missing from docs/configuration.md: {missing:?}");
    }

    #[test]
    fn declare_queue_binds_a_topic_exchange_and_bind_needs_one_queue() {
        assert!(relay(&["--declare-queue", "shipping.orders", "--bind", "order.*"]).is_ok());
        let direct = relay(&["--declare-queue", "q", "--exchange-kind", "direct"]).expect_err("not topic");
        assert!(one_line(&direct).contains("--declare-queue binds to a topic exchange"), "{}", one_line(&direct));
        assert!(relay(&["--bind", "order.*"]).is_err(), "--bind without --declare-queue");
        assert!(
            relay(&["--declare-queue", "q", "--partitions", "4", "--bind", "x"]).is_err(),
            "--bind with partitions"
        );
        assert!(relay(&["--declare-queue", "q", "--no-declare-exchange"]).is_err(), "declaring needs the exchange");
    }

    #[test]
    fn quarantine_kinds_offered_in_the_help_are_the_ones_accepted() {
        for kind in ["transient", "contract", "auth", "rejected"] {
            assert!(Cli::parse_checked(["outbox", "quarantine", "list", "--kind", kind]).is_ok(), "{kind}");
        }
        let refused =
            Cli::parse_checked(["outbox", "quarantine", "list", "--kind", "contended"]).expect_err("no such kind");
        assert!(
            one_line(&refused).contains("expected transient, contract, auth or rejected"),
            "{}",
            one_line(&refused)
        );
        let mut command = Cli::command();
        let help = command
            .find_subcommand_mut("quarantine")
            .and_then(|q| q.find_subcommand_mut("list"))
            .map(|l| l.render_help().to_string());
        assert!(!help.expect("help").contains("contended"), "the help offers only accepted kinds");
    }
}
