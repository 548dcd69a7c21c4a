//! [`RelayBuilder`]: every setting of a relay with its default, and the relay's own connections.

use std::sync::Arc;
use std::time::Duration;

use outbox_amqp::{AmqpPublisher, Topology};
use outbox_types::{ExchangeKind, Publisher, RetryPolicy};
use sqlx::postgres::PgConnectOptions;
use uuid::Uuid;

use super::run::Relay;
#[cfg(feature = "fail-points")]
use super::settings::CrashPoint;
use super::settings::Settings;
use super::shared::Shared;
use crate::defaults;
use crate::routing::{ByEventType, Partitioned, RoutingStrategy};
use crate::store;
use crate::{Error, Result};

impl<P: Publisher> Relay<P> {
    /// Starts a builder over the outbox in `database` (the service's `&PgPool`, or
    /// `PgConnectOptions`), publishing with `publisher`.
    ///
    /// The relay opens connections of its own with the same connect options: a pool sized for its
    /// confirm window (two connections per full batch in flight, and three for claiming, listening
    /// and housekeeping), each with the planner settings its claim relies on, `synchronous_commit`
    /// as [`RelayBuilder::synchronous_commit`] says, and a 3 s wait for a free connection. So the
    /// relay never takes connections the service's pool counts on.
    pub fn builder(database: impl IntoConnectOptions, publisher: P) -> RelayBuilder<P> {
        RelayBuilder::new(database.into_connect_options(), publisher)
    }
}

/// Where the relay connects: the connect options of a pool the service already has (`&PgPool`),
/// or connect options of its own (`PgConnectOptions`).
pub trait IntoConnectOptions {
    /// The options the relay opens its own connections with.
    fn into_connect_options(self) -> PgConnectOptions;
}

impl IntoConnectOptions for PgConnectOptions {
    fn into_connect_options(self) -> PgConnectOptions {
        self
    }
}

impl IntoConnectOptions for &PgConnectOptions {
    fn into_connect_options(self) -> PgConnectOptions {
        self.clone()
    }
}

impl IntoConnectOptions for &sqlx::PgPool {
    fn into_connect_options(self) -> PgConnectOptions {
        sqlx::Pool::connect_options(self).as_ref().clone()
    }
}

/// Builder of a [`Relay`]. Every setting has a default suited to a production service.
pub struct RelayBuilder<P> {
    connect: PgConnectOptions,
    publisher: P,
    routing: Arc<dyn RoutingStrategy>,
    settings: Settings,
}

impl<P> std::fmt::Debug for RelayBuilder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayBuilder").field("settings", &self.settings).finish_non_exhaustive()
    }
}

fn default_relay_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "relay".to_owned());
    let short = Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &short[..8])
}

impl<P: Publisher> RelayBuilder<P> {
    /// A builder over the outbox in the database `connect` leads to, publishing with `publisher`,
    /// with every default (see [`Relay::builder`]).
    fn new(connect: PgConnectOptions, publisher: P) -> Self {
        RelayBuilder {
            connect,
            publisher,
            routing: Arc::new(ByEventType),
            settings: Settings {
                relay_id: default_relay_id(),
                batch_size: defaults::BATCH_SIZE,
                events_per_entity: defaults::EVENTS_PER_ENTITY,
                confirm_window: defaults::CONFIRM_WINDOW,
                lease: defaults::LEASE,
                poll_interval: defaults::POLL_INTERVAL,
                linger: defaults::LINGER,
                fast_poll_interval: defaults::FAST_POLL_INTERVAL,
                confirm_timeout: defaults::CONFIRM_TIMEOUT,
                shutdown_deadline: defaults::SHUTDOWN_DEADLINE,
                retry: RetryPolicy::default(),
                exchange: defaults::EXCHANGE.to_owned(),
                exchange_kind: ExchangeKind::Topic,
                declare_exchange: true,
                app_id: None,
                synchronous_commit: false,
                lock_timeout: None,
                vacuum_after: Some(defaults::VACUUM_AFTER_ROWS),
                gauge_interval: Some(defaults::GAUGE_INTERVAL),
                recheck_passed_rows: defaults::RECHECK_PASSED_ROWS,
                summary_interval: Some(defaults::SUMMARY_INTERVAL),
                retention: None,
                retention_interval: defaults::RETENTION_INTERVAL,
                cipher: None,
                end_to_end: false,
                database: None,
                max_connections: None,
                notifications: true,
                #[cfg(feature = "fail-points")]
                crash_at: None,
            },
        }
    }

