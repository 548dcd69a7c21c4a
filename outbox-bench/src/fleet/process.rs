//! The fleet process, the hidden command `fleet-process`: `outbox relay --databases-file` as a
//! library user builds it (a `Fleet` with its defaults, polling every 250 ms as the command does),
//! in a process of its own, so that its peak RSS is measured alone. The relay's experimental
//! overrides (`OUTBOX_BENCH_RELAY_*`) apply to each database's relay.

use std::time::Duration;

use outbox_relayer::AmqpPublisher;
use outbox_relayer::fleet::{Fleet, FleetDatabase};

use crate::error::BoxError;
use crate::process::{READY, init_child_logging, stdin_lines};

/// Arguments of the hidden `fleet-process` command; the broker's URL comes from the environment.
#[derive(Debug, clap::Args)]
pub(crate) struct ProcessArgs {
    /// RabbitMQ URL.
    #[arg(long, env = crate::process::ENV_AMQP_URL, hide_env_values = true)]
    amqp_url: String,
    /// The list of databases (`NAME URL` lines).
    #[arg(long)]
    databases_file: std::path::PathBuf,
    /// Exchange to publish to (it must exist).
    #[arg(long)]
    exchange: String,
}

/// Runs the fleet until SIGTERM, SIGINT or the end of standard input.
pub(crate) async fn process(args: ProcessArgs) -> Result<(), BoxError> {
    init_child_logging();
    let databases = FleetDatabase::parse_list(&std::fs::read_to_string(&args.databases_file)?)?;
    let publisher = AmqpPublisher::builder(args.amqp_url).connection_name("outbox-bench-fleet").build_unchecked();
    let exchange = args.exchange;
    let fleet = Fleet::builder(publisher.clone())
        .databases(databases)
        .relay(move |relay| {
            let relay = relay.exchange(exchange.clone()).declare_exchange(false);
            crate::relay::experiment(relay.poll_interval(Duration::from_millis(250)))
        })
        .build()?
        .spawn();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut stdin = stdin_lines();
    println!("{READY}");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        () = async { while stdin.recv().await.is_some() {} } => {}
    }
    let outcome = fleet.shutdown().await;
    publisher.close().await;
    Ok(outcome?)
}
