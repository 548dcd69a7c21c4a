//! The [`Fleet`]: reads its members, takes the databases the assignment gives this process, runs a
//! relay for each, and gives back those it no longer has.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use outbox_types::Publisher;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::assign::assign;
use super::database::FleetDatabase;
use super::handle::FleetHandle;
use super::members::Members;
use super::settings::{Configure, FleetSettings, relay_builder};
use crate::relay::RelayHandle;
use crate::{Error, Result};

/// Relays the outboxes of many databases from one process, with any number of processes sharing
/// them: each database is relayed by one process of the fleet at a time, with its own relay
/// (claim loop, connections, back-offs), so a database that is down, slow or unmigrated stalls
/// only itself; every relay of the process publishes through one broker connection.
///
/// The processes find each other through advisory locks in one of the databases (the fleet's
/// database, the first of the list unless [`FleetBuilder::fleet_database`](super::FleetBuilder::fleet_database)
/// says otherwise) and share the databases by rendezvous hashing with bounded loads: each takes
/// at most `ceil(databases / processes)`, a process that joins takes its share from the others,
/// and one that dies leaves its databases to the others within
/// [`look_every`](super::FleetBuilder::look_every).
///
/// ```no_run
/// use outbox_relayer::fleet::{Fleet, FleetDatabase};
/// use outbox_relayer::AmqpPublisher;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let databases = FleetDatabase::parse_list(&std::fs::read_to_string("/etc/outbox/databases")?)?;
/// let publisher = AmqpPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f").build()?;
/// let fleet = Fleet::builder(publisher).databases(databases).relay(|relay| relay.exchange("orders")).build()?;
/// let handle = fleet.spawn();
/// // ... on SIGHUP: handle.set_databases(FleetDatabase::parse_list(...)?)?;
/// handle.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct Fleet<P> {
    pub(super) publisher: P,
    pub(super) configure: Configure<P>,
    pub(super) settings: FleetSettings,
    pub(super) databases: Arc<watch::Sender<Vec<FleetDatabase>>>,
}

impl<P> std::fmt::Debug for Fleet<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// A database this process relays now.
struct Relayed {
    relay: RelayHandle,
    /// Where it connects, hashed: a changed URL (a new password) restarts the relay.
    connect: u64,
}

impl<P: Publisher + Clone> Fleet<P> {
    /// Runs the fleet as a task of the current runtime.
    pub fn spawn(self) -> FleetHandle {
        let (stop, mut rx) = watch::channel(false);
        let (databases, fleet_database) = (self.databases.clone(), self.settings.fleet_database.clone());
        let task = tokio::spawn(self.run(async move {
            let _ = rx.wait_for(|s| *s).await;
        }));
        FleetHandle { stop, task, databases, fleet_database }
    }