    /// Sets the name this instance records as the owner of its claims. Defaults to
    /// `<HOSTNAME>-<pid>-<random>`.
    #[must_use]
    pub fn relay_id(mut self, id: impl Into<String>) -> Self {
        self.settings.relay_id = id.into();
        self
    }

    /// Sets how many rows one claim takes. Defaults to 500.
    #[must_use]
    pub fn batch_size(mut self, n: usize) -> Self {
        self.settings.batch_size = n.max(1);
        self
    }

    /// Sets how many consecutive events of one entity a claim takes at most. They go out one
    /// after the other: each is published as soon as the broker confirmed the one before (never
    /// earlier), within the batch's confirm timeout; if one is not confirmed, the rest of its
    /// entity's events in the batch are given back unsent. More than one lets an entity with a
    /// backlog move several events per claim instead of one per claim-publish-record round.
    /// Defaults to 4; 1 takes one event per entity per claim.
    #[must_use]
    pub fn events_per_entity(mut self, n: usize) -> Self {
        self.settings.events_per_entity = n.max(1);
        self
    }

    /// Sets how many messages may await their broker confirm (and the record of their outcome) at
    /// once. The relay keeps claiming and publishing while earlier batches await their confirms,
    /// until this many messages are in flight; a claim then waits for room for a full batch.
    /// Defaults to 1,000.
    #[must_use]
    pub fn confirm_window(mut self, n: usize) -> Self {
        self.settings.confirm_window = n.max(1);
        self
    }

