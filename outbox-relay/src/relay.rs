//! The relay: publishes committed outbox rows to the broker, in per-entity order, crash-safe, with
//! any number of instances on one database. See `docs/architecture.md` for how claiming, ordering
//! and recovery work.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use outbox_core::{
    Backoff, ExchangeKind, FailureKind, OutgoingMessage, PublishFailure, PublishOutcome, Publisher, RetryDecision,
    RetryPolicy, wire,
};
use sqlx::PgPool;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tracing::Instrument;
use uuid::Uuid;

use crate::routing::{ByEventType, RoutingStrategy};
use crate::store;
use crate::{Error, Result};

/// Points where a relay can be made to stop as if its process died (no further writes), for
/// failure tests. Only with the `fail-points` feature.
#[cfg(feature = "fail-points")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashPoint {
    /// Rows are claimed; nothing was published.
    AfterClaim,
    /// The batch was sent to the broker; its confirms are not awaited.
    AfterPublishBeforeConfirm,
    /// The broker confirmed the batch; nothing was marked published.
    AfterConfirmBeforeMark,
}

/// Settings of a [`Relay`]; every one has a documented default in [`RelayBuilder`].
#[derive(Debug, Clone)]
struct Settings {
    relay_id: String,
    batch_size: usize,
    events_per_entity: usize,
    confirm_window: usize,
    lease: Duration,
    poll_interval: Duration,
    linger: Duration,
    fast_poll_interval: Duration,
    confirm_timeout: Duration,
    shutdown_deadline: Duration,
    retry: RetryPolicy,
    exchange: String,
    exchange_kind: ExchangeKind,
    declare_exchange: bool,
    app_id: Option<String>,
    synchronous_commit: bool,
    vacuum_after: Option<u64>,
    #[cfg(feature = "fail-points")]
    crash_at: Option<CrashPoint>,
}

impl Settings {
    /// Full batches the confirm window holds: each may be recording its outcome while the next
    /// ones are claimed, so the relay's pool has two connections per batch (and three more for the
    /// claim, the listener and housekeeping).
    fn full_batches(&self) -> usize {
        self.confirm_window.div_ceil(self.batch_size).max(1)
    }
}

/// Builder of a [`Relay`]. Every setting has a default suited to a production service.
pub struct RelayBuilder<P> {
    pool: PgPool,
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

    /// Sets after how many rows this relay marked published it vacuums the outbox table
    /// (`VACUUM (SKIP_LOCKED) outbox_events`, in the background), or `None` to leave that to
    /// autovacuum. Defaults to 100,000 rows.
    ///
    /// Every published row leaves a dead entry at the old end of the queue index, which each claim
    /// steps over until a vacuum removes it: without one the claim's cost grows with the rows
    /// published since the last vacuum (a 1,000,000-row drain then slows to less than half its
    /// rate), and autovacuum's default trigger (a fifth of the table) comes late for a large
    /// table. The vacuum takes no lock that claims, marks or producers wait for, skips the table
    /// when another vacuum holds it, and is a no-op with a warning in the server log when the
    /// relay's role does not own the table.
    #[must_use]
    pub fn vacuum_after(mut self, rows: Option<u64>) -> Self {
        self.settings.vacuum_after = rows.filter(|n| *n > 0);
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
        let mut session = store::SESSION.to_vec();
        if !s.synchronous_commit {
            session.push(("synchronous_commit", "off"));
        }
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(u32::try_from(batches * 2 + 3).unwrap_or(16))
            // The pool is sized for the relay's own work, so a connection is free at once or the
            // database is away: a statement waits for one only briefly, and a shutdown during an
            // outage is not held up by sqlx's default of 30 s.
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy_with(relay_connect_options(&self.pool, session));
        Ok(Relay {
            shared: Arc::new(Shared {
                pool,
                publisher: self.publisher,
                routing: self.routing,
                settings: self.settings,
                wake: Notify::new(),
                crashed: AtomicBool::new(false),
                listening: AtomicBool::new(false),
                published_since_vacuum: AtomicU64::new(0),
                vacuum_due: Notify::new(),
                claiming: tokio::sync::Mutex::new(()),
            }),
        })
    }
}

/// The relay's own connections: the pool's connect options with the relay's session settings. A
/// statement slower than a second is logged at INFO, not sqlx's WARN: a claim or a recording can
/// take that long on a busy server, which `outbox_relay_claim_seconds` and
/// `outbox_relay_record_seconds` measure; it is not a fault.
fn relay_connect_options(pool: &PgPool, session: Vec<(&str, &str)>) -> sqlx::postgres::PgConnectOptions {
    use sqlx::ConnectOptions;
    (*pool.connect_options())
        .clone()
        .options(session)
        .log_slow_statements(tracing::log::LevelFilter::Info, Duration::from_secs(1))
}

struct Shared<P> {
    pool: PgPool,
    publisher: P,
    routing: Arc<dyn RoutingStrategy>,
    settings: Settings,
    wake: Notify,
    crashed: AtomicBool,
    /// Whether this relay is registered in `outbox_relay_listeners`.
    listening: AtomicBool,
    /// Rows this relay marked published since its last vacuum of the table.
    published_since_vacuum: AtomicU64,
    /// Signalled when `published_since_vacuum` reached `vacuum_after`.
    vacuum_due: Notify,
    /// Held while this relay claims (its claim loop, or [`Relay::run_batch`]). Two claims at the
    /// same moment would see the same ready rows and split them between them (`SKIP LOCKED`), each
    /// paying a full scan for half a batch.
    claiming: tokio::sync::Mutex<()>,
}