    /// Runs until `shutdown` completes, then shuts every relay down gracefully (all at once).
    ///
    /// # Errors
    /// None today: the fleet keeps going through failures of its databases and of the broker,
    /// logging them.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let mut members = Members::new();
        // At ERROR level, as the relays' spans: under any filter its lines name the member.
        let span = tracing::error_span!("outbox.fleet", member = members.me());
        async move {
            crate::metrics::describe();
            let mut relayed: BTreeMap<String, Relayed> = BTreeMap::new();
            let mut registered = false;
            let mut stopping = JoinSet::new();
            let mut list = self.databases.subscribe();
            let mut tick = tokio::time::interval(self.settings.look_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tokio::pin!(shutdown);
            tracing::info!(databases = list.borrow().len(), "fleet started");
            loop {
                tokio::select! {
                    () = &mut shutdown => break,
                    _ = tick.tick() => {}
                    Ok(()) = list.changed() => {}
                }
                let databases = list.borrow_and_update().clone();
                let mine = self.mine(&databases, &mut members).await;
                self.give_back(&mut relayed, &mine, &mut stopping);
                if registered {
                    self.take(&mut relayed, mine);
                }
                // Processes started together see each other only once each has registered: a
                // process takes no database before its second look, so that none takes them all
                // at first only to give half of them back a moment later.
                registered = true;
                self.report(&databases, &relayed);
                while let Some(stopped) = stopping.try_join_next() {
                    report_stopped(stopped);
                }
            }
            for (name, r) in std::mem::take(&mut relayed) {
                stopping.spawn(async move { (name, r.relay.shutdown().await) });
            }
            while let Some(stopped) = stopping.join_next().await {
                report_stopped(stopped);
            }
            members.leave().await;
            tracing::info!("fleet stopped");
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// The databases the assignment gives this process, by the members the fleet's database shows.
    async fn mine(&self, databases: &[FleetDatabase], members: &mut Members) -> BTreeMap<String, FleetDatabase> {
        let fleet_db = match &self.settings.fleet_database {
            Some(name) => databases.iter().find(|d| &d.name == name),
            None => databases.first(),
        };
        let ids = match fleet_db {
            Some(d) => members.look(d, self.settings.connect_timeout).await.to_vec(),
            None => vec![members.me()],
        };
        metrics::gauge!(crate::metrics::FLEET_MEMBERS).set(ids.len() as f64);
        let owners = assign(databases.iter().map(FleetDatabase::name), &ids);
        databases
            .iter()
            .filter(|d| owners.get(d.name.as_str()) == Some(&members.me()))
            .map(|d| (d.name.clone(), d.clone()))
            .collect()
    }

    /// Shuts down (in the background) the relays of databases this process no longer has, whose
    /// URL changed, or whose task ended.
    fn give_back(
        &self,
        relayed: &mut BTreeMap<String, Relayed>,
        mine: &BTreeMap<String, FleetDatabase>,
        stopping: &mut JoinSet<(String, Result<()>)>,
    ) {
        let gone: Vec<String> = relayed
            .iter()
            .filter(|(name, r)| mine.get(*name).is_none_or(|d| d.fingerprint() != r.connect) || r.relay.is_finished())
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            let Some(r) = relayed.remove(&name) else { continue };
            if r.relay.is_finished() {
                tracing::warn!(database = %name, "the relay of a database ended; starting it again");
            } else {
                tracing::info!(database = %name, "database given back: another process of the fleet relays it");
            }
            stopping.spawn(async move { (name, r.relay.shutdown().await) });
        }
    }

    /// Starts a relay for each database this process has and does not relay yet.
    fn take(&self, relayed: &mut BTreeMap<String, Relayed>, mine: BTreeMap<String, FleetDatabase>) {
        for (name, database) in mine {
            if relayed.contains_key(&name) {
                continue;
            }
            let builder = relay_builder(&self.publisher, &self.configure, &self.settings, &database);
            match builder.build() {
                Ok(relay) => {
                    tracing::info!(database = %name, "database taken: this process relays it");
                    let connect = database.fingerprint();
                    relayed.insert(name, Relayed { relay: relay.spawn(), connect });
                }
                Err(e) => tracing::error!(database = %name, error = %e, "cannot relay a database"),
            }
        }
    }

    /// The fleet's gauges: databases listed and relayed here, and the state of every database of
    /// the list, each look (a database no longer listed is no longer set: an exporter with an idle
    /// timeout drops its series).
    fn report(&self, databases: &[FleetDatabase], relayed: &BTreeMap<String, Relayed>) {
        use crate::metrics as m;
        metrics::gauge!(m::FLEET_DATABASES).set(databases.len() as f64);
        metrics::gauge!(m::FLEET_RELAYING).set(relayed.len() as f64);
        for database in databases {
            let name = database.name.clone();
            let here = relayed.get(&name);
            let failing = here.is_some_and(|r| !r.relay.health().database_reachable);
            metrics::gauge!(m::FLEET_RELAYED, "database" => name.clone()).set(if here.is_some() { 1.0 } else { 0.0 });
            metrics::gauge!(m::FLEET_FAILING, "database" => name).set(if failing { 1.0 } else { 0.0 });
        }
    }
}

/// Logs why a database's relay ended, if it ended with an error.
fn report_stopped(stopped: std::result::Result<(String, Result<()>), tokio::task::JoinError>) {
    match stopped {
        Ok((_, Ok(()))) => {}
        Ok((name, Err(e))) => {
            tracing::warn!(database = %name, error = %e, "the relay of a database ended with an error")
        }
        Err(e) => tracing::warn!(error = %e, "the shutdown of a database's relay failed"),
    }
}

impl From<watch::error::SendError<Vec<FleetDatabase>>> for Error {
    fn from(_: watch::error::SendError<Vec<FleetDatabase>>) -> Self {
        Error::Stopped
    }
}
