//! The state a relay's tasks share: its connections, publisher, routing and settings, and what the
//! claim loop, the delivery tasks and the background tasks tell each other. Every step of the
//! relay takes it as an argument.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use sqlx::PgPool;
use tokio::sync::Notify;

use super::health::HealthState;
use super::low_water::LowWater;
use super::presence::Presence;
#[cfg(feature = "fail-points")]
use super::settings::CrashPoint;
use super::settings::Settings;
use super::summary::Tally;
use crate::routing::RoutingStrategy;
#[cfg(feature = "fail-points")]
use crate::{Error, Result};

/// The state a relay's tasks share.
pub(super) struct Shared<P> {
    /// The relay's own connections.
    pub(super) pool: PgPool,
    pub(super) publisher: P,
    pub(super) routing: Arc<dyn RoutingStrategy>,
    pub(super) settings: Settings,
    /// Wakes the claim loop: a commit was notified, or rows held behind a quarantine are due again.
    pub(super) wake: Notify,
    /// A batch reached an armed crash point: the relay is "dead" and writes nothing more.
    pub(super) crashed: AtomicBool,
    /// Whether commits notify this relay: its session for the commit trigger.
    pub(super) presence: Presence,
    /// Rows this relay marked published since its last vacuum of the table.
    pub(super) published_since_vacuum: AtomicU64,
    /// Signalled when `published_since_vacuum` reached `vacuum_after`.
    pub(super) vacuum_due: Notify,
    /// Held while this relay claims (its claim loop, or [`Relay::run_batch`](super::Relay::run_batch)).
    /// Two claims at the same moment would see the same ready rows and split them between them
    /// (`SKIP LOCKED`), each paying a full scan for half a batch.
    pub(super) claiming: tokio::sync::Mutex<()>,
    /// What the claim loop tells liveness and readiness probes.
    pub(super) health: Arc<HealthState>,
    /// What the relay did since its last summary line.
    pub(super) tally: Tally,
    /// Where the claim's scan starts.
    pub(super) low_water: LowWater,
    /// The labels of every metric of this relay: its database's name, if it has one.
    pub(super) labels: Vec<metrics::Label>,
}

impl<P> Shared<P> {
    /// The state of a relay that has not started yet.
    pub(super) fn new(pool: PgPool, publisher: P, routing: Arc<dyn RoutingStrategy>, settings: Settings) -> Self {
        let presence = Presence::new(&settings.relay_id, pool.connect_options().as_ref().clone());
        let labels = crate::metrics::database_labels(settings.database.as_deref());
        Self {
            pool,
            publisher,
            routing,
            settings,
            wake: Notify::new(),
            crashed: AtomicBool::new(false),
            presence,
            published_since_vacuum: AtomicU64::new(0),
            vacuum_due: Notify::new(),
            claiming: tokio::sync::Mutex::new(()),
            health: Arc::default(),
            tally: Tally::default(),
            low_water: LowWater::default(),
            labels,
        }
    }

    /// This relay's labels and `key = value`.
    pub(super) fn labels_and(&self, key: &'static str, value: &'static str) -> Vec<metrics::Label> {
        let mut labels = self.labels.clone();
        labels.push(metrics::Label::new(key, value));
        labels
    }

    /// Stops the relay as if killed if `point` is the armed crash point.
    #[cfg(feature = "fail-points")]
    pub(super) fn crash_if(&self, point: CrashPoint) -> Result<()> {
        if self.settings.crash_at == Some(point) {
            self.crashed.store(true, std::sync::atomic::Ordering::SeqCst);
            tracing::warn!(?point, "crash point reached: relay stops as if killed");
            return Err(Error::Crashed);
        }
        Ok(())
    }
}
