//! [`FleetBuilder`]: the databases of a fleet, the relay each of them gets, and how the fleet's
//! processes share them.

use std::sync::Arc;
use std::time::Duration;

use outbox_types::Publisher;
use tokio::sync::watch;

use super::database::FleetDatabase;
use super::run::Fleet;
use super::settings::{Configure, FleetSettings, check_list, relay_builder};
use crate::Result;
use crate::relay::RelayBuilder;

/// Builder of a [`Fleet`]. Every setting has a default.
pub struct FleetBuilder<P> {
    publisher: P,
    databases: Vec<FleetDatabase>,
    configure: Configure<P>,
    settings: FleetSettings,
}

impl<P> std::fmt::Debug for FleetBuilder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetBuilder")
            .field("databases", &self.databases)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<P: Publisher + Clone> Fleet<P> {
    /// Starts a builder of a fleet publishing with `publisher` (one connection to the broker for
    /// every database of the process).
    pub fn builder(publisher: P) -> FleetBuilder<P> {
        FleetBuilder {
            publisher,
            databases: Vec::new(),
            configure: Arc::new(|b| b),
            settings: FleetSettings {
                connections_per_database: FleetBuilder::<P>::DEFAULT_CONNECTIONS_PER_DATABASE,
                fleet_database: None,
                look_every: FleetBuilder::<P>::DEFAULT_LOOK_EVERY,
                connect_timeout: Duration::from_secs(5),
            },
        }
    }
}

impl<P: Publisher + Clone> FleetBuilder<P> {
    /// Connections each database's relay opens at most (they close after 10 s unused).
    pub const DEFAULT_CONNECTIONS_PER_DATABASE: u32 = 1;
    /// How often the fleet reads its members and reassigns the databases.
    pub const DEFAULT_LOOK_EVERY: Duration = Duration::from_secs(2);

    /// The databases to relay (see [`FleetDatabase::parse_list`]); a running fleet takes a new
    /// list with [`FleetHandle::set_databases`](super::FleetHandle::set_databases).
    #[must_use]
    pub fn databases(mut self, databases: Vec<FleetDatabase>) -> Self {
        self.databases = databases;
        self
    }

    /// How each database's relay is set up: the exchange, the routing, the batch size, retention
    /// and every other [`RelayBuilder`] setting, applied to every database. The fleet has set
    /// [`RelayBuilder::database_name`], [`RelayBuilder::max_connections`] and
    /// [`RelayBuilder::notifications`]`(false)` before; `configure` may change them.
    #[must_use]
    pub fn relay(mut self, configure: impl Fn(RelayBuilder<P>) -> RelayBuilder<P> + Send + Sync + 'static) -> Self {
        self.configure = Arc::new(configure);
        self
    }

    /// Connections each database's relay opens at most: 1 by default. A process holds at most
    /// this many per database it relays, and one more for the fleet's membership; each database
    /// is relayed by one process of the fleet at a time.
    #[must_use]
    pub fn connections_per_database(mut self, n: u32) -> Self {
        self.settings.connections_per_database = n.max(1);
        self
    }

    /// The database (by name, one of the list) whose `pg_locks` tell the fleet's processes about
    /// each other. Defaults to the first of the list. Every process of a fleet must name the same
    /// one.
    #[must_use]
    pub fn fleet_database(mut self, name: impl Into<String>) -> Self {
        self.settings.fleet_database = Some(name.into());
        self
    }

    /// How often the fleet reads its members and reassigns the databases: 2 s by default. A
    /// process that dies leaves its databases to the others within this interval (and its claims
    /// to whoever takes them, when their lease ends).
    #[must_use]
    pub fn look_every(mut self, every: Duration) -> Self {
        self.settings.look_every = every.max(Duration::from_millis(10));
        self
    }

    /// Builds the fleet. Nothing connects yet.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) if the relay setup is invalid (tried
    /// on the first database) or the fleet's database is not in the list;
    /// [`Error::InvalidList`](crate::Error::InvalidList) if a name is listed twice.
    pub fn build(self) -> Result<Fleet<P>> {
        check_list(&self.databases, self.settings.fleet_database.as_deref())?;
        if let Some(first) = self.databases.first() {
            // The same setup for every database: an invalid one fails here, not per database.
            drop(relay_builder(&self.publisher, &self.configure, &self.settings, first).build()?);
        }
        let (databases, _) = watch::channel(self.databases);
        Ok(Fleet {
            publisher: self.publisher,
            configure: self.configure,
            settings: self.settings,
            databases: Arc::new(databases),
        })
    }
}
