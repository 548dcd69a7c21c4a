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
use super::builder::{Configure, FleetSettings, relay_builder};
use super::database::FleetDatabase;
use super::handle::FleetHandle;
use super::members::Members;
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
        let databases = self.databases.clone();
        let task = tokio::spawn(self.run(async move {
            let _ = rx.wait_for(|s| *s).await;
        }));
        FleetHandle { stop, task, databases }
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
                while stopping.try_join_next().is_some() {}
            }
            for (_, r) in std::mem::take(&mut relayed) {
                stopping.spawn(r.relay.shutdown());
            }
            while stopping.join_next().await.is_some() {}
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
            Some(d) => members.look(&d.name, &d.connect, self.settings.connect_timeout).await.to_vec(),
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
        stopping: &mut JoinSet<Result<()>>,
    ) {
        let gone: Vec<String> = relayed
            .iter()
            .filter(|(name, r)| mine.get(*name).is_none_or(|d| fingerprint(d) != r.connect) || r.relay.is_finished())
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            let Some(r) = relayed.remove(&name) else { continue };
            if r.relay.is_finished() {
                tracing::warn!(database = %name, "the relay of a database ended; starting it again");
            } else {
                tracing::info!(database = %name, "database given back: another process of the fleet relays it");
            }
            metrics::gauge!(crate::metrics::FLEET_RELAYED, "database" => name.clone()).set(0.0);
            metrics::gauge!(crate::metrics::FLEET_FAILING, "database" => name).set(0.0);
            stopping.spawn(r.relay.shutdown());
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
                    let connect = fingerprint(&database);
                    relayed.insert(name, Relayed { relay: relay.spawn(), connect });
                }
                Err(e) => tracing::error!(database = %name, error = %e, "cannot relay a database"),
            }
        }
    }

    /// The fleet's gauges: databases listed and relayed here, and each relayed one's state.
    fn report(&self, databases: &[FleetDatabase], relayed: &BTreeMap<String, Relayed>) {
        use crate::metrics as m;
        metrics::gauge!(m::FLEET_DATABASES).set(databases.len() as f64);
        metrics::gauge!(m::FLEET_RELAYING).set(relayed.len() as f64);
        for (name, r) in relayed {
            let failing = !r.relay.health().database_reachable;
            metrics::gauge!(m::FLEET_RELAYED, "database" => name.clone()).set(1.0);
            metrics::gauge!(m::FLEET_FAILING, "database" => name.clone()).set(if failing { 1.0 } else { 0.0 });
        }
    }
}

/// Where `database` connects, as a hash: no copy of its password is kept.
fn fingerprint(database: &FleetDatabase) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{:?}", database.connect).hash(&mut h);
    h.finish()
}

impl From<watch::error::SendError<Vec<FleetDatabase>>> for Error {
    fn from(_: watch::error::SendError<Vec<FleetDatabase>>) -> Self {
        Error::Stopped
    }
}
