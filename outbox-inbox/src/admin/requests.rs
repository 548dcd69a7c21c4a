//! Repairs an operator makes without the consumer's handler (the `outbox inbox` command): each
//! moves the inbox's state under the entity's lock, and the running consumer's sweep (every
//! `sweep_interval`, 5 s by default) applies, through its handler and in order, whatever the repair
//! made ready. [`crate::InboxService`]'s `retry_failed`, `skip_failed` and `skip_gap` do the same
//! and apply at once, for a service that has the handler at hand.

use outbox_types::EventId;
use sqlx::PgPool;

use crate::Result;
use crate::inbox::store;

/// What a handler-free repair did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Requested {
    /// Done: the running consumer applies what it made ready at its next sweep.
    Done,
    /// No event of this consumer in the state the repair needs (failed; for a gap, parked events
    /// behind a hole) has this id or entity.
    NotFound,
    /// The failed event belongs to no entity: only its service can run the handler on it again
    /// (`InboxService::retry_failed`).
    Unordered,
}

/// Locks the entity of event `id` first, as the consumer does (entity, then event rows), then the
/// event's stored row if it is failed: `None` when there is no such failed event.
async fn lock_failed(
    tx: &mut sqlx::PgConnection,
    consumer: &str,
    id: EventId,
) -> Result<Option<(outbox_types::Event, i64)>> {
    let key: Option<Option<String>> =
        sqlx::query_scalar("SELECT entity_key FROM inbox_events WHERE consumer = $1 AND event_id = $2")
            .bind(consumer)
            .bind(id.as_uuid())
            .fetch_optional(&mut *tx)
            .await?;
    let last = match key.flatten() {
        Some(key) => store::lock_entity(tx, store::Scope::direct(consumer), &key, 0).await?,
        None => 0,
    };
    match store::stored(tx, store::Scope::direct(consumer), id, store::Opening::Keep).await? {
        Some((status, event)) if status == "failed" => Ok(Some((event, last))),
        _ => Ok(None),
    }
}

/// Asks for a failed event to be applied again: it is parked again, so the consumer's sweep runs
/// the handler on it when it is its entity's next event, and on its parked successors after it.
///
/// # Errors
/// A database error.
pub async fn request_retry(pool: &PgPool, consumer: &str, id: EventId) -> Result<Requested> {
    let mut tx = pool.begin().await?;
    let Some((event, _)) = lock_failed(&mut tx, consumer, id).await? else {
        return Ok(Requested::NotFound);
    };
    if event.entity.is_none() {
        return Ok(Requested::Unordered);
    }
    sqlx::query("UPDATE inbox_events SET status = 'parked', attempts = 0 WHERE consumer = $1 AND event_id = $2")
        .bind(consumer)
        .bind(id.as_uuid())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(consumer, event_id = %id, "inbox.retry_requested");
    Ok(Requested::Done)
}

/// Gives up on a failed event: recorded as skipped (payload dropped, `reason` kept with its last
/// error), and if it was its entity's next event the entity moves past it, so the consumer's sweep
/// applies its parked successors.
///
/// # Errors
/// A database error.
pub async fn skip_failed(pool: &PgPool, consumer: &str, id: EventId, reason: Option<&str>) -> Result<Requested> {
    let mut tx = pool.begin().await?;
    let Some((event, last)) = lock_failed(&mut tx, consumer, id).await? else {
        return Ok(Requested::NotFound);
    };
    if let Some(entity) = &event.entity {
        let seq = i64::try_from(entity.seq).unwrap_or(i64::MAX);
        if seq == last + 1 {
            store::advance(&mut tx, store::Scope::direct(consumer), &entity.key, seq).await?;
        }
    }
    sqlx::query(
        "UPDATE inbox_events SET status = 'skipped', processed_at = now(), payload = NULL, payload_key_id = NULL,
                last_error = coalesce(last_error, '') || ' (skipped by an operator' || coalesce(': ' || $3, '') || ')'
         WHERE consumer = $1 AND event_id = $2",
    )
    .bind(consumer)
    .bind(id.as_uuid())
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(consumer, event_id = %id, "inbox.failed_skipped");
    Ok(Requested::Done)
}

/// Gives up on the missing events of `entity_key`: the entity moves to just before its lowest
/// parked event, so the consumer's sweep applies the parked events in order. Returns the
/// sequences given up on (`from..=to`), or `None` if nothing of the entity is parked behind a
/// hole.
///
/// # Errors
/// A database error.
pub async fn skip_gap(pool: &PgPool, consumer: &str, entity_key: &str) -> Result<Option<(i64, i64)>> {
    let mut tx = pool.begin().await?;
    let last = store::lock_entity(&mut tx, store::Scope::direct(consumer), entity_key, 0).await?;
    let first: Option<i64> = sqlx::query_scalar(
        "SELECT min(seq) FROM inbox_events WHERE consumer = $1 AND entity_key = $2 AND status = 'parked'",
    )
    .bind(consumer)
    .bind(entity_key)
    .fetch_one(&mut *tx)
    .await?;
    let Some(first) = first.filter(|f| *f > last + 1) else {
        tx.rollback().await?;
        return Ok(None);
    };
    store::advance(&mut tx, store::Scope::direct(consumer), entity_key, first - 1).await?;
    tx.commit().await?;
    tracing::warn!(consumer, entity = %entity_key, from = last + 1, to = first - 1, "inbox.gap_skipped");
    Ok(Some((last + 1, first - 1)))
}
