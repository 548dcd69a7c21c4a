//! What a fleet is made with: its own settings, the user's setup of each database's relay and the
//! fleet's defaults under it, and the checks of a list of databases.

use std::sync::Arc;
use std::time::Duration;

use outbox_types::Publisher;

use super::database::FleetDatabase;
use crate::relay::{Relay, RelayBuilder};
use crate::{Error, Result};

/// The fast poll of a fleet's relays, while busy and for `linger` after: fifty relays polling
/// every 5 ms (a relay's default) spend the host's CPU on empty claims.
pub(super) const FAST_POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Consecutive events of one entity a fleet's relay claims at most: a database of a fleet holds
/// few entities, and with a relay's default of 4 its claims stayed far below the batch size (80
/// rows for 20 entities), so the claims and records per event, not the broker, set the pace.
pub(super) const EVENTS_PER_ENTITY: usize = 32;

/// How long a fleet's relay waits for a lock on its database's outbox tables: a table another
/// session holds locked makes its claims fail and report, instead of waiting unseen.
pub(super) const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// How each database's relay is made from the fleet's defaults.
pub(super) type Configure<P> = Arc<dyn Fn(RelayBuilder<P>) -> RelayBuilder<P> + Send + Sync>;

/// The fleet's own settings.
#[derive(Debug, Clone)]
pub(super) struct FleetSettings {
    pub(super) connections_per_database: u32,
    pub(super) fleet_database: Option<String>,
    pub(super) look_every: Duration,
    pub(super) connect_timeout: Duration,
}

/// Checks a list: names unique, the fleet's database among them.
pub(super) fn check_list(databases: &[FleetDatabase], fleet_database: Option<&str>) -> Result<()> {
    for (i, d) in databases.iter().enumerate() {
        if databases[..i].iter().any(|e| e.name == d.name) {
            return Err(Error::InvalidList(format!("the name {} is listed twice", d.name)));
        }
    }
    if let Some(name) = fleet_database
        && !databases.iter().any(|d| d.name == name)
    {
        return Err(Error::InvalidList(format!("the fleet's database {name} is not in the list")));
    }
    Ok(())
}

/// The relay of `database`: the fleet's defaults, then the user's setup.
pub(super) fn relay_builder<P: Publisher + Clone>(
    publisher: &P,
    configure: &Configure<P>,
    settings: &FleetSettings,
    database: &FleetDatabase,
) -> RelayBuilder<P> {
    let builder = Relay::builder(database.connect.clone(), publisher.clone())
        .database_name(database.name.clone())
        .max_connections(settings.connections_per_database)
        .notifications(false)
        .fast_poll_interval(FAST_POLL_INTERVAL)
        .events_per_entity(EVENTS_PER_ENTITY)
        .lock_timeout(LOCK_TIMEOUT);
    configure(builder)
}