/// Publishes committed outbox rows to the broker.
///
/// Run it as a task of the producer service ([`Relay::spawn`]) or as the `outbox relay` process.
/// Any number of relays may run on one database: each row is published by one relay at a time,
/// events of one entity go out strictly one after the other in sequence order, and a crashed
/// relay's claims are taken over when its lease expires.
///
/// ```no_run
/// use outbox_relay::{AmqpPublisher, Relay};
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_relay::Error> {
/// let publisher = AmqpPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f").build();
/// let relay = Relay::builder(pool, publisher).exchange("orders").batch_size(500).build()?;
/// let handle = relay.spawn();
/// // ... serve requests ...
/// handle.shutdown().await?; // stops claiming, awaits confirms, records them, releases the rest
/// # Ok(()) }
/// ```
pub struct Relay<P> {
    shared: Arc<Shared<P>>,
}

impl<P> std::fmt::Debug for Relay<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("relay_id", &self.shared.settings.relay_id).finish_non_exhaustive()
    }
}

impl<P> Clone for Relay<P> {
    fn clone(&self) -> Self {
        Self { shared: self.shared.clone() }
    }
}

/// What one claim-publish-record round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows confirmed by the broker and marked published.
    pub published: usize,
    /// Rows scheduled for another attempt.
    pub retried: usize,
    /// Rows moved to quarantine.
    pub quarantined: usize,
    /// Rows whose claim had been taken over by another relay when the outcome was recorded.
    pub lost_claims: usize,
    /// Rows given back unpublished because the relay is shutting down.
    pub released: usize,
    /// Rows given back unsent because an earlier event of their entity in the same batch was not
    /// confirmed (see [`RelayBuilder::events_per_entity`]).
    pub held_back: usize,
    /// Rows given back because the broker could not be reached (or the connection was lost before
    /// their confirm came); no attempt is charged, and the relay pauses until the broker answers.
    pub unavailable: usize,
}

/// A running relay task.
#[derive(Debug)]
pub struct RelayHandle {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl RelayHandle {
    /// Graceful shutdown: stop claiming, await in-flight confirms up to the shutdown deadline,
    /// record what was confirmed, release the rest, and wait for the task to end.
    ///
    /// # Errors
    /// The relay's error if it had failed, or [`Error::Stopped`] if the task panicked or was aborted.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(|_| Error::Stopped)?
    }

    /// Stops the task at once, as if the process died: nothing more is written, claims stay until
    /// their lease expires.
    pub fn abort(&self) {
        self.task.abort();
    }

    /// Whether the task has ended (for example at an armed crash point).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits for the task to end on its own.
    ///
    /// # Errors
    /// The relay's error, or [`Error::Stopped`] if the task panicked or was aborted.
    pub async fn join(self) -> Result<()> {
        self.task.await.map_err(|_| Error::Stopped)?
    }
}

/// How often a relay paused by a broker outage asks the publisher whether it is connected again
/// (the publisher's own reconnect back-off decides when it really tries).
const PAUSED_CHECK: Duration = Duration::from_millis(100);

/// How long the claim loop waits after a claim that found nothing.
enum IdleWait {
    /// A fast poll while lingering: `fast_poll_interval` from the start of that claim.
    FastPoll,
    /// This long from now (waiting for a notification, or polling while it cannot register).
    For(Duration),
}

/// The claim loop's wait after a database failure: 100 ms doubling to 1 s, so that claims resume
/// within a second of the database's return.
struct DatabaseBackoff(Backoff);

impl Default for DatabaseBackoff {
    fn default() -> Self {
        Self(Backoff::new(Duration::from_millis(100), Duration::from_secs(1)))
    }
}

/// The claim loop's wait after the broker refused a whole batch: 100 ms doubling to 5 s, so that a
/// broker refusing everything is not a hot loop over the backlog.
struct RefusedBackoff(Backoff);

impl Default for RefusedBackoff {
    fn default() -> Self {
        Self(Backoff::new(Duration::from_millis(100), Duration::from_secs(5)))
    }
}

/// The claim loop's wait before it asks a publisher that could not reach the broker again: 100 ms
/// doubling to 5 s, reset when a batch gets through.
struct PauseBackoff(Backoff);

impl Default for PauseBackoff {
    fn default() -> Self {
        Self(Backoff::new(Duration::from_millis(100), Duration::from_secs(5)))
    }
}

/// The batches a relay's claim loop has handed to their delivery tasks.
#[derive(Default)]
struct Flight {
    /// Delivery tasks: each yields its row count, whether it held rows of an entity, and its report.
    tasks: JoinSet<(usize, bool, Result<BatchReport>)>,
    /// Messages claimed and not yet recorded (the confirm window's use).
    messages: usize,
    /// The loop waits for room in the window.
    want_room: bool,
    /// A recorded outcome marked rows of an entity published: their successors may be ready.
    successors: bool,
    /// No claims before this (a failing database, a broker that fails every message).
    backoff_until: Option<tokio::time::Instant>,
    /// After a failed claim, or a batch whose outcome could not be recorded.
    database_backoff: DatabaseBackoff,
    /// After a batch the broker refused whole.
    refused_backoff: RefusedBackoff,
    /// The broker could not be reached: no claims until the publisher connects again.
    paused: bool,
    /// While paused, not even a look at the publisher before this: a publisher that says it is
    /// connected while the broker keeps dropping it must not make a hot loop of claim, fail, give
    /// back.
    paused_until: Option<tokio::time::Instant>,
    /// The wait before that look: 100 ms doubling to 5 s, reset when a batch gets through.
    pause_backoff: PauseBackoff,
    /// Tokens of claims whose answer was lost with the database connection: whatever they took is
    /// given back before the next claim.
    orphaned: Vec<Uuid>,
}

