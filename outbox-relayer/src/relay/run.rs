//! The [`Relay`]: starts its claim loop and background tasks, winds them down on shutdown, and runs
//! one round on demand ([`Relay::run_batch`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use outbox_types::Publisher;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;
use uuid::Uuid;

use super::handle::RelayHandle;
use super::health::Health;
use super::outcome::BatchReport;
use super::shared::Shared;
use super::{claim, claim_loop, deliver, low_water, tasks};
use crate::{Error, Result};

/// Publishes committed outbox rows to the broker.
///
/// Run it as a task of the producer service ([`Relay::spawn`]) or as the `outbox relay` process.
/// Any number of relays may run on one database: each row is published by one relay at a time,
/// events of one entity go out strictly one after the other in sequence order, and a crashed
/// relay's claims are taken over when its lease expires.
///
/// ```no_run
/// use outbox_relayer::{AmqpPublisher, Relay};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let database: sqlx::postgres::PgConnectOptions = "postgres://postgres@127.0.0.1/app".parse()?;
/// let publisher = AmqpPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f").build()?;
/// let relay = Relay::builder(database, publisher).exchange("orders").batch_size(500).build()?;
/// let handle = relay.spawn();
/// // ... serve requests ...
/// handle.shutdown().await?; // stops claiming, awaits confirms, records them, releases the rest
/// # Ok(()) }
/// ```
pub struct Relay<P> {
    pub(super) shared: Arc<Shared<P>>,
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

impl<P: Publisher> Relay<P> {
    /// The id this relay records as the owner of its claims.
    pub fn relay_id(&self) -> &str {
        &self.shared.settings.relay_id
    }

    /// When the claim loop last went round, and whether the database and the broker answer it:
    /// what a liveness or readiness probe asks.
    pub fn health(&self) -> Health {
        self.shared.health.snapshot()
    }

    /// The queue position where this relay's claims start scanning (see
    /// [`RelayBuilder::recheck_passed_rows`](super::RelayBuilder::recheck_passed_rows)); 0 before
    /// the relay runs. For tests and diagnostics.
    #[doc(hidden)]
    pub fn low_water(&self) -> i64 {
        self.shared.low_water.position()
    }

    /// How long the claim loop may go without a round before a liveness probe should call it
    /// stalled: three poll intervals, and at least 30 s (a claim on a busy server can take
    /// seconds).
    pub fn liveness_window(&self) -> Duration {
        (self.shared.settings.poll_interval * 3).max(Duration::from_secs(30))
    }

    /// Runs the relay as a task of the current runtime.
    pub fn spawn(self) -> RelayHandle {
        let (stop, mut rx) = watch::channel(false);
        let probe =
            super::handle::RelayProbe { health: self.shared.health.clone(), liveness_window: self.liveness_window() };
        let task = tokio::spawn(async move {
            self.run(async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
        });
        RelayHandle { stop, task, probe }
    }

    /// Runs until `shutdown` completes, then shuts down gracefully.
    ///
    /// # Errors
    /// [`Error::Crashed`] at an armed crash point; otherwise it keeps going through database and
    /// broker failures (logging them) and returns `Ok` after a graceful shutdown.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let s = &self.shared.settings;
        // At ERROR level, so that whatever the filter lets through, a line about this relay
        // carries its id and database (an INFO span is off under `RUST_LOG=warn`, and its
        // fields with it).
        let span = tracing::error_span!("outbox.relay", relay_id = %s.relay_id, database = s.database.as_deref());
        async move {
            let s = &self.shared.settings;
            // Stopped when this future ends or is dropped (aborted, panicked), however it ends.
            let _stopped = super::handle::StoppedOnDrop::running(self.shared.health.clone());
            crate::metrics::initialise(&self.shared.labels);
            self.declare_exchange().await;
            let (stop_tx, stop_rx) = watch::channel(false);
            let (hard_tx, hard_rx) = watch::channel(false);
            let mut tasks = JoinSet::new();
            let shared = self.shared.clone();
            tasks.spawn(async move { claim_loop::worker(shared, stop_rx, hard_rx).await }.in_current_span());
            // Dropped with this future (a relay aborted as if killed), the set aborts them too.
            let mut background = JoinSet::new();
            if s.notifications {
                background.spawn(tasks::listen(self.shared.clone()).in_current_span());
            }
            background.spawn(tasks::maintain(self.shared.clone()).in_current_span());
            background.spawn(tasks::vacuum(self.shared.clone()).in_current_span());
            background.spawn(tasks::gauges(self.shared.clone()).in_current_span());
            background.spawn(tasks::summarize(self.shared.clone()).in_current_span());
            background.spawn(tasks::retention(self.shared.clone()).in_current_span());
            let (shared, recheck) = (self.shared.clone(), s.recheck_passed_rows);
            background.spawn(
                async move { low_water::keep(&shared.pool, &shared.low_water, recheck).await }.in_current_span(),
            );
            tracing::info!(batch_size = s.batch_size, confirm_window = s.confirm_window, "relay started");

            tokio::pin!(shutdown);
            let mut result = Ok(());
            tokio::select! {
                () = &mut shutdown => {}
                r = tasks::join_next_error(&mut tasks) => result = r,
            }
            background.abort_all();
            if self.shared.crashed.load(Ordering::SeqCst) {
                tasks.abort_all();
                return Err(Error::Crashed);
            }
            let result = self.wind_down(&mut tasks, result, &stop_tx, &hard_tx).await;
            self.shared.presence.leave().await;
            // The relay's own connections close with it (a fleet gives back a database at once);
            // a database that stopped answering cannot hold the shutdown up.
            let _ = tokio::time::timeout(Duration::from_secs(2), self.shared.pool.close()).await;
            tracing::info!("relay stopped");
            result
        }
        .instrument(span)
        .await
    }

    /// Declares the exchange if the relay is to; a failure is logged, and the publisher declares it
    /// again on reconnect.
    async fn declare_exchange(&self) {
        let s = &self.shared.settings;
        if s.declare_exchange
            && let Err(f) = self.shared.publisher.declare_exchange(&s.exchange, s.exchange_kind).await
        {
            tracing::warn!(exchange = %s.exchange, kind = %f.kind, reason = %f.reason,
                "could not declare the exchange yet; retrying on reconnect");
        }
    }

    /// The graceful part of a shutdown: stops claiming; the batches in hand finish until the
    /// deadline, then their wait for confirms is cut short. Returns `result` with the first error
    /// of a task that ended with one.
    async fn wind_down(
        &self,
        tasks: &mut JoinSet<Result<()>>,
        mut result: Result<()>,
        stop_tx: &watch::Sender<bool>,
        hard_tx: &watch::Sender<bool>,
    ) -> Result<()> {
        // Graceful: stop claiming; batches in hand finish until the deadline, then cut short.
        let _ = stop_tx.send(true);
        let deadline = tokio::time::sleep(self.shared.settings.shutdown_deadline.mul_f64(0.8));
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
        result
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
        let claimed = claim::claim(&self.shared, self.shared.settings.batch_size, token).await?;
        deliver::deliver(&self.shared, claimed, token, rx).await
    }
}
