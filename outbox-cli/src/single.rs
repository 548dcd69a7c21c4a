//! A command on one database: the connection it needs (checked for the tables it reads), the
//! command run on it, and the pool closed after.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use crate::args::Command;
use crate::error::CliError;
use crate::out::Out;
use crate::{cleanup, connect, events, grant, inbox, migrate, quarantine, reconcile, relay, replay, schema, status};

/// Runs `command` on the database of `options`, its report to `out`.
///
/// # Errors
/// The command's own.
pub(crate) async fn run(
    options: PgConnectOptions,
    timeout: Duration,
    command: Command,
    out: &mut Out,
) -> Result<(), CliError> {
    match command {
        Command::Migrate { outbox_only, inbox_only } => migrate::run(options, timeout, outbox_only, inbox_only).await,
        Command::Status { json } => {
            let conn = connect::within(&options, timeout).await?;
            let pool = connect::pool(options, timeout);
            let outcome = status::run(conn, &pool, json).await;
            pool.close().await;
            outcome
        }
        Command::Relay(args) => relay::run(options, timeout, *args).await,
        Command::Events { command } => {
            let pool = schema::outbox_pool(options, timeout).await?;
            let outcome = events::run(&pool, command, out).await;
            pool.close().await;
            outcome
        }
        Command::Quarantine { command } => {
            let pool = schema::outbox_pool(options, timeout).await?;
            let outcome = quarantine::run(&pool, command, out).await;
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
            let outcome = reconcile::run(&pool, args, out).await;
            pool.close().await;
            outcome
        }
        Command::Replay { command } => {
            let pool = schema::outbox_pool(options.clone(), timeout).await?;
            let outcome = replay::run(&pool, options, command, out).await;
            pool.close().await;
            outcome
        }
        Command::Inbox { command } => {
            let pool = schema::inbox_pool(options, timeout).await?;
            let outcome = inbox::run(&pool, command, out).await;
            pool.close().await;
            outcome
        }
    }
}
