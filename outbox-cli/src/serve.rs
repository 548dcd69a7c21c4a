//! The HTTP endpoint of `--metrics-addr`: `/metrics` in the Prometheus text format; for the relay,
//! `/healthz` (the claim loop goes round) and `/readyz` (the database and the broker answer it).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use outbox_relayer::{AmqpPublisher, Relay};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::error::CliError;

/// What the probes ask, set once it is built (before that, the command waits for its servers:
/// alive, not ready).
pub(crate) type Probed = Arc<OnceLock<Probe>>;

/// The relay of one database, or the fleet of many.
pub(crate) enum Probe {
    Relay(Relay<AmqpPublisher>),
    /// Whether the fleet's task runs: each database's state is in the metrics
    /// (`outbox_fleet_database_failing`), since one failing database must not make the process
    /// that relays fifty others unready.
    Fleet(Arc<std::sync::atomic::AtomicBool>),
}

#[derive(Clone)]
struct Endpoint {
    metrics: PrometheusHandle,
    relay: Probed,
}

/// Binds `addr` and installs the Prometheus recorder, before anything else starts, so that a port
/// that cannot be bound is a start-up error with its cause. With a relay to probe, `/healthz` and
/// `/readyz` too; without (a replay), `/metrics` alone.
///
/// # Errors
/// [`CliError::Listen`] if the address cannot be bound; [`CliError::Metrics`] if a recorder is
/// already installed.
///
/// With `gauges_idle`, a gauge not set for that long leaves the page (a fleet's database given to
/// another process, or removed from the list, stops showing its last values).
pub(crate) async fn start(
    addr: SocketAddr,
    relay: Option<Probed>,
    gauges_idle: Option<std::time::Duration>,
) -> Result<JoinHandle<()>, CliError> {
    let listener = TcpListener::bind(addr).await.map_err(|e| CliError::Listen(addr, e))?;
    let metrics = PrometheusBuilder::new()
        .idle_timeout(metrics_util::MetricKindMask::GAUGE, gauges_idle)
        .install_recorder()
        .map_err(|e| CliError::Metrics(e.to_string()))?;
    let probes = relay.is_some();
    let mut app = Router::new().route("/metrics", get(metrics_text));
    if probes {
        app = app.route("/healthz", get(healthz)).route("/readyz", get(readyz));
    }
    let app = app.with_state(Endpoint { metrics, relay: relay.unwrap_or_default() });
    tracing::info!(%addr, probes, "serving /metrics");
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics endpoint stopped");
        }
    }))
}

async fn metrics_text(State(endpoint): State<Endpoint>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], endpoint.metrics.render())
}

async fn healthz(State(endpoint): State<Endpoint>) -> (StatusCode, &'static str) {
    match endpoint.relay.get() {
        None => (StatusCode::OK, "starting\n"),
        Some(Probe::Fleet(running)) => fleet_state(running),
        Some(Probe::Relay(relay)) if relay.health().is_live(relay.liveness_window()) => (StatusCode::OK, "ok\n"),
        Some(_) => (StatusCode::SERVICE_UNAVAILABLE, "the claim loop stalled\n"),
    }
}

async fn readyz(State(endpoint): State<Endpoint>) -> (StatusCode, &'static str) {
    let relay = match endpoint.relay.get() {
        None => return (StatusCode::SERVICE_UNAVAILABLE, "waiting for the database and the broker\n"),
        Some(Probe::Fleet(running)) => return fleet_state(running),
        Some(Probe::Relay(relay)) => relay,
    };
    let health = relay.health();
    match (health.is_ready(), health.database_reachable, health.broker_reachable) {
        (true, ..) => (StatusCode::OK, "ready\n"),
        (false, false, _) => (StatusCode::SERVICE_UNAVAILABLE, "the database does not answer\n"),
        (false, _, false) => (StatusCode::SERVICE_UNAVAILABLE, "the broker cannot be reached\n"),
        (false, ..) => (StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
    }
}

/// A fleet is live and ready while its task runs.
fn fleet_state(running: &std::sync::atomic::AtomicBool) -> (StatusCode, &'static str) {
    if running.load(std::sync::atomic::Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "the fleet stopped\n")
    }
}