impl Flight {
    /// Takes in a finished delivery task; returns whether to claim now (it made room the loop
    /// waited for, or successors of its rows may be ready).
    fn settled(
        &mut self,
        done: std::result::Result<(usize, bool, Result<BatchReport>), tokio::task::JoinError>,
    ) -> Result<bool> {
        let Ok((n, ordered, result)) = done else {
            // Only when the loop itself is dropped (the relay task aborted): nothing left to count.
            return Ok(false);
        };
        self.messages -= n;
        let room_made = std::mem::take(&mut self.want_room);
        match result {
            Ok(report) if report.unavailable > 0 => {
                if report.published > 0 {
                    self.pause_backoff.0.reset();
                }
                self.paused_until = Some(tokio::time::Instant::now() + self.pause_backoff.0.fail());
                if !self.paused {
                    tracing::warn!(
                        given_back = report.unavailable,
                        "the broker cannot be reached; claims pause until it answers (no attempt is charged)"
                    );
                }
                self.paused = true;
                self.successors |= ordered && report.published > 0;
            }
            Ok(report) if report.published > 0 || report.retried + report.quarantined == 0 => {
                self.database_backoff.0.reset();
                self.refused_backoff.0.reset();
                if report.published > 0 {
                    self.pause_backoff.0.reset();
                }
                self.backoff_until = None;
                self.successors |= ordered && report.published > 0;
            }
            Ok(_) => {
                // The broker refused every message of the batch: back off before claiming more,
                // so that it is not a hot loop over the backlog.
                let wait = self.refused_backoff.0.fail();
                self.back_off(wait);
            }
            Err(Error::Crashed) => return Err(Error::Crashed),
            Err(e) => {
                tracing::warn!(error = %e, kind = %e.kind(), "recording a batch's outcome failed for the length of its lease; its rows are published again");
                self.database_failed();
            }
        }
        Ok(room_made || self.successors)
    }

    /// No claims for `wait`.
    fn back_off(&mut self, wait: Duration) {
        self.backoff_until = Some(tokio::time::Instant::now() + wait);
    }

    /// The database failed a claim or a recording: no claims for the next database back-off;
    /// returns it.
    fn database_failed(&mut self) -> Duration {
        let wait = self.database_backoff.0.fail();
        self.back_off(wait);
        wait
    }

    /// Whether claims wait for a back-off that has not passed yet.
    fn backing_off(&self) -> bool {
        self.backoff_until.is_some_and(|t| t > tokio::time::Instant::now())
    }
}

impl<P: Publisher> Relay<P> {
    /// Starts a builder over the outbox in `pool`, publishing with `publisher`.
    pub fn builder(pool: PgPool, publisher: P) -> RelayBuilder<P> {
        RelayBuilder {
            pool,
            publisher,
            routing: Arc::new(ByEventType),
            settings: Settings {
                relay_id: default_relay_id(),
                batch_size: 500,
                events_per_entity: 4,
                confirm_window: 1000,
                lease: Duration::from_secs(30),
                poll_interval: Duration::from_secs(1),
                linger: Duration::from_millis(200),
                fast_poll_interval: Duration::from_millis(5),
                confirm_timeout: Duration::from_secs(10),
                shutdown_deadline: Duration::from_secs(10),
                retry: RetryPolicy::default(),
                exchange: "outbox.events".to_owned(),
                exchange_kind: ExchangeKind::Topic,
                declare_exchange: true,
                app_id: None,
                synchronous_commit: false,
                vacuum_after: Some(100_000),
                #[cfg(feature = "fail-points")]
                crash_at: None,
            },
        }
    }

    /// The id this relay records as the owner of its claims.
    pub fn relay_id(&self) -> &str {
        &self.shared.settings.relay_id
    }

    /// Runs the relay as a task of the current runtime.
    pub fn spawn(self) -> RelayHandle {
        let (stop, mut rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            self.run(async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
        });
        RelayHandle { stop, task }
    }

