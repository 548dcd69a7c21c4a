//! `outbox relay`: waits for the database and the broker (retrying with a log line per attempt,
//! stopping on SIGTERM or SIGINT), checks the outbox tables, then publishes until a signal.

use std::time::Duration;

use outbox_relayer::{AmqpPublisher, QueueType, Relay, RelayBuilder, Topology};
use outbox_types::ExchangeKind;
use sqlx::postgres::PgConnectOptions;

use crate::args::{ExchangeKindArg, QueueTypeArg, RelayArgs};
use crate::error::CliError;
use crate::serve::Probed;
use crate::signal::Shutdown;

/// Runs the relay until SIGTERM or SIGINT; a signal during the start-up waits ends it cleanly
/// too. Configuration errors (a malformed AMQP URL, refused credentials, missing tables) fail
/// at once.
///
/// # Errors
/// Configuration errors, or the relay's own failure.
pub(crate) async fn run(db: PgConnectOptions, connect_timeout: Duration, args: RelayArgs) -> Result<(), CliError> {
    let shutdown = Shutdown::install()?;
    let publisher = crate::broker::publisher(&args.amqp_url)?;
    let probed = Probed::default();
    let endpoint = match args.metrics_addr {
        Some(addr) => Some(crate::serve::start(addr, Some(probed.clone()), None).await?),
        None => None,
    };
    let outcome = start_and_run(db, connect_timeout, args, &publisher, shutdown, &probed).await;
    publisher.close().await;
    if let Some(endpoint) = endpoint {
        endpoint.abort();
    }
    outcome
}

async fn start_and_run(
    db: PgConnectOptions,
    connect_timeout: Duration,
    args: RelayArgs,
    publisher: &AmqpPublisher,
    shutdown: Shutdown,
    probed: &Probed,
) -> Result<(), CliError> {
    let Some(mut conn) = crate::connect::patiently(&db, connect_timeout, &shutdown).await? else {
        return Ok(());
    };
    crate::schema::check_outbox(&mut conn).await?;
    drop(conn);
    if !crate::broker::connect_patiently(publisher, &shutdown).await? {
        return Ok(());
    }
    let relay = relay(db, publisher.clone(), args)?;
    let _ = probed.set(crate::serve::Probe::Relay(relay.clone()));
    Ok(relay.run(async move { shutdown.requested().await }).await?)
}

/// The payload keys (`id:base64key,...`, the newest first), read from the environment only so that
/// no key is ever on a command line.
pub(crate) const PAYLOAD_KEYS: &str = "OUTBOX_PAYLOAD_KEYS";

fn relay(db: PgConnectOptions, publisher: AmqpPublisher, args: RelayArgs) -> Result<Relay<AmqpPublisher>, CliError> {
    let setup = Setup::new(args)?;
    Ok(setup.apply(Relay::builder(db, publisher), outbox_relayer::defaults::POLL_INTERVAL).build()?)
}

/// How every relay of the command is made: its flags, and what was read from them once (the
/// retention, the payload keys, the topology), for one database or for each of many.
#[derive(Clone)]
pub(crate) struct Setup {
    args: RelayArgs,
    retention: Option<outbox_ops::Retention>,
    cipher: Option<outbox_types::PayloadCipher>,
    topology: Option<Topology>,
}

impl Setup {
    /// Reads what the flags and the environment say.
    ///
    /// # Errors
    /// An invalid retention, malformed payload keys.
    pub(crate) fn new(args: RelayArgs) -> Result<Self, CliError> {
        let retention = retention(&args)?;
        let cipher = outbox_types::Keyring::from_env(PAYLOAD_KEYS)?.map(outbox_types::PayloadCipher::new);
        let topology = declared(&args);
        Ok(Self { args, retention, cipher, topology })
    }

    /// `builder` set up as the flags say; `poll` is the interval when --poll-interval-ms is not given.
    pub(crate) fn apply(&self, builder: RelayBuilder<AmqpPublisher>, poll: Duration) -> RelayBuilder<AmqpPublisher> {
        let args = &self.args;
        let mut builder = builder
            .exchange(args.exchange.clone())
            .exchange_kind(exchange_kind(args.exchange_kind))
            .declare_exchange(!args.no_declare_exchange)
            .batch_size(args.batch_size)
            .confirm_window(args.confirm_window)
            .lease(args.lease_secs)
            .poll_interval(args.poll_interval_ms.unwrap_or(poll))
            .confirm_timeout(args.confirm_timeout_secs)
            .shutdown_deadline(args.shutdown_deadline_secs)
            .gauge_interval(Some(args.gauge_interval_secs))
            .summary_interval(Some(args.summary_interval_secs))
            .retention(self.retention.clone())
            .vacuum_after((args.vacuum_after_rows > 0).then_some(args.vacuum_after_rows))
            .end_to_end(args.end_to_end);
        if let Some(n) = args.partitions {
            builder = builder.routing(outbox_relayer::Partitioned::new(n));
        }
        if let Some(topology) = &self.topology {
            builder = builder.topology(topology);
        }
        if let Some(app_id) = &args.app_id {
            builder = builder.app_id(app_id.clone());
        }
        if let Some(id) = &args.relay_id {
            builder = builder.relay_id(id.clone());
        }
        if let Some(cipher) = &self.cipher {
            builder = builder.cipher(cipher.clone());
        }
        builder
    }
}

/// The topology `--declare-queue` asks for: one queue bound with `#`, or the partitions.
fn declared(args: &RelayArgs) -> Option<Topology> {
    let queue = args.declare_queue.as_deref()?;
    let topology = match args.partitions {
        Some(n) => Topology::partitioned(args.exchange.clone(), queue, n),
        None if args.bind.is_empty() => Topology::queue(args.exchange.clone(), queue),
        None => Topology::queue(args.exchange.clone(), queue).bindings(args.bind.iter().cloned()),
    };
    let kind = match args.queue_type {
        QueueTypeArg::Classic => QueueType::Classic,
        QueueTypeArg::Quorum => QueueType::Quorum,
    };
    Some(topology.queue_type(kind))
}

/// The relay's retention: published rows older than `--retention`, 5,000 per statement, at most
/// 100 statements a minute; none with `--no-retention`.
fn retention(args: &RelayArgs) -> Result<Option<outbox_ops::Retention>, CliError> {
    if args.no_retention {
        return Ok(None);
    }
    let mut retention = outbox_ops::Retention::builder(args.retention).batch_size(5_000).max_batches(100);
    if let Some(age) = args.scrub_payload_after {
        retention = retention.scrub_payload_after(age);
    }
    Ok(Some(retention.build()?))
}

fn exchange_kind(kind: ExchangeKindArg) -> ExchangeKind {
    match kind {
        ExchangeKindArg::Topic => ExchangeKind::Topic,
        ExchangeKindArg::Direct => ExchangeKind::Direct,
        ExchangeKindArg::Fanout => ExchangeKind::Fanout,
        ExchangeKindArg::Headers => ExchangeKind::Headers,
    }
}
