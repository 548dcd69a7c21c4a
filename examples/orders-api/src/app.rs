//! The HTTP side: the routes, the state they share, and the probes answered from the relay's
//! health.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, patch, post};
use outbox_producer::Outbox;
use outbox_relayer::RelayProbe;
use sqlx::PgPool;

use crate::state::AppState;

/// The routes: the orders, and the probes.
pub(crate) fn router(pool: PgPool, relay: RelayProbe) -> Router {
    let state = AppState { pool, outbox: std::sync::Arc::new(Outbox::new()), relay };
    Router::new()
        .route("/orders", post(crate::orders::create))
        .route("/orders/{id}", patch(crate::orders::change))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Alive while the relay's task runs and its loop goes round.
async fn healthz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.relay.is_live() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "relay stopped or stalled\n")
    }
}

/// Ready while the relay publishes: its loop runs and the database and the broker answer it.
async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    let health = state.relay.health();
    if health.is_ready() {
        return (StatusCode::OK, "ready\n".to_owned());
    }
    let why = match (health.stopped, health.database_reachable, health.broker_reachable) {
        (true, _, _) => "the relay stopped",
        (_, false, _) => "the relay cannot reach the database",
        (_, _, false) => "the relay cannot reach the broker",
        _ => "the relay is starting",
    };
    (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n"))
}