    /// Sets how long a claim lasts. A crashed relay's rows are taken over once it expires.
    /// Defaults to 30 s.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.settings.lease = lease;
        self
    }

    /// Sets how often the relay looks for due rows when no notification came (the safety net for
    /// lost notifications and for retries coming due). Defaults to 1 s.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.settings.poll_interval = interval;
        self
    }

    /// Sets how long the relay keeps polling every `fast_poll_interval` after its last work before
    /// it waits for notifications. While it polls, commits do not notify (a notifying commit takes
    /// a server-wide lock, so commits under load would run one at a time). Defaults to 200 ms.
    #[must_use]
    pub fn linger(mut self, linger: Duration) -> Self {
        self.settings.linger = linger;
        self
    }

    /// Sets how often the relay polls while it is busy and while it lingers after work, counted
    /// from the start of the previous claim. Defaults to 5 ms.
    #[must_use]
    pub fn fast_poll_interval(mut self, interval: Duration) -> Self {
        self.settings.fast_poll_interval = interval;
        self
    }

    /// Sets how long the relay waits for a batch's confirms; a message not confirmed by then is
    /// retried later with the same event id. Must be shorter than the lease. Defaults to 10 s.
    #[must_use]
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.settings.confirm_timeout = timeout;
        self
    }

    /// Sets how long a graceful shutdown may take: in-flight confirms are awaited until then,
    /// then what was confirmed is recorded and the rest released. Defaults to 10 s.
    #[must_use]
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.settings.shutdown_deadline = deadline;
        self
    }

    /// Sets the retry policy for failed publishes. Defaults to [`RetryPolicy::default`].
    #[must_use]
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.settings.retry = policy;
        self
    }

    /// Sets the exchange events are published to. Defaults to `outbox.events`.
    #[must_use]
    pub fn exchange(mut self, name: impl Into<String>) -> Self {
        self.settings.exchange = name.into();
        self
    }

    /// Sets the exchange type used when declaring it. Defaults to [`ExchangeKind::Topic`].
    #[must_use]
    pub fn exchange_kind(mut self, kind: ExchangeKind) -> Self {
        self.settings.exchange_kind = kind;
        self
    }

    /// Sets whether the relay declares the exchange (durable) at start and after reconnects, or
    /// assumes it exists. Defaults to `true`.
    #[must_use]
    pub fn declare_exchange(mut self, declare: bool) -> Self {
        self.settings.declare_exchange = declare;
        self
    }

    /// Sets the routing strategy. Defaults to [`ByEventType`].
    #[must_use]
    pub fn routing(mut self, strategy: impl RoutingStrategy) -> Self {
        self.routing = Arc::new(strategy);
        self
    }

    /// Sets the AMQP `app_id` (the producing service) on every message. Defaults to none.
    #[must_use]
    pub fn app_id(mut self, app_id: impl Into<String>) -> Self {
        self.settings.app_id = Some(app_id.into());
        self
    }

    /// Sets whether the relay's own writes (claims, outcomes) wait for the WAL flush. Defaults to
    /// `false`: the relay opens its own connections (from the pool's connect options) with
    /// `synchronous_commit = off`. Nothing the relay writes needs to survive a database crash: a
    /// lost outcome means the event is published again with the same id (at-least-once), a lost
    /// claim means the row is claimed again. The producers' own commits are not affected.
    #[must_use]
    pub fn synchronous_commit(mut self, on: bool) -> Self {
        self.settings.synchronous_commit = on;
        self
    }

    /// Sets how long a statement of the relay waits for a lock on the outbox's tables before it
    /// fails (PostgreSQL's `lock_timeout` on the relay's own connections). A claim that fails so is
    /// reported like a database that does not answer (a WARN line, the relay's health, a fleet's
    /// `outbox_fleet_database_failing`) and retried with back-off, instead of waiting unseen while
    /// another session holds the table (a migration, `VACUUM FULL`). Defaults to none (wait as
    /// long as the lock is held); a fleet's relays wait 10 s.
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        // PostgreSQL takes milliseconds in an `int`, and reads 0 as no timeout.
        self.settings.lock_timeout =
            Some(timeout.clamp(Duration::from_millis(1), Duration::from_millis(i32::MAX as u64)));
        self
    }

    /// Sets after how many rows this relay marked published it vacuums the outbox table
    /// (`VACUUM (SKIP_LOCKED) outbox_events`, in the background), or `None` to leave that to
    /// autovacuum. Defaults to 100,000 rows.
    ///
    /// Every published row leaves a dead entry at the old end of the queue index, which each claim
    /// steps over until a vacuum removes it: without one the claim's cost grows with the rows
    /// published since the last vacuum (a long drain slows down as they pile up; figures in
    /// BENCHMARKS.md), and autovacuum's default trigger (a fifth of the table) comes late for a large
    /// table. The vacuum takes no lock that claims, marks or producers wait for, skips the table
    /// when another vacuum holds it, and is a no-op with a warning in the server log when the
    /// relay's role does not own the table.
    #[must_use]
    pub fn vacuum_after(mut self, rows: Option<u64>) -> Self {
        self.settings.vacuum_after = rows.filter(|n| *n > 0);
        self
    }

    /// Sets the least time between two looks below the queue's low water for rows that no signal
    /// announced. The claim scans the queue from its low water, a position below which no row can
    /// be claimed (see `docs/architecture.md`), so that its cost does not grow with the rows
    /// published while another session holds an old snapshot. Rows that commit late are waited
    /// for (2 s at most; the end of a transaction open longer asks for a look at once), and a row
    /// that becomes due below it is announced (an operator's retry or skip notifies the relays, the
    /// relay's own re-check of held rows looks at once); this look catches anything
    /// else, such as a row made due by hand in SQL, or a notification lost with a connection. Each
    /// look walks the queue from its start, so it also runs no more often than once per hundred
    /// times its own duration. Defaults to 30 s.
    #[must_use]
    pub fn recheck_passed_rows(mut self, every: Duration) -> Self {
        self.settings.recheck_passed_rows = every;
        self
    }

    /// Sets how often the relay reads the backlog into its gauges (`outbox_events_waiting`,
    /// `outbox_events_held`, the oldest ages, `outbox_events_quarantined`, `outbox_expired_leases`,
    /// `outbox_entities_behind`, `outbox_largest_entity_gap`), or `None` for never. Defaults to
    /// 10 s. The query ([`outbox_ops::admin::backlog`]) is served by the partial indexes of
    /// pending, held and quarantined rows and reads a capped number of them, so its cost does not
    /// grow with the table's history. Each relay reports it; the values are the same.
    #[must_use]
    pub fn gauge_interval(mut self, every: Option<Duration>) -> Self {
        self.settings.gauge_interval = every.filter(|d| !d.is_zero());
        self
    }

    /// Sets how often the relay logs its summary at `info` (`outbox.summary`: events published,
    /// failures by kind and rows taken over since the last one, what waits and the oldest age), or
    /// `None` for never. Defaults to a minute.
    #[must_use]
    pub fn summary_interval(mut self, every: Option<Duration>) -> Self {
        self.settings.summary_interval = every.filter(|d| !d.is_zero());
        self
    }

    /// Runs outbox retention in the relay: every `retention_interval` (a minute by default) it
    /// deletes final rows as `retention` says, in its bounded batches. `None` (the default): no
    /// retention in the relay. Every relay on a database may run it at once: each batch locks its
    /// rows with `SKIP LOCKED`, so they share the work and never wait on each other, and a
    /// waiting, claimed, held or quarantined row is never touched.
    #[must_use]
    pub fn retention(mut self, retention: Option<outbox_ops::Retention>) -> Self {
        self.settings.retention = retention;
        self
    }

    /// Sets how often the relay runs its retention (see [`RelayBuilder::retention`]). Defaults to
    /// a minute.
    #[must_use]
    pub fn retention_interval(mut self, every: Duration) -> Self {
        self.settings.retention_interval = every.max(Duration::from_millis(1));
        self
    }

    /// Opens sealed payloads with `cipher` before publishing (the producer's `OutboxBuilder::cipher`
    /// sealed them; the message carries the payload in plain, as always). A row sealed with a key
    /// the cipher does not have, or whose sealed bytes fail authentication, is quarantined as a
    /// contract failure and nothing of it is published. Defaults to none: sealed rows are then
    /// quarantined the same way.
    #[must_use]
    pub fn cipher(mut self, cipher: outbox_types::PayloadCipher) -> Self {
        self.settings.cipher = Some(cipher);
        self
    }

    /// Publishes sealed payloads as they are stored (end-to-end encryption): the message body is
    /// the sealed bytes and the header `x-outbox-payload-key` names the key; a consumer whose
    /// runner has the keys (`InboxRunnerBuilder::cipher`) opens them. The relay then needs no key.
    /// Plain rows go out as always. Defaults to `false`: the relay opens sealed payloads.
    #[must_use]
    pub fn end_to_end(mut self, on: bool) -> Self {
        self.settings.end_to_end = on;
        self
    }

    /// Names the relay's database in its metrics (label `database`) and log lines (field
    /// `database`). Give a short, stable name, never the URL: it is what a dashboard groups by.
    /// Defaults to none: no label, as for a relay of one database. Every relay of a
    /// [`Fleet`](crate::fleet::Fleet) has its database's name.
    #[must_use]
    pub fn database_name(mut self, name: impl Into<String>) -> Self {
        self.settings.database = Some(name.into());
        self
    }

    /// Bounds the relay's pool to `n` connections (at least 1), which close after 10 s unused
    /// ([`defaults::IDLE_CONNECTION`]). Defaults to a pool sized for the confirm window (two
    /// connections per full batch and four more, kept open): what a relay of one database wants,
    /// and too many for a process that relays many databases against PostgreSQL's
    /// `max_connections`. A relay whose work waits for its connections is slower, not wrong.
    #[must_use]
    pub fn max_connections(mut self, n: u32) -> Self {
        self.settings.max_connections = Some(n.max(1));
        self
    }

    /// Whether the relay LISTENs for commits: `true` (the default) keeps a connection for the
    /// LISTEN and, while it waits, one for its presence, so that a commit wakes an idle relay at
    /// once. `false` saves both connections: the relay finds new events by polling
    /// ([`RelayBuilder::poll_interval`]) and commits never notify it. A relay of many databases
    /// polls, since two connections per database would exceed PostgreSQL's `max_connections`.
    #[must_use]
    pub fn notifications(mut self, on: bool) -> Self {
        self.settings.notifications = on;
        self
    }

    /// Arms a crash point: the relay stops there as if its process died. For failure tests.
    #[cfg(feature = "fail-points")]
    #[must_use]
    pub fn crash_at(mut self, point: CrashPoint) -> Self {
        self.settings.crash_at = Some(point);
        self
    }

    /// Builds the relay.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the confirm timeout is not shorter than the lease.
    pub fn build(self) -> Result<Relay<P>> {
        crate::metrics::describe();
        let s = &self.settings;
        if s.confirm_timeout >= s.lease {
            return Err(Error::InvalidConfig("confirm_timeout must be shorter than lease"));
        }
        if s.lease.is_zero() || s.poll_interval.is_zero() {
            return Err(Error::InvalidConfig("lease and poll_interval must be positive"));
        }
        // The relay's own connections, with the planner settings its claim relies on (see
        // `store::SESSION`).
        let batches = s.full_batches();
        let mut session: Vec<(&str, String)> = store::SESSION.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        if !s.synchronous_commit {
            session.push(("synchronous_commit", "off".to_owned()));
        }
        if let Some(timeout) = s.lock_timeout {
            session.push(("lock_timeout", format!("{}ms", timeout.as_millis())));
        }
        let sized = u32::try_from(batches * 2 + 4).unwrap_or(16);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(s.max_connections.unwrap_or(sized))
            // A relay of many databases keeps few connections: those idle for a while close.
            .idle_timeout(s.max_connections.map(|_| defaults::IDLE_CONNECTION))
            // The pool is sized for the relay's own work, so a connection is free at once or the
            // database is away: a statement waits for one only briefly, and a shutdown during an
            // outage is not held up by sqlx's default of 30 s. A bounded pool's statements queue
            // for its connections by design, so they may wait longer.
            .acquire_timeout(if s.max_connections.is_some() { BOUNDED_ACQUIRE } else { Duration::from_secs(3) })
            // A wait for a connection is not a fault: `outbox_relay_claim_seconds` and
            // `outbox_relay_record_seconds` measure it.
            .acquire_slow_level(tracing::log::LevelFilter::Info)
            .connect_lazy_with(relay_connect_options(self.connect, session));
        Ok(Relay { shared: Arc::new(Shared::new(pool, self.publisher, self.routing, self.settings)) })
    }
}

