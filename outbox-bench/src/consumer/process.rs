//! The consumer process, the hidden command `consumer-process`: inbox runners applying events to
//! `shipments` in a process of their own, answering the benchmark's requests on standard input.

use outbox_inbox::{InboxLayer, InboxRunner};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tower::Layer;

use super::settings::{APPLICATION_NAME, POOL};
use super::shipments::{Handler, handle};
use super::stats::{CONSUMING, STATS, format_stats, sum};
use crate::error::BoxError;
use crate::process::{READY, Urls, init_child_logging, stdin_lines};

/// Arguments of the hidden `consumer-process` command. The URLs come from the environment, where
/// `consumer` puts them.
#[derive(Debug, clap::Args)]
pub(crate) struct ProcessArgs {
    #[command(flatten)]
    urls: Urls,
    /// Queue to consume (declared, with its dead-letter exchange `<queue>.dlx`).
    #[arg(long)]
    queue: String,
    /// The inbox's consumer name.
    #[arg(long)]
    consumer: String,
    /// The business write of the handler.
    #[arg(long, value_enum, default_value_t)]
    handler: Handler,
}

/// The consumer process: an [`InboxRunner`] with default prefetch and concurrency over a pool of
/// [`POOL`] connections, applying events with the chosen [`Handler`] (`shipments` by default). Answers `stats` with the runners' counts
/// and `consume <queue>` by starting one more runner (same inbox) on that queue; shuts the runners
/// down gracefully at SIGTERM, SIGINT or the end of standard input.
pub(crate) async fn process(args: ProcessArgs) -> Result<(), BoxError> {
    init_child_logging();
    let options = args.urls.database_url.parse::<PgConnectOptions>()?.application_name(APPLICATION_NAME);
    let pool = PgPoolOptions::new().max_connections(POOL).connect_with(options).await?;
    let handler = args.handler;
    let service =
        InboxLayer::new(pool.clone(), args.consumer).layer(tower::service_fn(move |req| handle(handler, req)));
    // Experiments only (the figures are defined with the defaults): other batch sizes,
    // concurrency and prefetch through the environment.
    let knob = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let (batch, concurrency) = (knob("OUTBOX_BENCH_CONSUMER_BATCH"), knob("OUTBOX_BENCH_CONSUMER_CONCURRENCY"));
    let prefetch = knob("OUTBOX_BENCH_CONSUMER_PREFETCH").and_then(|n| u16::try_from(n).ok());
    let start = |queue: &str| {
        let mut runner = InboxRunner::builder(args.urls.amqp_url.as_str(), service.clone())
            .connection_name("outbox-bench-consumer")
            .queue(queue);
        if let Some(n) = batch {
            runner = runner.batch_size(n);
        }
        if let Some(n) = concurrency {
            runner = runner.concurrency(n);
        }
        if let Some(n) = prefetch {
            runner = runner.prefetch(n);
        }
        runner.build().map(InboxRunner::spawn)
    };
    let mut runners = vec![start(&args.queue)?];
    let mut requests = stdin_lines();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("{READY}");
    loop {
        tokio::select! {
            request = requests.recv() => match request.as_deref() {
                None => break,
                Some(STATS) => println!("{}", format_stats(&sum(&runners))),
                Some(other) => match other.strip_prefix("consume ") {
                    Some(queue) => {
                        runners.push(start(queue)?);
                        println!("{CONSUMING}");
                    }
                    None => println!("unknown request {other:?}"),
                },
            },
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    let mut outcome = Ok(());
    for runner in runners {
        if let Err(e) = runner.shutdown().await {
            outcome = Err(e);
        }
    }
    pool.close().await;
    Ok(outcome?)
}