    /// Runs until `shutdown` completes, then shuts down gracefully.
    ///
    /// # Errors
    /// [`Error::Crashed`] at an armed crash point; otherwise it keeps going through database and
    /// broker failures (logging them) and returns `Ok` after a graceful shutdown.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let span = tracing::info_span!("outbox.relay", relay_id = %self.shared.settings.relay_id);
        async move {
            let s = &self.shared.settings;
            if s.declare_exchange
                && let Err(f) = self.shared.publisher.declare_exchange(&s.exchange, s.exchange_kind).await
            {
                tracing::warn!(exchange = %s.exchange, kind = %f.kind, reason = %f.reason,
                    "could not declare the exchange yet; retrying on reconnect");
            }
            let (stop_tx, stop_rx) = watch::channel(false);
            let (hard_tx, hard_rx) = watch::channel(false);
            let mut tasks = JoinSet::new();
            let relay = self.clone();
            tasks.spawn(async move { relay.worker(stop_rx, hard_rx).await }.in_current_span());
            let listener = tokio::spawn(listen(self.shared.clone()).in_current_span());
            let maintenance = tokio::spawn(maintain(self.shared.clone()).in_current_span());
            let vacuum = tokio::spawn(vacuum(self.shared.clone()).in_current_span());
            tracing::info!(batch_size = s.batch_size, confirm_window = s.confirm_window, "relay started");

            tokio::pin!(shutdown);
            let mut result = Ok(());
            tokio::select! {
                () = &mut shutdown => {}
                r = join_next_error(&mut tasks) => result = r,
            }
            listener.abort();
            maintenance.abort();
            vacuum.abort();
            if self.shared.crashed.load(Ordering::SeqCst) {
                tasks.abort_all();
                return Err(Error::Crashed);
            }
            // Graceful: stop claiming; batches in hand finish until the deadline, then cut short.
            let _ = stop_tx.send(true);
            let deadline = tokio::time::sleep(s.shutdown_deadline.mul_f64(0.8));
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    next = tasks.join_next() => match next {
                        None => break,
                        Some(Ok(Err(e))) => result = result.and(Err(e)),
                        Some(_) => {}
                    },
                    () = &mut deadline, if !*hard_tx.borrow() => { let _ = hard_tx.send(true); }
                }
            }
            if self.shared.listening.swap(false, Ordering::SeqCst)
                && let Err(e) = store::unlisten(&self.shared.pool, &s.relay_id).await
            {
                tracing::warn!(error = %e, "could not withdraw the listener registration; it expires by itself");
            }
            tracing::info!("relay stopped");
            result
        }
        .instrument(span)
        .await
    }

    /// The claim loop. It claims whenever the confirm window has room for a batch (or nothing is
    /// in flight) and work may be due, and hands each claimed batch to a task that publishes it,
    /// awaits its confirms and records the outcomes; so claiming and publishing go on while earlier
    /// batches await their confirms (a slow confirm holds back only its own entities' successors).
    ///
    /// It claims again at once after a full claim; otherwise on a notification, at the poll (fast
    /// while it lingers after work), when a recorded outcome gave the window room it lacked, or when
    /// one marked rows of an entity published (their successors may be ready now). Outcomes that
    /// arrive together count as one reason to claim.
    async fn worker(self, stop: watch::Receiver<bool>, hard: watch::Receiver<bool>) -> Result<()> {
        let s = &self.shared.settings;
        let mut flight = Flight::default();
        let mut quiet_since: Option<tokio::time::Instant> = None;
        loop {
            while let Some(done) = flight.tasks.try_join_next() {
                flight.settled(done)?;
            }
            if *stop.borrow() {
                break;
            }
            let notified = self.shared.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let limit = s.batch_size.min(s.confirm_window.saturating_sub(flight.messages));
            let wait = if flight.backing_off() {
                // The database or the broker failed the last attempts: no new claims meanwhile.
                flight.backoff_until.map(|t| t - tokio::time::Instant::now())
            } else if let Some(wait) = {
                let mut stop_rx = stop.clone();
                tokio::select! {
                    wait = self.before_claim(&mut flight) => wait,
                    _ = stop_rx.wait_for(|s| *s) => Some(Duration::ZERO),
                }
            } {
                Some(wait)
            } else if flight.messages > 0 && limit < s.batch_size.min(s.confirm_window) {
                // The window is full: wait for an outcome to make room.
                flight.want_room = true;
                None
            } else {
                flight.successors = false;
                // Fast polls are paced from the start of the claim, so a slow claim does not
                // stretch the interval between two looks at the table.
                let started = tokio::time::Instant::now();
                let since_start = |d: Duration| d.saturating_sub(started.elapsed());
                let token = Uuid::new_v4();
                match self.claim(limit, token).await {
                    Ok(claimed) if claimed.is_empty() => Some(match self.idle_wait(&mut quiet_since).await {
                        IdleWait::FastPoll => since_start(s.fast_poll_interval),
                        IdleWait::For(wait) => wait,
                    }),
                    Ok(claimed) => {
                        quiet_since = None;
                        if self.shared.listening.swap(false, Ordering::SeqCst)
                            && let Err(e) = store::unlisten(&self.shared.pool, &s.relay_id).await
                        {
                            tracing::debug!(error = %e, "could not withdraw the listener registration; it expires by itself");
                        }
                        let full = claimed.len() == limit;
                        flight.messages += claimed.len();
                        let relay = self.clone();
                        let hard = hard.clone();
                        let n = claimed.len();
                        let ordered = claimed.iter().any(|c| c.event.entity.is_some());
                        flight.tasks.spawn(
                            async move {
                                // A panic must not leak the batch's share of the window.
                                let delivered = std::panic::AssertUnwindSafe(relay.deliver(claimed, token, hard))
                                    .catch_unwind()
                                    .await
                                    .unwrap_or(Err(Error::Stopped));
                                (n, ordered, delivered)
                            }
                            .in_current_span(),
                        );
                        if full {
                            continue;
                        }
                        Some(since_start(s.fast_poll_interval))
                    }
                    Err(Error::Crashed) => return Err(Error::Crashed),
                    Err(e) => {
                        tracing::warn!(error = %e, kind = %e.kind(), "relay claim failed; retrying");
                        if matches!(e, Error::Database(_)) {
                            // The claim may have taken rows before its answer was lost.
                            flight.orphaned.push(token);
                        }
                        Some(flight.database_failed())
                    }
                }
            };
            let sleep = tokio::time::sleep(wait.unwrap_or(s.poll_interval));
            tokio::pin!(sleep);
            let mut stop_rx = stop.clone();
            loop {
                tokio::select! {
                    () = &mut notified => { quiet_since = None; break }
                    () = &mut sleep => break,
                    _ = stop_rx.wait_for(|s| *s) => break,
                    Some(done) = flight.tasks.join_next() => if flight.settled(done)? { break },
                }
            }
        }
        // Graceful: batches in hand finish (the hard stop cuts their confirm wait short).
        while let Some(done) = flight.tasks.join_next().await {
            flight.settled(done)?;
        }
        Ok(())
    }

    /// How long to wait after a claim found nothing. Linger: poll fast for a while after the last
    /// work, without asking for notifications; then register and wait for one (or for the poll).
    async fn idle_wait(&self, quiet_since: &mut Option<tokio::time::Instant>) -> IdleWait {
        let s = &self.shared.settings;
        let since = *quiet_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() < s.linger {
            return IdleWait::FastPoll;
        }
        let already = self.shared.listening.swap(true, Ordering::SeqCst);
        if let Err(e) = store::listen(&self.shared.pool, &s.relay_id, s.poll_interval * 3).await {
            // Without the registration commits do not notify: keep polling fast.
            self.shared.listening.store(false, Ordering::SeqCst);
            tracing::warn!(error = %e, "cannot register for notifications; polling");
            IdleWait::For(s.fast_poll_interval.max(Duration::from_millis(100)))
        } else if already {
            IdleWait::For(s.poll_interval)
        } else {
            // Just registered: a commit whose trigger ran before the registration may become
            // visible a moment later, so look once more shortly.
            IdleWait::For(s.fast_poll_interval * 10)
        }
    }

    #[cfg(feature = "fail-points")]
    fn crash_if(&self, point: CrashPoint) -> Result<()> {
        if self.shared.settings.crash_at == Some(point) {
            self.shared.crashed.store(true, Ordering::SeqCst);
            tracing::warn!(?point, "crash point reached: relay stops as if killed");
            return Err(Error::Crashed);
        }
        Ok(())
    }

    /// One round: claim a batch, publish it, await its confirms, record the outcomes.
    ///
    /// Exposed for tests and tools that want to drive the relay step by step.
    ///
    /// # Errors
    /// A database error (the claimed rows stay leased and are retried after the lease).
    pub async fn run_batch(&self) -> Result<BatchReport> {
        let (_tx, rx) = watch::channel(false);
        let token = Uuid::new_v4();
        let claimed = self.claim(self.shared.settings.batch_size, token).await?;
        self.deliver(claimed, token, rx).await
    }

    /// Publishes the rows `which` of a batch (taking their messages out of `outgoing`); returns
    /// their confirms, tagged with the rows' indexes.
    async fn send(
        &self,
        which: &[usize],
        outgoing: &mut [Option<OutgoingMessage>],
    ) -> Vec<impl Future<Output = (usize, PublishOutcome)> + use<P>> {
        let messages = which.iter().filter_map(|&i| outgoing[i].take()).collect();
        let sent = Instant::now();
        let confirms = self.shared.publisher.publish(messages).await;
        which
            .iter()
            .zip(confirms)
            .map(|(&i, f)| {
                f.map(move |outcome| {
                    metrics::histogram!("outbox_publish_to_confirm_seconds").record(sent.elapsed().as_secs_f64());
                    (i, outcome)
                })
            })
            .collect()
    }

    /// What must happen before the next claim: rows of claims whose answer was lost are given
    /// back, and while the broker cannot be reached the publisher must connect first. Returns how
    /// long to wait if the claim must wait.
    async fn before_claim(&self, flight: &mut Flight) -> Option<Duration> {
        while let Some(&token) = flight.orphaned.last() {
            match store::release_claim(&self.shared.pool, token).await {
                Ok(n) => {
                    tracing::debug!(released = n, "rows of a claim whose answer was lost are given back");
                    flight.orphaned.pop();
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot give back a lost claim's rows yet");
                    return Some(flight.database_failed());
                }
            }
        }
        if !flight.paused {
            return None;
        }
        if let Some(until) = flight.paused_until
            && until > tokio::time::Instant::now()
        {
            return Some(until - tokio::time::Instant::now());
        }
        match self.shared.publisher.connect().await {
            Ok(()) => {
                tracing::info!("the broker answers again; claims resume");
                flight.paused = false;
                None
            }
            // The publisher paces its own reconnects (and logs each attempt): look again soon,
            // so that claims resume as soon as it is connected.
            Err(_) => Some(PAUSED_CHECK),
        }
    }

    /// Claims up to `limit` rows under the claim token `token`.
    async fn claim(&self, limit: usize, token: Uuid) -> Result<Vec<store::Claimed>> {
        let s = &self.shared.settings;
        let claimed = {
            let _one_at_a_time = self.shared.claiming.lock().await;
            let started = Instant::now();
            let taken =
                store::claim(&self.shared.pool, limit, s.events_per_entity, &s.relay_id, token, s.lease).await?;
            metrics::histogram!("outbox_relay_claim_seconds").record(started.elapsed().as_secs_f64());
            self.set_aside_corrupt(taken, token).await?
        };
        metrics::counter!("outbox_relay_claims_total", "found" => if claimed.is_empty() { "none" } else { "rows" })
            .increment(1);
        let now = SystemTime::now();
        for c in &claimed {
            metrics::histogram!("outbox_event_age_at_claim_seconds")
                .record(now.duration_since(c.event.created_at).unwrap_or_default().as_secs_f64());
        }
        #[cfg(feature = "fail-points")]
        if !claimed.is_empty() {
            self.crash_if(CrashPoint::AfterClaim)?;
        }
        Ok(claimed)
    }

    /// Quarantines the claimed rows that do not decode into an event (`contract`: a row written by
    /// SQL that breaks the schema's promises), and gives back unsent, attempt taken back, the rows
    /// of their entities that follow them in the batch, which must not go before them. Returns the
    /// rows to publish.
    async fn set_aside_corrupt(&self, taken: store::Taken, token: Uuid) -> Result<Vec<store::Claimed>> {
        let store::Taken { mut rows, corrupt } = taken;
        if corrupt.is_empty() {
            return Ok(rows);
        }
        let after_corrupt = |c: &store::Claimed| {
            c.event.entity.as_ref().is_some_and(|e| {
                corrupt.iter().any(|k| {
                    k.entity
                        .as_ref()
                        .is_some_and(|(key, seq)| *key == e.key && i64::try_from(e.seq).is_ok_and(|s| s > *seq))
                })
            })
        };
        let held: Vec<Uuid> = rows.iter().filter(|c| after_corrupt(c)).map(|c| *c.event.id.as_uuid()).collect();
        rows.retain(|c| !after_corrupt(c));
        let failures: Vec<store::Failure> = corrupt
            .iter()
            .map(|k| {
                tracing::warn!(event_id = %k.id, what = k.what, kind = %FailureKind::Contract, "outbox.quarantine");
                store::Failure {
                    id: k.id,
                    quarantine: true,
                    delay: Duration::ZERO,
                    reason: format!("corrupt row: {} (quarantined)", k.what),
                    kind: FailureKind::Contract,
                }
            })
            .collect();
        metrics::counter!("outbox_quarantined_total").increment(failures.len() as u64);
        store::mark_failed(&self.shared.pool, &failures, token).await?;
        store::release(&self.shared.pool, &held, token, true).await?;
        Ok(rows)
    }

    /// Publishes a claimed batch, awaits its confirms (until the confirm timeout, or until a hard
    /// stop cuts the wait short) and records each row's outcome under the claim token.
    async fn deliver(
        &self,
        claimed: Vec<store::Claimed>,
        token: Uuid,
        hard: watch::Receiver<bool>,
    ) -> Result<BatchReport> {
        // The claim's lease runs from about now: outcomes are worth recording until it ends.
        let lease_ends = tokio::time::Instant::now() + self.shared.settings.lease;
        if claimed.is_empty() {
            return Ok(BatchReport::default());
        }
        let sent = self.publish_runs(&claimed, hard.clone()).await?;
        #[cfg(feature = "fail-points")]
        self.crash_if(CrashPoint::AfterConfirmBeforeMark)?;
        if self.shared.crashed.load(Ordering::SeqCst) {
            // Another batch of this relay reached a crash point: it is "dead", it writes nothing.
            return Err(Error::Crashed);
        }
        let sorted = self.sort_outcomes(&claimed, sent);
        let mut report = BatchReport { claimed: claimed.len(), ..BatchReport::default() };
        self.record(&sorted, token, &mut report, Recording { lease_ends, hard, retried: false }).await?;
        metrics::counter!("outbox_published_total").increment(report.published as u64);
        metrics::counter!("outbox_quarantined_total").increment(report.quarantined as u64);
        if report.lost_claims > 0 {
            metrics::counter!("outbox_lost_claims_total").increment(report.lost_claims as u64);
            tracing::warn!(
                lost = report.lost_claims,
                "claims were taken over by another relay before their outcome was recorded"
            );
        }
        tracing::debug!(?report, "outbox.batch");
        Ok(report)
    }

    /// Publishes the batch's events per entity, in sequence order: an entity's first event goes out
    /// at once, each later one when the broker confirmed the one before it (G4). Awaits the
    /// confirms until the timeout, or until a hard stop cuts the wait short.
    async fn publish_runs(&self, claimed: &[store::Claimed], mut hard: watch::Receiver<bool>) -> Result<Sent> {
        let s = &self.shared.settings;
        let mut outgoing: Vec<Option<OutgoingMessage>> = claimed
            .iter()
            .map(|c| {
                Some(OutgoingMessage {
                    event_id: c.event.id,
                    exchange: s.exchange.clone(),
                    routing_key: self.shared.routing.routing_key(&c.event),
                    message: wire::encode(&c.event, s.app_id.as_deref()),
                })
            })
            .collect();
        let (first, next) = runs(claimed);
        let mut pending = FuturesUnordered::new();
        pending.extend(self.send(&first, &mut outgoing).await);
        #[cfg(feature = "fail-points")]
        self.crash_if(CrashPoint::AfterPublishBeforeConfirm)?;

        let mut outcomes: Vec<Option<PublishOutcome>> = vec![None; claimed.len()];
        let timeout = tokio::time::sleep(s.confirm_timeout);
        tokio::pin!(timeout);
        let mut cut_short = false;
        let mut successors = Vec::new();
        while !pending.is_empty() {
            let mut record = |i: usize, outcome: PublishOutcome| {
                if matches!(outcome, PublishOutcome::Confirmed)
                    && let Some(j) = next[i]
                {
                    successors.push(j);
                }
                outcomes[i] = Some(outcome);
            };
            tokio::select! {
                Some((i, outcome)) = pending.next() => record(i, outcome),
                () = &mut timeout => break,
                _ = hard.wait_for(|h| *h) => { cut_short = true; break; }
            }
            // Confirms that arrived together: their successors go out in one publish.
            while let Some(Some((i, outcome))) = pending.next().now_or_never() {
                record(i, outcome);
            }
            if !successors.is_empty() {
                pending.extend(self.send(&std::mem::take(&mut successors), &mut outgoing).await);
            }
        }
        let unsent = outgoing.iter().map(Option::is_some).collect();
        Ok(Sent { outcomes, unsent, cut_short })
    }

    /// Decides what to record for each row of the batch (see [`classify_outcome`]).
    fn sort_outcomes<'a>(&self, claimed: &'a [store::Claimed], sent: Sent) -> Outcomes<'a> {
        let s = &self.shared.settings;
        let now = SystemTime::now();
        let mut sorted = Outcomes::default();
        let rows = claimed.iter().zip(sent.outcomes).zip(sent.unsent);
        for ((c, outcome), unsent) in rows {
            let id = c.event.id;
            let failure = match classify_outcome(outcome, unsent, sent.cut_short) {
                Disposition::Published => {
                    sorted.published.push(c.tid.as_str());
                    metrics::histogram!("outbox_commit_to_confirm_seconds")
                        .record(now.duration_since(c.event.created_at).unwrap_or_default().as_secs_f64());
                    continue;
                }
                Disposition::GiveBack => {
                    sorted.released.push(*id.as_uuid());
                    continue;
                }
                Disposition::TakeBack { unavailable } => {
                    if unavailable {
                        metrics::counter!("outbox_publish_failures_total", "kind" => FailureKind::Unavailable.as_str())
                            .increment(1);
                    }
                    sorted.unavailable += usize::from(unavailable);
                    sorted.unsent.push(*id.as_uuid());
                    continue;
                }
                Disposition::Failed(f) => f,
            };
            let (quarantine, delay) = match s.retry.decide(c.attempts, c.event.created_at, now, failure.kind) {
                RetryDecision::RetryAt(t) => (false, t.duration_since(now).unwrap_or_default()),
                RetryDecision::Quarantine(reason) => {
                    tracing::warn!(event_id = %id, entity = ?c.event.entity.as_ref().map(|e| &e.key), kind = %failure.kind, %reason, "outbox.quarantine");
                    (true, Duration::ZERO)
                }
            };
            metrics::counter!("outbox_publish_failures_total", "kind" => failure.kind.as_str()).increment(1);
            tracing::debug!(event_id = %id, kind = %failure.kind, reason = %failure.reason, attempts = c.attempts, "outbox.publish_failed");
            let reason = if quarantine { format!("{} (quarantined)", failure.reason) } else { failure.reason };
            sorted.failures.push(store::Failure { id, quarantine, delay, reason, kind: failure.kind });
        }
        sorted
    }

    /// Records a batch's outcomes, fenced by its claim token. A statement the database does not
    /// answer (a restart, a dropped connection) is tried again until it does, while the claim's
    /// lease lasts: the confirms are kept, so confirmed rows are not published again and the
    /// entities' successors move on as soon as the database is back, instead of after the lease.
    async fn record(
        &self,
        sorted: &Outcomes<'_>,
        token: Uuid,
        report: &mut BatchReport,
        mut r: Recording,
    ) -> Result<()> {
        let pool = &self.shared.pool;
        let started = Instant::now();
        let owned = r.retry("mark published", || store::mark_published(pool, &sorted.published, token)).await?;
        report.published = sorted.published.len();
        report.lost_claims += r.lost(sorted.published.len(), owned);
        if let Some(every) = self.shared.settings.vacuum_after
            && self.shared.published_since_vacuum.fetch_add(owned, Ordering::Relaxed) + owned >= every
        {
            self.shared.vacuum_due.notify_one();
        }
        report.quarantined = sorted.failures.iter().filter(|f| f.quarantine).count();
        report.retried = sorted.failures.len() - report.quarantined;
        let owned = r.retry("record failures", || store::mark_failed(pool, &sorted.failures, token)).await?;
        report.lost_claims += r.lost(sorted.failures.len(), owned);
        let released = r.retry("release", || store::release(pool, &sorted.released, token, false)).await?;
        report.released = usize::try_from(released).unwrap_or(0);
        let unsent = r.retry("give back unsent", || store::release(pool, &sorted.unsent, token, true)).await?;
        report.unavailable = sorted.unavailable;
        report.held_back = usize::try_from(unsent).unwrap_or(0).saturating_sub(sorted.unavailable);
        metrics::histogram!("outbox_relay_record_seconds").record(started.elapsed().as_secs_f64());
        Ok(())
    }
}

