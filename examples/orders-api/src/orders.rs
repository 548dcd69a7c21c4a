//! The orders: creating one and changing its status, each with its event `order.changed` in the
//! same transaction as the order's row and its history row. A request's `Idempotency-Key` becomes
//! the event's idempotency key: a retry finds the key taken, rolls back what it wrote, and answers
//! what the first request answered (read from the history row of the first request's event).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use outbox_types::{EventId, NewEvent};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;

use crate::state::AppState;

/// The order's tables: the orders, and one history row per change with the event that announced it.
pub(crate) async fn migrate(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (
             id bigserial PRIMARY KEY, status text NOT NULL, version bigint NOT NULL,
             total_cents bigint NOT NULL CHECK (total_cents >= 0));
         CREATE TABLE IF NOT EXISTS order_changes (
             event_id uuid PRIMARY KEY, order_id bigint NOT NULL REFERENCES orders, version bigint NOT NULL,
             status text NOT NULL, total_cents bigint NOT NULL, created boolean NOT NULL)",
    )
    .execute(pool)
    .await
    .map(drop)
}

/// The body of `POST /orders`.
#[derive(Debug, Deserialize)]
pub(crate) struct NewOrder {
    total_cents: i64,
}

/// The body of `PATCH /orders/{id}`.
#[derive(Debug, Deserialize)]
pub(crate) struct StatusChange {
    status: String,
}

/// An order as the API answers it, with the event that announced this version.
#[derive(Debug, Serialize, sqlx::FromRow)]
struct Order {
    id: i64,
    version: i64,
    status: String,
    total_cents: i64,
    #[sqlx(default)]
    event_id: Option<uuid::Uuid>,
}

/// What a request asks for.
enum Change {
    Create { total_cents: i64 },
    SetStatus { id: i64, status: String },
}

/// `POST /orders`: 201 with the new order.
pub(crate) async fn create(State(state): State<AppState>, headers: HeaderMap, Json(body): Json<NewOrder>) -> Response {
    if body.total_cents < 0 {
        return ApiError::Invalid("total_cents must be at least 0".to_owned()).into_response();
    }
    let key = match idempotency_key(&headers, "POST /orders") {
        Ok(key) => key,
        Err(e) => return e.into_response(),
    };
    answer(write(&state, Change::Create { total_cents: body.total_cents }, key).await)
}

/// `PATCH /orders/{id}`: 200 with the changed order; 404 if there is none.
pub(crate) async fn change(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    headers: HeaderMap,
    Json(body): Json<StatusChange>,
) -> Response {
    if body.status.is_empty() || body.status.len() > 64 {
        return ApiError::Invalid("status must be 1 to 64 bytes".to_owned()).into_response();
    }
    let key = match idempotency_key(&headers, &format!("PATCH /orders/{id}")) {
        Ok(key) => key,
        Err(e) => return e.into_response(),
    };
    answer(write(&state, Change::SetStatus { id, status: body.status }, key).await)
}

/// The request's `Idempotency-Key`, scoped to the route: one key used on two routes is two keys.
fn idempotency_key(headers: &HeaderMap, route: &str) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    let key = value.to_str().map_err(|_| ApiError::Invalid("Idempotency-Key must be visible ASCII".to_owned()))?;
    if key.is_empty() || key.len() > 128 {
        return Err(ApiError::Invalid("Idempotency-Key must be 1 to 128 characters".to_owned()));
    }
    Ok(Some(format!("{route} {key}")))
}

