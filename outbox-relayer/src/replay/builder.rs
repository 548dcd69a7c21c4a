//! [`ReplayerBuilder`]: every setting of a replay runner with its default.

use std::sync::Arc;
use std::time::Duration;

use outbox_types::{PayloadCipher, Publisher};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::run::Replayer;
use super::settings::{DEFAULT_BATCH_SIZE, ReplayProgress, Settings};
use crate::relay::IntoConnectOptions;
use crate::routing::RoutingStrategy;
use crate::{Error, Result, defaults};

impl<P: Publisher> Replayer<P> {
    /// Starts a builder of a runner of replay jobs over the outbox in `database` (the service's
    /// `&PgPool`, or `PgConnectOptions`), publishing with `publisher`.
    pub fn builder(database: impl IntoConnectOptions, publisher: P) -> ReplayerBuilder<P> {
        ReplayerBuilder {
            connect: database.into_connect_options(),
            publisher,
            settings: Settings {
                batch_size: DEFAULT_BATCH_SIZE,
                confirm_timeout: defaults::CONFIRM_TIMEOUT,
                cipher: None,
                end_to_end: false,
                app_id: None,
                runner: default_runner(),
                routing: None,
                on_progress: None,
            },
        }
    }
}

fn default_runner() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "replay".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Builder of a [`Replayer`].
pub struct ReplayerBuilder<P> {
    connect: PgConnectOptions,
    publisher: P,
    settings: Settings,
}

impl<P> std::fmt::Debug for ReplayerBuilder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayerBuilder")
            .field("batch_size", &self.settings.batch_size)
            .field("runner", &self.settings.runner)
            .finish_non_exhaustive()
    }
}

impl<P: Publisher> ReplayerBuilder<P> {
    /// Events per batch (1 to 100,000). Defaults to [`DEFAULT_BATCH_SIZE`].
    #[must_use]
    pub fn batch_size(mut self, n: usize) -> Self {
        self.settings.batch_size = n;
        self
    }

    /// How long to wait for a batch's confirms before it is sent again from the job's cursor.
    /// Defaults to the relay's, 10 s.
    #[must_use]
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.settings.confirm_timeout = timeout;
        self
    }

    /// Opens sealed payloads with `cipher` before sending them, as the relay does. Without it (and
    /// without [`end_to_end`](Self::end_to_end)) a sealed payload cannot be sent: it is counted
    /// as unopenable and passed over.
    #[must_use]
    pub fn cipher(mut self, cipher: PayloadCipher) -> Self {
        self.settings.cipher = Some(cipher);
        self
    }

    /// Sends sealed payloads sealed, with their key id, for consumers that open them (as the
    /// relay's end-to-end mode).
    #[must_use]
    pub fn end_to_end(mut self, on: bool) -> Self {
        self.settings.end_to_end = on;
        self
    }

    /// AMQP `app_id` on every message (as the relay's).
    #[must_use]
    pub fn app_id(mut self, app_id: impl Into<String>) -> Self {
        self.settings.app_id = Some(app_id.into());
        self
    }

    /// The name recorded as the job's runner. Defaults to `<HOSTNAME>-<pid>`.
    #[must_use]
    pub fn runner_name(mut self, name: impl Into<String>) -> Self {
        self.settings.runner = name.into();
        self
    }

    /// The routing strategy of jobs whose target routes with the application's
    /// ([`ReplayRouting::Custom`](outbox_ops::replay::ReplayRouting::Custom)): give the relay's.
    #[must_use]
    pub fn routing(mut self, routing: impl RoutingStrategy) -> Self {
        self.settings.routing = Some(Arc::new(routing));
        self
    }

    /// Calls `f` after each batch with what it did.
    #[must_use]
    pub fn on_progress(mut self, f: impl Fn(ReplayProgress) + Send + Sync + 'static) -> Self {
        self.settings.on_progress = Some(Arc::new(f));
        self
    }

    /// The runner; it connects when it runs a job.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the batch size is 0 or above 100,000, or the confirm timeout 0.
    pub fn build(self) -> Result<Replayer<P>> {
        if !(1..=100_000).contains(&self.settings.batch_size) {
            return Err(Error::InvalidConfig("the replay's batch size must be between 1 and 100,000"));
        }
        if self.settings.confirm_timeout.is_zero() {
            return Err(Error::InvalidConfig("the replay's confirm timeout must be above zero"));
        }
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(self.connect.clone());
        Ok(Replayer::new(self.connect, pool, self.publisher, self.settings))
    }
}