/// What became of a batch's messages.
struct Sent {
    /// Each row's confirm, if it came.
    outcomes: Vec<Option<PublishOutcome>>,
    /// Each row's message was never handed to the publisher (an earlier event of its entity in the
    /// batch was not confirmed).
    unsent: Vec<bool>,
    /// A hard stop cut the wait for confirms short.
    cut_short: bool,
}

/// What to record for a batch, row by row.
#[derive(Default)]
struct Outcomes<'a> {
    /// Tuple ids of confirmed rows.
    published: Vec<&'a str>,
    /// Failures charged to their events.
    failures: Vec<store::Failure>,
    /// Sent, outcome unknown, the relay is stopping: given back as they are.
    released: Vec<Uuid>,
    /// Not sent, or lost with the broker's connection: given back with the attempt taken back.
    unsent: Vec<Uuid>,
    /// Of `unsent`, those the broker's outage kept from going out or being confirmed.
    unavailable: usize,
}

/// What to record for one row of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Disposition {
    /// Confirmed: mark it published.
    Published,
    /// Sent but its confirm was not awaited (the relay is stopping): give it back, attempt kept.
    GiveBack,
    /// Not the event's failure (never sent, or the broker could not be reached): give it back and
    /// take the claim's attempt back.
    TakeBack {
        /// The broker's outage is why.
        unavailable: bool,
    },
    /// The event's own failure: charge it and let the retry policy decide.
    Failed(PublishFailure),
}

