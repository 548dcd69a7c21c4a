//! `outbox`: the operator command of the transactional outbox.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/app outbox migrate
//! DATABASE_URL=postgres://postgres@127.0.0.1/app outbox status
//! DATABASE_URL=... AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f outbox relay --exchange orders
//! ```
//!
//! Reads `DATABASE_URL` and `AMQP_URL` (flags override). Logs through `tracing` to stderr
//! (`RUST_LOG` sets the filter, default `info`; lapin never logs message bodies, whatever it says).
//!
//! Numbers are checked when parsed: a value a command cannot use (0 where at least 1 is needed, a
//! negative, `nan`, `inf`, more than the flag's documented maximum, `--confirm-timeout-secs` not
//! shorter than `--lease-secs`) is a usage error, one line on stderr, exit status 2.
//!
//! `migrate` and `status` try to reach the database for `--connect-timeout-secs` (default 5),
//! then fail with the real cause. `relay` retries a database or broker that is down at start-up
//! (100 ms doubling to 5 s, a log line with the cause per attempt) until it answers or SIGTERM
//! arrives; each database attempt may take `--connect-timeout-secs`. `status` and `relay` first
//! check that the outbox tables exist (and are migrated to this version), or say to run
//! `outbox migrate`.
//!
//! Failures that retrying cannot mend (a malformed URL, refused credentials, a missing table) end
//! the command at once with one line on stderr, `outbox: error: <cause>`, and exit status 1; the
//! line never holds a URL or a password. `outbox relay` exits cleanly (status 0) on SIGTERM or
//! SIGINT: it stops claiming, awaits the confirms in flight up to the shutdown deadline, records
//! them and releases the rest.

mod args;
mod broker;
mod cleanup;
mod cleanup_many;
mod connect;
mod databases;
mod error;
mod events;
mod fleet;
mod grant;
mod inbox;
mod listed;
mod locate;
mod logging;
mod many;
mod migrate;
mod migrate_many;
mod out;
mod progress;
mod quarantine;
mod quarantine_many;
mod reconcile;
mod relay;
mod replay;
mod retry;
mod schema;
mod serve;
mod signal;
mod single;
mod status;
mod status_many;

use std::process::ExitCode;

use clap::error::ErrorKind;

use crate::args::{Cli, Command, QuarantineCommand};
use crate::error::CliError;
use crate::out::Out;

async fn run(cli: Cli) -> Result<(), CliError> {
    // Printing the roles' SQL needs no database.
    if let Command::Grant(args) = &cli.command
        && !args.apply
    {
        grant::print(args);
        return Ok(());
    }
    if cli.list.is_given() {
        return many_databases(cli).await;
    }
    let options = connect::options(cli.database_url.as_deref())?;
    single::run(options, cli.connect_timeout_secs, cli.command, &mut Out::Stdout).await
}

/// A command over the listed databases: those made for many, and the others one database at a
/// time ([`listed`]).
async fn many_databases(cli: Cli) -> Result<(), CliError> {
    let timeout = cli.connect_timeout_secs;
    if let Command::Relay(args) = cli.command {
        return fleet::run(*args, &cli.list, signal::Shutdown::install()?).await;
    }
    let (_, databases) = databases::read(&cli.list)?;
    match cli.command {
        Command::Status { json } => status_many::run(databases, timeout, json).await,
        Command::Migrate { outbox_only, inbox_only } => {
            migrate_many::run(databases, timeout, outbox_only, inbox_only).await
        }
        Command::Cleanup(args) => cleanup_many::run(databases, timeout, args).await,
        Command::Quarantine { command: QuarantineCommand::List { kind, limit, json } } => {
            quarantine_many::run(databases, timeout, kind, limit, json).await
        }
        command => listed::run(databases, timeout, command).await,
    }
}

/// Prints a clap error (help and version as clap prints them, a usage error on one line) and
/// returns clap's exit status.
fn usage(error: &clap::Error) -> ExitCode {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
        }
        _ => eprintln!("{}", args::one_line(error)),
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
}

fn main() -> ExitCode {
    let cli = match Cli::parse_checked(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return usage(&e),
    };
    logging::init(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("outbox: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outbox: error: {}", error::one_line(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}
