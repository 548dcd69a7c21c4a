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
mod logging;
mod many;
mod migrate;
mod migrate_many;
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
mod status;
mod status_many;

use std::process::ExitCode;

use clap::error::ErrorKind;

use crate::args::{Cli, Command, QuarantineCommand};
use crate::error::CliError;

async fn run(cli: Cli) -> Result<(), CliError> {
    // Printing the roles' SQL needs no database.
    if let Command::Grant(args) = &cli.command
        && !args.apply
    {
        grant::print(args);
        return Ok(());
    }
    let command = match cli.command {
        // Many databases: no DATABASE_URL.
        Command::Relay(args) if args.fleet.is_fleet() => return fleet::run(*args, signal::Shutdown::install()?).await,
        Command::Status { json, list } if list.is_given() => {
            let (_, databases) = databases::read(&list)?;
            return status_many::run(databases, cli.connect_timeout_secs, json).await;
        }
        Command::Migrate { outbox_only, inbox_only, list } if list.is_given() => {
            let (_, databases) = databases::read(&list)?;
            return migrate_many::run(databases, cli.connect_timeout_secs, outbox_only, inbox_only).await;
        }
        Command::Cleanup(args) if args.list.is_given() => {
            let (_, databases) = databases::read(&args.list)?;
            return cleanup_many::run(databases, cli.connect_timeout_secs, args).await;
        }
        Command::Quarantine { command: QuarantineCommand::List { kind, limit, json, list } } if list.is_given() => {
            let (_, databases) = databases::read(&list)?;
            return quarantine_many::run(databases, cli.connect_timeout_secs, kind, limit, json).await;
        }
        command => command,
    };
    let options = connect::options(cli.database_url.as_deref())?;
    let timeout = cli.connect_timeout_secs;
    match command {
        Command::Migrate { outbox_only, inbox_only, .. } => {
            migrate::run(options, timeout, outbox_only, inbox_only).await
        }
        Command::Status { json, .. } => {
            let conn = connect::within(&options, timeout).await?;
            let pool = connect::pool(options, timeout);
            let outcome = status::run(conn, &pool, json).await;
            pool.close().await;
            outcome
        }
        Command::Relay(args) => relay::run(options, timeout, *args).await,
        Command::Events { command } => {
            let pool = schema::outbox_pool(options, timeout).await?;
            let outcome = events::run(&pool, command).await;
            pool.close().await;
            outcome
        }
        Command::Quarantine { command } => {
            let pool = schema::outbox_pool(options, timeout).await?;
            let outcome = quarantine::run(&pool, command).await;
            pool.close().await;
            outcome
        }
        Command::Cleanup(args) => {
            let pool = cleanup::open(options, timeout, &args).await?;
            let outcome = cleanup::run(&pool, args).await;
            pool.close().await;
            outcome
        }
        Command::Grant(args) => grant::apply(&args, &options, timeout).await,
        Command::Reconcile(args) => {
            let pool = schema::outbox_pool(options, timeout).await?;
            let outcome = reconcile::run(&pool, args).await;
            pool.close().await;
            outcome
        }
        Command::Replay { command } => {
            let pool = schema::outbox_pool(options.clone(), timeout).await?;
            let outcome = replay::run(&pool, options, command).await;
            pool.close().await;
            outcome
        }
        Command::Inbox { command } => {
            let mut conn = connect::within(&options, timeout).await?;
            schema::check_inbox(&mut conn).await?;
            drop(conn);
            let pool = connect::pool(options, timeout);
            let outcome = inbox::run(&pool, command).await;
            pool.close().await;
            outcome
        }
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