/// Decides what a row's outcome means for the row: `unsent` if its message was never handed to the
/// publisher, `cut_short` if a hard stop ended the wait for confirms.
fn classify_outcome(outcome: Option<PublishOutcome>, unsent: bool, cut_short: bool) -> Disposition {
    match outcome {
        Some(PublishOutcome::Confirmed) => Disposition::Published,
        Some(PublishOutcome::Failed(f)) if f.kind == FailureKind::Unavailable => {
            Disposition::TakeBack { unavailable: true }
        }
        Some(PublishOutcome::Failed(f)) => Disposition::Failed(f),
        None if unsent => Disposition::TakeBack { unavailable: false },
        None if cut_short => Disposition::GiveBack,
        None => Disposition::Failed(PublishFailure::new(
            FailureKind::Transient,
            "no confirm from the broker within the confirm timeout",
        )),
    }
}

/// How long a batch's recording may keep trying, and what cuts it short.
struct Recording {
    lease_ends: tokio::time::Instant,
    hard: watch::Receiver<bool>,
    /// The last statement had to be sent again: an attempt whose answer was lost may have been
    /// applied.
    retried: bool,
}

impl Recording {
    /// Of `sent` rows, how many the claim no longer owned when `owned` were recorded. After a
    /// statement was sent again the rows not found may have been recorded by the attempt whose
    /// answer was lost, so they do not count as taken over.
    fn lost(&self, sent: usize, owned: u64) -> usize {
        if self.retried { 0 } else { sent.saturating_sub(usize::try_from(owned).unwrap_or(0)) }
    }

