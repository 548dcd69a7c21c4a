//! A relay in-process, as the latency and backlog-size phases run it.

use std::time::Duration;

use futures::TryFutureExt;
use outbox_relayer::defaults::SHUTDOWN_DEADLINE;
use outbox_relayer::{AmqpPublisher, Relay};
use outbox_testkit::TestDb;
use outbox_types::{ExchangeKind, Publisher};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::settings::{RELAY_CONNECTIONS, experiment};
use super::target::Target;
use crate::error::BoxError;
use crate::wait::{FLOOR, secs, within};

/// How long a relay may take to shut down: its own deadline for the confirms in flight
/// ([`SHUTDOWN_DEADLINE`]) and [`FLOOR`] more to record them and release its claims.
const STOP_LIMIT: Duration = SHUTDOWN_DEADLINE.saturating_add(FLOOR);

/// An in-process relay with default settings over `db`, publishing to the benchmark exchange.
/// Its publisher is connected before it starts, so a measurement does not include the connection.
/// `gauge_interval_ms`: its gauge interval (0: no gauges), the default when `None`. The relay
/// runs as a task of its own (not [`Relay::spawn`], whose handle cannot abort a shutdown), so that
/// a relay that does not shut down within [`STOP_LIMIT`] is aborted.
pub(crate) struct InProcess {
    pool: PgPool,
    publisher: AmqpPublisher,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), outbox_relayer::Error>>,
}

impl InProcess {
    pub(crate) async fn start(
        db: &TestDb,
        target: Target<'_>,
        gauge_interval_ms: Option<u64>,
    ) -> Result<Self, BoxError> {
        Self::start_with(db, target, gauge_interval_ms, None).await
    }

    /// [`InProcess::start`], running `retention` every 100 ms if given.
    pub(super) async fn start_with(
        db: &TestDb,
        target: Target<'_>,
        gauge_interval_ms: Option<u64>,
        retention: Option<outbox_ops::Retention>,
    ) -> Result<Self, BoxError> {
        let pool =
            PgPoolOptions::new().max_connections(RELAY_CONNECTIONS).connect_with(db.connect_options().clone()).await?;
        let publisher = AmqpPublisher::builder(target.url).connection_name("outbox-bench-relay").build_unchecked();
        let declared = within(
            "the relay's publisher to connect",
            FLOOR,
            publisher
                .declare_exchange(target.exchange, ExchangeKind::Topic)
                .map_err(|f| format!("cannot connect the relay's publisher: {} ({})", f.reason, f.kind)),
        )
        .await;
        if let Err(e) = declared {
            close(publisher, pool).await;
            return Err(e);
        }
        let mut relay = experiment(
            Relay::builder(pool.connect_options().as_ref().clone(), publisher.clone())
                .exchange(target.exchange)
                .declare_exchange(false),
        );
        if let Some(ms) = gauge_interval_ms {
            relay = relay.gauge_interval(Some(std::time::Duration::from_millis(ms)));
        }
        if retention.is_some() {
            relay = relay.retention(retention).retention_interval(std::time::Duration::from_millis(100));
        }
        let relay = match relay.build() {
            Ok(relay) => relay,
            Err(e) => {
                close(publisher, pool).await;
                return Err(e.into());
            }
        };
        let (stop, stopping) = oneshot::channel();
        let task = tokio::spawn(relay.run(async move {
            let _ = stopping.await;
        }));
        Ok(Self { pool, publisher, stop, task })
    }

    /// Fails if the relay task has ended (it runs until [`InProcess::stop`]).
    pub(crate) fn check_running(&self) -> Result<(), BoxError> {
        if self.task.is_finished() { Err("the relay task ended during the drain".into()) } else { Ok(()) }
    }

    /// Shuts the relay down gracefully, aborting it after [`STOP_LIMIT`]; closes its publisher and
    /// pool.
    pub(crate) async fn stop(mut self) -> Result<(), BoxError> {
        let _ = self.stop.send(());
        let stopped = match tokio::time::timeout(STOP_LIMIT, &mut self.task).await {
            Ok(Ok(ended)) => ended.map_err(BoxError::from),
            Ok(Err(e)) => Err(format!("the relay task failed: {e}").into()),
            Err(_) => {
                self.task.abort();
                Err(format!("waited {} for the relay to shut down, without an answer (aborted)", secs(STOP_LIMIT))
                    .into())
            }
        };
        close(self.publisher, self.pool).await;
        stopped
    }
}

/// Closes a relay's publisher and pool, each within [`FLOOR`] (a pool waits for its connections
/// in use; the relay's are back once its task has ended).
async fn close(publisher: AmqpPublisher, pool: PgPool) {
    let _ = tokio::time::timeout(FLOOR, publisher.close()).await;
    let _ = tokio::time::timeout(FLOOR, pool.close()).await;
}
