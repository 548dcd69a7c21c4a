//! A command on one database: the connection it needs (checked for the tables it reads), the
//! command run on it, and the pool closed after.

use std::time::Duration;

use sqlx::PgPool;
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
            on(connect::pool(options, timeout), async |pool| status::run(conn, pool, json).await).await
        }
        Command::Relay(args) => relay::run(options, timeout, *args).await,
        Command::Events { command } => {
            on(schema::outbox_pool(options, timeout).await?, async |pool| events::run(pool, command, out).await).await
        }
        Command::Quarantine { command } => {
            on(schema::outbox_pool(options, timeout).await?, async |pool| quarantine::run(pool, command, out).await)
                .await
        }
        Command::Cleanup(args) => {
            on(cleanup::open(options, timeout, &args).await?, async |pool| cleanup::run(pool, args).await).await
        }
        Command::Grant(args) => grant::apply(&args, &options, timeout).await,
        Command::Reconcile(args) => {
            on(schema::outbox_pool(options, timeout).await?, async |pool| reconcile::run(pool, args, out).await).await
        }
        Command::Replay { command } => {
            let pool = schema::outbox_pool(options.clone(), timeout).await?;
            on(pool, async |pool| replay::run(pool, options, command, out).await).await
        }
        Command::Inbox { command } => {
            on(schema::inbox_pool(options, timeout).await?, async |pool| inbox::run(pool, command, out).await).await
        }
    }
}

/// Runs `command` with `pool`, then closes the pool, whatever the outcome.
async fn on(pool: PgPool, command: impl AsyncFnOnce(&PgPool) -> Result<(), CliError>) -> Result<(), CliError> {
    let outcome = command(&pool).await;
    pool.close().await;
    outcome
}
