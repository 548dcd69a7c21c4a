//! `outbox relay` over many databases: the list from `--database` and `--databases-file` (read
//! again on SIGHUP and when the file changes), relayed by a fleet (`outbox_relayer::fleet`) that
//! shares them with the other processes naming the same fleet database, until SIGTERM or SIGINT.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use outbox_relayer::fleet::{Fleet, FleetDatabase, FleetHandle};
use tokio::signal::unix::{SignalKind, signal};

use crate::args::{DatabaseList, FleetArgs, RelayArgs};
use crate::error::CliError;
use crate::relay::Setup;
use crate::serve::{Probe, Probed};
use crate::signal::Shutdown;

/// How often a database's relay looks for new events when none came lately: the fleet's relays
/// poll, since a LISTEN per database would cost a connection each.
const POLL: Duration = Duration::from_millis(250);
/// How often the file is looked at for a change.
const LOOK_AT_FILE: Duration = Duration::from_secs(2);

/// Relays the listed databases until SIGTERM or SIGINT.
///
/// # Errors
/// A list that does not read (the line and why), no database listed, configuration errors.
pub(crate) async fn run(args: RelayArgs, list: &DatabaseList, shutdown: Shutdown) -> Result<(), CliError> {
    let mut hangup = signal(SignalKind::hangup())?;
    let (text, databases) = read(&args.fleet, list)?;
    let publisher = crate::broker::publisher(&args.amqp_url)?;
    let probed = Probed::default();
    let endpoint = match args.metrics_addr {
        // A database's gauges are set every look (2 s) and every gauge interval: three intervals
        // without, and the database is no longer this process's.
        Some(addr) => {
            let idle = (args.gauge_interval_secs * 3).max(Duration::from_secs(60));
            Some(crate::serve::start(addr, Some(probed.clone()), Some(idle)).await?)
        }
        None => None,
    };
    let outcome = async {
        if !crate::broker::connect_patiently(&publisher, &shutdown).await? {
            return Ok(());
        }
        let handle = fleet(&args, publisher.clone(), databases)?.spawn();
        let running = Arc::new(AtomicBool::new(true));
        let _ = probed.set(Probe::Fleet(running.clone()));
        let outcome = watch_list(&args.fleet, list, &handle, text, &shutdown, &mut hangup).await;
        running.store(false, Ordering::Relaxed);
        handle.shutdown().await?;
        outcome
    }
    .await;
    publisher.close().await;
    if let Some(endpoint) = endpoint {
        endpoint.abort();
    }
    outcome
}

/// The fleet the flags describe.
fn fleet(
    args: &RelayArgs,
    publisher: outbox_relayer::AmqpPublisher,
    databases: Vec<FleetDatabase>,
) -> Result<Fleet<outbox_relayer::AmqpPublisher>, CliError> {
    let setup = Setup::new(args.clone())?;
    let mut fleet = Fleet::builder(publisher)
        .databases(databases)
        .connections_per_database(args.fleet.connections_per_database)
        .relay(move |relay| setup.apply(relay, POLL));
    if let Some(name) = &args.fleet.fleet_database {
        fleet = fleet.fleet_database(name.clone());
    }
    Ok(fleet.build()?)
}

/// Until a signal to stop: on SIGHUP, or when the file's text changed, the list is read again and
/// handed to the fleet; a list that does not read is logged and the one in use stays.
async fn watch_list(
    args: &FleetArgs,
    list: &DatabaseList,
    handle: &FleetHandle,
    mut text: String,
    shutdown: &Shutdown,
    hangup: &mut tokio::signal::unix::Signal,
) -> Result<(), CliError> {
    let mut tick = tokio::time::interval(LOOK_AT_FILE);
    loop {
        let asked = tokio::select! {
            () = shutdown.requested() => return Ok(()),
            _ = hangup.recv() => true,
            _ = tick.tick() => false,
        };
        if handle.is_finished() {
            return Err(CliError::Relay(outbox_relayer::Error::Stopped));
        }
        if !asked && list.databases_file.is_none() {
            continue;
        }
        match read(args, list) {
            Ok((new, _)) if new == text && !asked => {}
            Ok((new, databases)) => {
                let names = databases.len();
                handle.set_databases(databases)?;
                tracing::info!(databases = names, "the list of databases was read again");
                text = new;
            }
            Err(e) => tracing::warn!(error = %e, "the list of databases was not read again; the one in use stays"),
        }
    }
}

/// The list, checked for the fleet: the fleet's database among it.
fn read(args: &FleetArgs, list: &DatabaseList) -> Result<(String, Vec<FleetDatabase>), CliError> {
    let (text, databases) = crate::databases::read(list)?;
    if let Some(name) = &args.fleet_database
        && !databases.iter().any(|d| d.name() == name)
    {
        return Err(CliError::DatabaseList(format!("--fleet-database {name} is not in the list")));
    }
    Ok((text, databases))
}
