//! The service's HTTP endpoint (`OUTBOX_METRICS_ADDR`): `/metrics` in the Prometheus text format
//! (the inbox's counters and gauges, labelled `consumer="shipping"`), `/healthz` (the process
//! serves) and `/readyz` (the runner consumes).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

use crate::BoxError;

#[derive(Clone)]
struct Endpoint {
    metrics: PrometheusHandle,
    ready: Arc<AtomicBool>,
}

/// Binds `addr` and installs the Prometheus recorder, before the runner starts, so that a port
/// that cannot be bound stops the service at start-up. `ready` says whether the runner consumes.
///
/// # Errors
/// The address cannot be bound (the error names it), or a recorder is already installed.
pub async fn serve(addr: SocketAddr, ready: Arc<AtomicBool>) -> Result<tokio::task::JoinHandle<()>, BoxError> {
    let listener = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let metrics = PrometheusBuilder::new().install_recorder().map_err(|e| format!("cannot install metrics: {e}"))?;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(Endpoint { metrics, ready });
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics endpoint stopped");
        }
    }))
}

async fn metrics_text(State(endpoint): State<Endpoint>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], endpoint.metrics.render())
}

async fn readyz(State(endpoint): State<Endpoint>) -> (StatusCode, &'static str) {
    if endpoint.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not consuming\n")
    }
}