/// The change, its history row and its event in one transaction. With a key already taken, what
/// was written is rolled back and the first request's answer is returned instead.
async fn write(state: &AppState, change: Change, key: Option<String>) -> Result<Answer, ApiError> {
    let mut tx = state.pool.begin().await?;
    let created = matches!(change, Change::Create { .. });
    let mut order = apply(&mut tx, change).await?.ok_or(ApiError::NotFound)?;
    let payload = json!({ "order_id": order.id, "version": order.version, "status": order.status });
    let mut event = NewEvent::json("order.changed", &payload).map_err(|e| ApiError::Invalid(e.to_string()))?;
    event = event.entity(format!("order-{}", order.id));
    if let Some(key) = key {
        event = event.idempotency_key(key);
    }
    let event_id = match state.outbox.enqueue(&mut *tx, event).await {
        Ok(id) => id,
        Err(outbox_producer::Error::AlreadyEnqueued { event_id, .. }) => {
            tx.rollback().await?;
            return replay(&state.pool, event_id).await;
        }
        Err(e) => return Err(e.into()),
    };
    record(&mut tx, &order, event_id, created).await?;
    tx.commit().await?;
    order.event_id = Some(uuid::Uuid::from(event_id));
    Ok(Answer { order, created, replayed: false })
}

/// Writes the order: a new one, or a new status and version of an existing one (`None`: no such
/// order).
async fn apply(tx: &mut sqlx::PgConnection, change: Change) -> Result<Option<Order>, sqlx::Error> {
    match change {
        Change::Create { total_cents } => {
            sqlx::query_as(
                "INSERT INTO orders (status, version, total_cents) VALUES ('placed', 1, $1)
             RETURNING id, version, status, total_cents",
            )
            .bind(total_cents)
            .fetch_optional(tx)
            .await
        }
        Change::SetStatus { id, status } => {
            sqlx::query_as(
                "UPDATE orders SET status = $2, version = version + 1 WHERE id = $1
             RETURNING id, version, status, total_cents",
            )
            .bind(id)
            .bind(status)
            .fetch_optional(tx)
            .await
        }
    }
}

/// The history row of this change: what a retry with the same key answers.
async fn record(tx: &mut sqlx::PgConnection, order: &Order, event: EventId, created: bool) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO order_changes (event_id, order_id, version, status, total_cents, created)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(uuid::Uuid::from(event))
    .bind(order.id)
    .bind(order.version)
    .bind(&order.status)
    .bind(order.total_cents)
    .bind(created)
    .execute(tx)
    .await
    .map(drop)
}

/// The first answer to a request whose key `event` took.
async fn replay(pool: &PgPool, event: EventId) -> Result<Answer, ApiError> {
    let row: Option<(i64, i64, String, i64, bool)> =
        sqlx::query_as("SELECT order_id, version, status, total_cents, created FROM order_changes WHERE event_id = $1")
            .bind(uuid::Uuid::from(event))
            .fetch_optional(pool)
            .await?;
    let (id, version, status, total_cents, created) = row.ok_or(ApiError::KeyInUse)?;
    let order = Order { id, version, status, total_cents, event_id: Some(uuid::Uuid::from(event)) };
    Ok(Answer { order, created, replayed: true })
}

/// A successful answer: the order, whether it was created, whether this is a replay.
struct Answer {
    order: Order,
    created: bool,
    replayed: bool,
}

fn answer(result: Result<Answer, ApiError>) -> Response {
    match result {
        Ok(a) => {
            let status = if a.created { StatusCode::CREATED } else { StatusCode::OK };
            let replayed = [("idempotent-replayed", if a.replayed { "true" } else { "false" })];
            (status, replayed, Json(a.order)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// What a request can fail with. A server-side failure is logged with its message and answered
/// without it.
#[derive(Debug)]
enum ApiError {
    Invalid(String),
    NotFound,
    KeyInUse,
    Internal(String),
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        Self::Internal(outbox_types::db_error::DbMessage(&e).to_string())
    }
}

impl From<outbox_producer::Error> for ApiError {
    fn from(e: outbox_producer::Error) -> Self {
        match e {
            outbox_producer::Error::InvalidEvent(e) => Self::Invalid(e.to_string()),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Self::Invalid(why) => (StatusCode::UNPROCESSABLE_ENTITY, why),
            Self::NotFound => (StatusCode::NOT_FOUND, "no such order".to_owned()),
            Self::KeyInUse => (StatusCode::CONFLICT, "this Idempotency-Key was used by another request".to_owned()),
            Self::Internal(why) => {
                tracing::error!(error = %why, "request failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "internal error".to_owned())
            }
        };
        (status, Json(json!({ "error": message }))).into_response()
    }
}