impl RelayBuilder<AmqpPublisher> {
    /// Publishes to `topology`'s exchange with the routing it implies (by event type to a queue,
    /// or [`Partitioned`] by entity over its partitions), and has the publisher declare all of it
    /// (exchange, queues, bindings, dead letters) on every connection: the consumer's queue exists
    /// before the first event is published to it, whichever side starts first. Pass the same
    /// topology to the consumer (`InboxRunnerBuilder::topology`).
    #[must_use]
    pub fn topology(mut self, topology: &Topology) -> Self {
        self.publisher.declare_on_connect(topology);
        self.settings.exchange.clone_from(&topology.exchange);
        self.settings.exchange_kind = ExchangeKind::Topic;
        self.settings.declare_exchange = true;
        self.routing = match topology.partitions() {
            Some((prefix, partitions)) => Arc::new(Partitioned::new(partitions).prefix(prefix)),
            None => Arc::new(ByEventType),
        };
        self
    }
}

/// How long a statement of a relay with a bounded pool waits for a connection before it fails.
const BOUNDED_ACQUIRE: Duration = Duration::from_secs(10);

/// The relay's own connections: the given connect options with the relay's session settings. A
/// statement slower than a second is logged at INFO, not sqlx's WARN: a claim or a recording can
/// take that long on a busy server, which `outbox_relay_claim_seconds` and
/// `outbox_relay_record_seconds` measure; it is not a fault.
fn relay_connect_options(connect: PgConnectOptions, session: Vec<(&str, String)>) -> PgConnectOptions {
    use sqlx::ConnectOptions;
    connect.options(session).log_slow_statements(tracing::log::LevelFilter::Info, Duration::from_secs(1))
}
