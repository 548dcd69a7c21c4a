//! A relay in-process, as the latency and backlog-size phases run it.

use outbox_core::{ExchangeKind, Publisher};
use outbox_relay::{AmqpPublisher, Relay, RelayHandle};
use outbox_testkit::TestDb;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use super::Target;
use super::settings::{RELAY_CONNECTIONS, experiment};
use crate::BoxError;

/// An in-process relay with default settings over `db`, publishing to the benchmark exchange.
/// Its publisher is connected before it starts, so a measurement does not include the connection.
/// `gauge_interval_ms`: its gauge interval (0: no gauges), the default when `None`.
pub(super) struct InProcess {
    pool: PgPool,
    publisher: AmqpPublisher,
    handle: RelayHandle,
}

impl InProcess {
    pub(super) async fn start(
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
        retention: Option<outbox_producer::Retention>,
    ) -> Result<Self, BoxError> {
        let pool =
            PgPoolOptions::new().max_connections(RELAY_CONNECTIONS).connect_with(db.connect_options().clone()).await?;
        let publisher = AmqpPublisher::builder(target.url).connection_name("outbox-bench-relay").build();
        if let Err(f) = publisher.declare_exchange(target.exchange, ExchangeKind::Topic).await {
            pool.close().await;
            return Err(format!("cannot connect the relay's publisher: {} ({})", f.reason, f.kind).into());
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
        let handle = match relay.build() {
            Ok(relay) => relay.spawn(),
            Err(e) => {
                publisher.close().await;
                pool.close().await;
                return Err(e.into());
            }
        };
        Ok(Self { pool, publisher, handle })
    }

    pub(super) async fn stop(self) -> Result<(), BoxError> {
        let stopped = self.handle.shutdown().await;
        self.publisher.close().await;
        self.pool.close().await;
        Ok(stopped?)
    }
}
