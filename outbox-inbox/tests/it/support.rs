//! Shared set-up of the consumer tests: the `effects` table a test handler writes one row per
//! applied event into, that handler, and what it wrote.
#![allow(dead_code, unreachable_pub)]

use outbox_inbox::{HandlerError, InboxRequest};
use sqlx::PgPool;

/// Creates the `effects` table: one row per applied event, in application order (`n`).
pub async fn effects_table(pool: &PgPool) {
    sqlx::query(
        "CREATE TABLE effects (n bigserial PRIMARY KEY, entity text, seq bigint, amount bigint, event_id uuid)",
    )
    .execute(pool)
    .await
    .expect("create effects");
}

/// The handler: one row per applied event, in the consumer's transaction.
pub async fn apply(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let amount =
        req.event().payload.json::<serde_json::Value>().map_err(|_| HandlerError::permanent("not JSON"))?["amount"]
            .as_i64();
    let (entity, seq) = match &req.event().entity {
        Some(e) => (Some(e.key.clone()), Some(e.seq as i64)),
        None => (None, None),
    };
    let id = *req.event().id.as_uuid();
    sqlx::query("INSERT INTO effects (entity, seq, amount, event_id) VALUES ($1, $2, $3, $4)")
        .bind(entity)
        .bind(seq)
        .bind(amount)
        .bind(id)
        .execute(req.conn())
        .await?;
    Ok(req)
}

/// The sequences applied for `entity`, in application order.
pub async fn effects(pool: &PgPool, entity: &str) -> Vec<i64> {
    sqlx::query_scalar("SELECT seq FROM effects WHERE entity = $1 ORDER BY n")
        .bind(entity)
        .fetch_all(pool)
        .await
        .expect("effects")
}

/// How many events were applied.
pub async fn count_effects(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM effects").fetch_one(pool).await.expect("count")
}
