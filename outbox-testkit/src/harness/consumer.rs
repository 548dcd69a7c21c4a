//! The harness's consumer: the test's handler in the inbox, fed by an [`InboxRunner`] with the
//! test defaults; starting, stopping, killing and joining it, with a crash point if armed.

use std::sync::Arc;
use std::time::Duration;

use outbox_consumer::{InboxLayer, InboxRequest, InboxRunner, InboxRunnerBuilder, RunnerHandle, Topology};
use outbox_core::RetryPolicy;
use sqlx::PgPool;
use tower::Layer;

use super::Harness;
use super::url::via;
use crate::Result;

/// Builds and spawns the consumer; made by [`factory`] from the test's handler.
pub(super) type ConsumerFactory = Arc<dyn Fn(ConsumerStart) -> outbox_consumer::Result<RunnerHandle> + Send + Sync>;

/// What a consumer needs to start; built by the harness.
pub(super) struct ConsumerStart {
    pool: PgPool,
    name: String,
    url: String,
    connection_name: String,
    topology: Topology,
    crash: Option<ConsumerCrash>,
}

/// A crash point of the consumer runner (with the `fail-points` feature; without it, none exists).
#[cfg(feature = "fail-points")]
type ConsumerCrash = outbox_consumer::CrashPoint;
#[cfg(not(feature = "fail-points"))]
type ConsumerCrash = std::convert::Infallible;

#[cfg(feature = "fail-points")]
fn arm<S>(builder: InboxRunnerBuilder<S>, point: ConsumerCrash) -> InboxRunnerBuilder<S> {
    builder.crash_at(point)
}

#[cfg(not(feature = "fail-points"))]
fn arm<S>(_builder: InboxRunnerBuilder<S>, point: ConsumerCrash) -> InboxRunnerBuilder<S> {
    match point {}
}

/// The consumer of [`HarnessBuilder::consumer_with`](super::HarnessBuilder::consumer_with):
/// `handler` in the inbox, its runner with the test defaults (retries from 200 ms up to 1 s,
/// 5 attempts, parked sweep every 500 ms), then `configure`, then the crash point if any.
pub(super) fn factory<S>(
    handler: S,
    configure: impl Fn(InboxRunnerBuilder<S>) -> InboxRunnerBuilder<S> + Send + Sync + 'static,
) -> ConsumerFactory
where
    S: tower::Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    Arc::new(move |start: ConsumerStart| {
        let service = InboxLayer::new(start.pool, start.name).layer(handler.clone());
        let mut builder = InboxRunner::builder(start.url, service)
            .topology(&start.topology)
            .connection_name(start.connection_name)
            .retry_policy(
                RetryPolicy::default()
                    .initial_delay(Duration::from_millis(200))
                    .max_delay(Duration::from_secs(1))
                    .max_attempts(5),
            )
            .sweep_interval(Duration::from_millis(500));
        builder = configure(builder);
        if let Some(point) = start.crash {
            builder = arm(builder, point);
        }
        Ok(builder.build()?.spawn())
    })
}

impl Harness {
    /// Starts the consumer (after killing the one running, if any). Nothing happens without
    /// [`HarnessBuilder::consumer`](super::HarnessBuilder::consumer).
    ///
    /// # Errors
    /// If the runner cannot be built.
    pub fn start_consumer(&mut self) -> Result<()> {
        self.spawn_consumer(None)
    }

    /// Starts the consumer with a crash point armed (after killing the one running, if any).
    ///
    /// # Errors
    /// If the runner cannot be built.
    #[cfg(feature = "fail-points")]
    pub fn start_consumer_crashing_at(&mut self, point: outbox_consumer::CrashPoint) -> Result<()> {
        self.spawn_consumer(Some(point))
    }

    fn spawn_consumer(&mut self, crash: Option<ConsumerCrash>) -> Result<()> {
        let Some(factory) = self.consumer_factory.clone() else { return Ok(()) };
        self.kill_consumer();
        let url = self.consumer_proxy.as_ref().map_or_else(crate::amqp_url, |p| via(&crate::amqp_url(), p.addr()));
        let start = ConsumerStart {
            pool: self.consumer_pool().clone(),
            name: self.consumer_name.clone(),
            url,
            connection_name: self.consumer_connection.clone(),
            topology: self.topology.clone(),
            crash,
        };
        self.consumer.0 = Some(factory(start)?);
        Ok(())
    }

    /// The running consumer's handle (for its [`outbox_consumer::RunnerStats`]).
    pub fn consumer_handle(&self) -> Option<&RunnerHandle> {
        self.consumer.0.as_ref()
    }

    /// Shuts the consumer down gracefully (nothing to do if none runs).
    ///
    /// # Errors
    /// The runner's error, if it had failed or stopped at a crash point.
    pub async fn stop_consumer(&mut self) -> Result<()> {
        match self.consumer.0.take() {
            Some(h) if !h.is_finished() => Ok(h.shutdown().await?),
            _ => Ok(()),
        }
    }

    /// Stops the consumer at once, as if its process died: unacked deliveries come back.
    pub fn kill_consumer(&mut self) {
        if let Some(h) = self.consumer.0.take() {
            h.abort();
        }
    }

    /// Waits for the consumer to end on its own (at an armed crash point); `None` if none runs.
    pub async fn join_consumer(&mut self) -> Option<outbox_consumer::Result<()>> {
        Some(self.consumer.0.take()?.join().await)
    }
}
