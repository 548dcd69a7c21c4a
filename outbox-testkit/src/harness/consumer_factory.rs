//! How the harness makes its consumer: the test's handler in the inbox, fed by an
//! [`InboxRunner`] with the test defaults, with a crash point if armed.

use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::{InboxLayer, InboxRequest, InboxRunner, InboxRunnerBuilder, RunnerHandle, Topology};
use outbox_types::RetryPolicy;
use sqlx::PgPool;
use tower::Layer;

/// Builds and spawns the consumer; made by [`factory`] from the test's handler.
pub(super) type ConsumerFactory = Arc<dyn Fn(ConsumerStart) -> outbox_inbox::Result<RunnerHandle> + Send + Sync>;

/// What a consumer needs to start; built by the harness.
pub(super) struct ConsumerStart {
    pub(super) pool: PgPool,
    pub(super) name: String,
    pub(super) url: String,
    pub(super) connection_name: String,
    pub(super) topology: Topology,
    pub(super) crash: Option<ConsumerCrash>,
}

/// A crash point of the consumer runner (with the `fail-points` feature; without it, none exists).
#[cfg(feature = "fail-points")]
pub(super) type ConsumerCrash = outbox_inbox::CrashPoint;
#[cfg(not(feature = "fail-points"))]
pub(super) type ConsumerCrash = std::convert::Infallible;

#[cfg(feature = "fail-points")]
fn arm<S>(builder: InboxRunnerBuilder<S>, point: ConsumerCrash) -> InboxRunnerBuilder<S> {
    builder.crash_at(point)
}

#[cfg(not(feature = "fail-points"))]
fn arm<S>(_builder: InboxRunnerBuilder<S>, point: ConsumerCrash) -> InboxRunnerBuilder<S> {
    match point {}
}

/// The consumer of [`HarnessBuilder::consumer_with`](crate::HarnessBuilder::consumer_with):
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