    /// Runs `statement` until the database answers, backing off from 50 ms to 1 s, while the lease
    /// lasts and no hard stop came; a statement fenced by the claim token may run again safely.
    async fn retry<T, F, Fut>(&mut self, what: &'static str, mut statement: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        let mut failed = false;
        self.retried = false;
        loop {
            let outcome = tokio::select! {
                outcome = statement() => outcome,
                // A hard stop does not wait for a database that does not answer.
                _ = self.hard.wait_for(|h| *h), if failed => return Err(Error::Stopped),
            };
            let e = match outcome {
                Ok(v) => {
                    if failed {
                        tracing::info!(step = what, "the database answers again; the batch's outcome is recorded");
                    }
                    return Ok(v);
                }
                Err(e) => e,
            };
            let wait = backoff.fail();
            if tokio::time::Instant::now() + wait >= self.lease_ends || e.kind() == FailureKind::Contract {
                return Err(e);
            }
            self.retried = true;
            if !failed {
                tracing::warn!(step = what, error = %e, kind = %e.kind(), "cannot record a batch's outcome yet; retrying while its lease lasts");
                failed = true;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = self.hard.wait_for(|h| *h) => return Err(e),
            }
        }
    }
}

/// The claimed rows as runs of one entity each: the first row of every run (every unordered row is
/// a run of its own), and for each row the next one of its run, in sequence order.
fn runs(claimed: &[store::Claimed]) -> (Vec<usize>, Vec<Option<usize>>) {
    let mut by_entity: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
    let mut first = Vec::new();
    for (i, c) in claimed.iter().enumerate() {
        match &c.event.entity {
            Some(e) => by_entity.entry(e.key.as_str()).or_default().push(i),
            None => first.push(i),
        }
    }
    let mut next = vec![None; claimed.len()];
    for mut run in by_entity.into_values() {
        run.sort_by_key(|&i| claimed[i].event.entity.as_ref().map(|e| e.seq));
        first.push(run[0]);
        for pair in run.windows(2) {
            next[pair[0]] = Some(pair[1]);
        }
    }
    first.sort_unstable();
    (first, next)
}

