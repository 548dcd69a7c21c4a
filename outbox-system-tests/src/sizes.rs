//! How big each sized test is, in both tiers, in one place.
//!
//! The **fast tier** is the README's `cargo test --workspace`: every guarantee and every failure
//! scenario has a test in it, at the smallest size that still proves the property (a backlog big
//! enough for a fault to land mid-drain, for several batches and confirm windows to be in flight).
//! The **long tier** is `cargo test --workspace -- --ignored`: each sized test again at the sizes
//! below marked `long` (the test of the same name ending in `_long_tier`, marked
//! `#[ignore = "long tier"]`), and the tests that
//! only make sense at length (the three-node cluster). CI runs both. docs/testing.md says which
//! test proves what.

use std::time::Duration;

use crate::Load;

/// A size in each tier.
#[derive(Debug, Clone, Copy)]
pub struct Tiered<T> {
    /// The README's `cargo test --workspace`.
    pub fast: T,
    /// `cargo test --workspace -- --ignored`.
    pub long: T,
}

/// The relay through outages of its servers (`outbox-relayer`'s `outages`): the fault lands once a
/// tenth of the backlog is out, and more than a confirm window (400) must still go out after it
/// (each test fails, saying so, if the fault landed too late on a fast host).
pub const OUTAGE_BACKLOG: Tiered<Load> =
    Tiered { fast: Load { entities: 100, per_entity: 100 }, long: Load { entities: 200, per_entity: 100 } };

/// How long the broker stays unreachable in the relay's broker-outage test: several times the
/// retry policy's `max_age` (2 s) that an outage charged to the events would exceed.
pub const BROKER_OUTAGE: Tiered<Duration> = Tiered { fast: Duration::from_secs(6), long: Duration::from_secs(15) };

/// A backlog committed while no relay runs, then drained in entity order (`outbox-relayer`'s
/// `relay`); plus `entities / 2` events without entity.
pub const RELAY_BACKLOG: Tiered<Load> =
    Tiered { fast: Load { entities: 200, per_entity: 10 }, long: Load { entities: 1000, per_entity: 50 } };

/// The `outbox relay` process stopped by SIGTERM or SIGKILL mid-drain (`outbox-cli`'s
/// `relay_process`): the signal comes once a tenth of the backlog is published.
pub const RELAY_PROCESS_BACKLOG: Tiered<Load> =
    Tiered { fast: Load { entities: 200, per_entity: 40 }, long: Load { entities: 200, per_entity: 60 } };

/// Events committed in each of the fifty databases two `outbox relay` processes share
/// (`outbox-cli`'s `fleet`), in each of its two waves.
pub const FLEET_PER_DATABASE: Tiered<Load> =
    Tiered { fast: Load { entities: 10, per_entity: 4 }, long: Load { entities: 20, per_entity: 10 } };

/// Three `outbox relay` processes draining one database (scenario 5 at scale), all started before
/// the backlog is committed.
pub const THREE_RELAYS_BACKLOG: Tiered<Load> =
    Tiered { fast: Load { entities: 150, per_entity: 20 }, long: Load { entities: 500, per_entity: 40 } };

/// Scenario 8: a backlog of order versions written while no relay runs, drained in order.
pub const SCENARIO_BACKLOG: Tiered<Load> =
    Tiered { fast: Load { entities: 1000, per_entity: 5 }, long: Load { entities: 1000, per_entity: 50 } };

/// An `outbox replay` process killed mid-job, then resumed (`outbox-cli`'s `replay`): at 2,000
/// events a second, the kill comes once a quarter is sent.
pub const REPLAY_PROCESS_BACKLOG: Tiered<Load> =
    Tiered { fast: Load { entities: 100, per_entity: 30 }, long: Load { entities: 200, per_entity: 50 } };

/// A consumer that joins late, bootstrapped by a replay while half the events are still being
/// written (`outbox-system-tests`' `replay`): the long tier is issue 31's acceptance size.
pub const REPLAY_BOOTSTRAP: Tiered<Load> =
    Tiered { fast: Load { entities: 100, per_entity: 20 }, long: Load { entities: 200, per_entity: 50 } };

/// A replay to a consumer that applied every event: dropped as duplicates (one size: the property
/// does not grow with it).
pub const REPLAY_DUPLICATES: Load = Load { entities: 20, per_entity: 25 };

/// Writers committing business changes with their events while the relay publishes them over
/// partitions and two consumers apply them (`outbox-inbox`'s `partitions`).
pub const PARTITIONED_WRITES: Tiered<Writes> =
    Tiered { fast: Writes { writers: 8, per_writer: 250 }, long: Writes { writers: 8, per_writer: 1250 } };

/// The chaos soak (`outbox-system-tests`' `chaos`); its `OUTBOX_CHAOS_*` variables still override
/// each field.
pub const CHAOS: Tiered<Chaos> = Tiered {
    fast: Chaos { events: 3_000, entities: 100, kills: 2 },
    long: Chaos { events: 10_000, entities: 200, kills: 3 },
};

/// Connections closed with their channels, none of which may log an error (`close`).
pub const CLOSES: Tiered<usize> = Tiered { fast: 25, long: 100 };

/// Old published rows `outbox cleanup` deletes in batches beside rows in every other state
/// (`outbox-cli`'s `cleanup`): several batches of the default size, a few seconds.
pub const CLEANUP_OLD_ROWS: i64 = 100_000;

/// Old published rows three relays delete while they publish (`outbox-relayer`'s `retention`).
pub const RETENTION_OLD_ROWS: i64 = 30_000;

/// The three-node cluster test's backlog (long tier only: starting three RabbitMQ nodes takes
/// minutes).
pub const CLUSTER_BACKLOG: Load = Load { entities: 500, per_entity: 100 };

/// Concurrent writers and the transactions each commits.
#[derive(Debug, Clone, Copy)]
pub struct Writes {
    /// Writer tasks.
    pub writers: usize,
    /// Transactions per writer, one event each.
    pub per_writer: usize,
}

impl Writes {
    /// Events in all.
    pub const fn events(self) -> usize {
        self.writers * self.per_writer
    }
}

/// The chaos soak's size.
#[derive(Debug, Clone, Copy)]
pub struct Chaos {
    /// Events the producer writes.
    pub events: u64,
    /// Entities they are spread over.
    pub entities: i64,
    /// Faults of each kind.
    pub kills: usize,
}
