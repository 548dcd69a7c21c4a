//! Every numeric flag of every command refuses what the command cannot use (0 where it needs at
//! least 1, negatives, `nan`, `inf`, huge values, words) with a one-line usage error and exit
//! status 2, never a panic. The flags are found by walking the clap command, so a new numeric
//! flag is covered without touching this test.

use std::any::TypeId;
use std::time::Duration;

use clap::{Arg, CommandFactory};

use crate::args::Cli;
use crate::support;
use crate::support::{outbox, run};

/// The values every numeric flag must refuse (0 too, unless listed in [`ZERO_ALLOWED`]).
const BAD: [&str; 6] = ["0", "-1", "nan", "inf", "1e30", "abc"];
/// Flags for which 0 has a meaning.
const ZERO_ALLOWED: [&str; 1] = ["--vacuum-after-rows"]; // 0: leave vacuuming to autovacuum

/// A flag that takes a number: where it is (the path of subcommands, empty for global flags), its
/// name, and what else its command requires (a placeholder for each required argument).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NumericFlag {
    subcommand: Vec<String>,
    long: String,
    required: Vec<String>,
}

fn is_numeric(arg: &Arg) -> bool {
    let parsed = arg.get_value_parser().type_id();
    [
        TypeId::of::<Duration>(),
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i8>(),
        TypeId::of::<i16>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<isize>(),
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
    ]
    .into_iter()
    .any(|t| parsed == t)
}

/// A valid placeholder for each argument `cmd` requires: an event id for a positional, an age for a
/// duration flag, a word for any other flag.
fn placeholders(cmd: &clap::Command) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| a.is_required_set())
        .map(|a| match a.get_long() {
            Some(long) if is_numeric(a) => format!("--{long}=7d"),
            Some(long) => format!("--{long}=placeholder"),
            None => "00000000-0000-0000-0000-000000000001".to_owned(),
        })
        .collect()
}

/// Collects the numeric flags of `cmd` (at `path`) and of its subcommands, at any depth.
fn collect(path: &[String], cmd: &clap::Command, found: &mut Vec<NumericFlag>) {
    for arg in cmd.get_arguments().filter(|a| is_numeric(a)) {
        let long =
            arg.get_long().map(|l| format!("--{l}")).unwrap_or_else(|| panic!("{} has no long form", arg.get_id()));
        found.push(NumericFlag { subcommand: path.to_vec(), long, required: placeholders(cmd) });
    }
    for sub in cmd.get_subcommands() {
        let mut deeper = path.to_vec();
        deeper.push(sub.get_name().to_owned());
        collect(&deeper, sub, found);
    }
}

fn numeric_flags() -> Vec<NumericFlag> {
    let mut found = Vec::new();
    collect(&[], &Cli::command(), &mut found);
    found
}

/// The arguments that give `flag` the value `value`, with whatever else its command requires.
fn argv(flag: &NumericFlag, value: &str) -> Vec<String> {
    let mut argv = vec!["outbox".to_owned()];
    match flag.subcommand.first().map(String::as_str) {
        // Global flags: on the command that needs least.
        None => argv.push("status".to_owned()),
        Some("relay") => argv.extend(["relay", "--amqp-url", "amqp://guest:guest@127.0.0.1:1/%2f"].map(str::to_owned)),
        Some(_) => argv.extend(flag.subcommand.iter().chain(&flag.required).cloned()),
    }
    argv.push(format!("{}={value}", flag.long));
    argv
}

#[test]
fn the_walk_finds_every_known_numeric_flag() {
    let found: Vec<String> = numeric_flags().into_iter().map(|f| f.long).collect();
    for known in [
        "--connect-timeout-secs",
        "--partitions",
        "--batch-size",
        "--confirm-window",
        "--lease-secs",
        "--poll-interval-ms",
        "--confirm-timeout-secs",
        "--shutdown-deadline-secs",
        "--vacuum-after-rows",
        "--limit",
        "--older-than",
        "--retention",
    ] {
        assert!(found.iter().any(|f| f == known), "{known} not found among {found:?}");
    }
    for allowed in ZERO_ALLOWED {
        assert!(found.iter().any(|f| f == allowed), "{allowed} is not a numeric flag any more");
    }
}

#[test]
fn zero_is_accepted_only_where_it_means_something() {
    for flag in numeric_flags() {
        let parsed = Cli::parse_checked(argv(&flag, "0"));
        if ZERO_ALLOWED.contains(&flag.long.as_str()) {
            assert!(parsed.is_ok(), "{} refuses 0: {:?}", flag.long, parsed.err());
        } else {
            assert!(parsed.is_err(), "{} accepts 0", flag.long);
        }
    }
}

#[tokio::test]
async fn every_numeric_flag_refuses_what_it_cannot_use_with_one_line_and_status_2() {
    for flag in numeric_flags() {
        for value in BAD {
            if value == "0" && ZERO_ALLOWED.contains(&flag.long.as_str()) {
                continue; // accepted: checked by parsing above, without starting a relay
            }
            let args = argv(&flag, value);
            let mut cmd = outbox();
            // Should the value be accepted by mistake, the command finds nothing to connect to.
            cmd.args(&args[1..]).env("DATABASE_URL", support::closed_database_url()).env("RUST_BACKTRACE", "1");
            let (status, lines, _) = run(cmd, Duration::from_secs(30)).await;
            let shown = format!("{} {}={value}: {status}, stderr:\n{}", args[1], flag.long, lines.join("\n"));
            assert_eq!(status.code(), Some(2), "{shown}");
            assert_eq!(lines.len(), 1, "one line expected: {shown}");
            assert!(lines[0].starts_with("error: "), "{shown}");
            assert!(lines[0].contains(&flag.long), "the line names the flag: {shown}");
            assert!(!lines[0].contains("panicked"), "{shown}");
        }
    }
}

#[tokio::test]
async fn a_confirm_timeout_not_shorter_than_the_lease_is_a_usage_error() {
    for (lease, timeout) in [("5", "5"), ("5", "10")] {
        let mut cmd = outbox();
        cmd.args(["relay", "--amqp-url", "amqp://guest:guest@127.0.0.1:1/%2f", "--lease-secs", lease])
            .args(["--confirm-timeout-secs", timeout])
            .env("DATABASE_URL", support::closed_database_url());
        let (status, lines, _) = run(cmd, Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(2), "{lines:?}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("error: --confirm-timeout-secs"), "{lines:?}");
    }
}
