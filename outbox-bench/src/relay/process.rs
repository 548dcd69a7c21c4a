//! The relay process, the hidden command `relay-process`: one relay with default settings in a
//! process of its own, so that the drain phase measures its peak RSS alone.

use outbox_relayer::{AmqpPublisher, Relay};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::settings::{RELAY_CONNECTIONS, experiment};
use crate::error::BoxError;
use crate::process::{READY, Urls, init_child_logging, stdin_lines};

/// `application_name` of the relay process's database connections, to find its backends.
pub(super) const APPLICATION_NAME: &str = "outbox-bench-relay";

/// Arguments of the hidden `relay-process` command. The URLs come from the environment, where
/// `relay` puts them.
#[derive(Debug, clap::Args)]
pub(crate) struct ProcessArgs {
    #[command(flatten)]
    urls: Urls,
    /// Exchange to publish to (it must exist: the relay does not declare it).
    #[arg(long)]
    exchange: String,
    /// Milliseconds between two reads of the backlog into the gauges, 0 for never (the relay's
    /// default when not given).
    #[arg(long)]
    gauge_interval_ms: Option<u64>,
    /// Open payloads sealed with the benchmark's key.
    #[arg(long)]
    sealed: bool,
}

/// The relay process: one relay with default settings (a pool of 4 connections, as `outbox relay`
/// opens) until SIGTERM, SIGINT or the end of standard input, then a graceful shutdown.
pub(crate) async fn process(args: ProcessArgs) -> Result<(), BoxError> {
    init_child_logging();
    let options = args.urls.database_url.parse::<PgConnectOptions>()?.application_name(APPLICATION_NAME);
    let pool = PgPoolOptions::new().max_connections(RELAY_CONNECTIONS).connect_with(options).await?;
    let publisher = AmqpPublisher::builder(args.urls.amqp_url).connection_name("outbox-bench-relay").build_unchecked();
    let mut relay = experiment(
        Relay::builder(pool.connect_options().as_ref().clone(), publisher.clone())
            .exchange(args.exchange)
            .declare_exchange(false),
    );
    if let Some(ms) = args.gauge_interval_ms {
        relay = relay.gauge_interval(Some(std::time::Duration::from_millis(ms)));
    }
    if args.sealed {
        relay = relay.cipher(crate::sealed::cipher());
    }
    let relay = relay.build()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut stdin = stdin_lines();
    println!("{READY}");
    let outcome = relay
        .run(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
                () = async { while stdin.recv().await.is_some() {} } => {}
            }
        })
        .await;
    publisher.close().await;
    pool.close().await;
    Ok(outcome?)
}