/// Waits for the first worker that ends with an error (a crash point), or forever.
async fn join_next_error(tasks: &mut JoinSet<Result<()>>) -> Result<()> {
    while let Some(done) = tasks.join_next().await {
        if let Ok(Err(e)) = done {
            return Err(e);
        }
    }
    std::future::pending().await
}

/// Periodic housekeeping: release rows held behind events that are no longer quarantined.
async fn maintain<P: Publisher>(shared: Arc<Shared<P>>) {
    // Every 30 polls (30 s by default).
    let mut tick = tokio::time::interval(shared.settings.poll_interval * 30);
    loop {
        tick.tick().await;
        match outbox_producer::admin::release_held(&shared.pool).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(released = n, "rows held behind a formerly quarantined event are due again");
                shared.wake.notify_waiters();
            }
            Err(e) => tracing::warn!(error = %e, "could not re-check held rows"),
        }
    }
}

/// Vacuums the outbox table whenever this relay marked `vacuum_after` rows published since the
/// last time (see [`RelayBuilder::vacuum_after`]).
async fn vacuum<P: Publisher>(shared: Arc<Shared<P>>) {
    let Some(every) = shared.settings.vacuum_after else {
        return;
    };
    loop {
        shared.vacuum_due.notified().await;
        if shared.published_since_vacuum.load(Ordering::Relaxed) < every {
            continue;
        }
        shared.published_since_vacuum.store(0, Ordering::Relaxed);
        let started = std::time::Instant::now();
        match store::vacuum(&shared.pool).await {
            Ok(()) => {
                let took = started.elapsed();
                metrics::counter!("outbox_relay_vacuums_total").increment(1);
                metrics::histogram!("outbox_relay_vacuum_seconds").record(took.as_secs_f64());
                tracing::debug!(took_ms = took.as_millis(), "outbox table vacuumed");
            }
            Err(e) => tracing::warn!(error = %e, "could not vacuum the outbox table; autovacuum must keep it lean"),
        }
    }
}

/// LISTEN for commits; wake the claim loop on each notification, and after every reconnect (when
/// notifications may have been lost).
async fn listen<P: Publisher>(shared: Arc<Shared<P>>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(&shared.pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for outbox notifications; polling meanwhile");
                tokio::time::sleep(backoff.fail()).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(outbox_producer::NOTIFY_CHANNEL).await {
            tracing::warn!(error = %e, "LISTEN failed; polling meanwhile");
            tokio::time::sleep(backoff.fail()).await;
            continue;
        }
        backoff.reset();
        shared.wake.notify_waiters();
        loop {
            match listener.try_recv().await {
                Ok(Some(_)) => shared.wake.notify_waiters(),
                Ok(None) => {
                    // The connection was lost and is re-established on the next call; whatever was
                    // notified meanwhile is lost, so look at the table now.
                    tracing::debug!("LISTEN connection lost; reconnecting");
                    shared.wake.notify_waiters();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "LISTEN connection failed; reconnecting");
                    shared.wake.notify_waiters();
                    break;
                }
            }
        }
    }
}
