//! The operator's repairs of an inbox: an event recorded as failed, retried or skipped, and a gap
//! given up on.

use outbox_types::Event;
use tower::Service;

use super::hold_back::hold_back;
use super::outcome::Outcome;
use super::request::InboxRequest;
use super::service::InboxService;
use super::store::{self, Opening};
use crate::{Error, Result};

impl<S> InboxService<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// Records a failure as final (in a transaction of its own, after the handler's rolled back),
    /// so that the entity's later events park behind it and an operator can retry it later with
    /// [`InboxService::retry_failed`]. Called for permanent failures, and by the runner when
    /// transient ones run out of attempts.
    ///
    /// # Errors
    /// A database error.
    pub async fn record_failed(&self, event: &Event, error: &Error) -> Result<()> {
        let mut tx = self.route(event)?.1.begin().await?;
        if let Some(entity) = &event.entity {
            store::lock_entity(&mut tx, self.scope(), &entity.key, 0).await?;
        }
        let error = error.to_string();
        store::store_content(&mut tx, self.scope(), event, "failed", Some(&error), self.cipher.as_ref()).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Gives up on the missing events of `entity_key` (operator action): the entity jumps to just
    /// before its lowest parked event, and the parked events are applied in order. Returns how many
    /// were applied (0 if nothing is parked).
    ///
    /// # Errors
    /// A database error.
    pub async fn skip_gap(&self, entity_key: &str) -> Result<usize> {
        let mut tx = self.db()?.begin().await?;
        let last = store::lock_entity(&mut tx, self.scope(), entity_key, 0).await?;
        let first: Option<i64> = sqlx::query_scalar(
            "SELECT min(seq) FROM inbox_events WHERE consumer = $1 AND entity_key = $2 AND status = 'parked'",
        )
        .persistent(self.persistent)
        .bind(&*self.consumer)
        .bind(entity_key)
        .fetch_one(&mut *tx)
        .await?;
        let Some(first) = first.filter(|f| *f > last + 1) else {
            tx.rollback().await?;
            return Ok(0);
        };
        store::advance(&mut tx, self.scope(), entity_key, first - 1).await?;
        tx.commit().await?;
        tracing::warn!(consumer = %self.consumer, entity = %entity_key, from = last + 1, to = first - 1, "inbox.gap_skipped");
        let mut inner = self.inner.clone();
        Ok(self.apply_parked(&mut inner, entity_key).await)
    }

    /// Gives up on an event that failed for good (operator action): it is recorded as skipped,
    /// never applied, and its entity's parked successors are applied in order. Returns how many
    /// were applied, or `None` if no failed event has this id.
    ///
    /// # Errors
    /// A database error.
    pub async fn skip_failed(&self, id: outbox_types::EventId) -> Result<Option<usize>> {
        let mut tx = self.db()?.begin().await?;
        let Some((status, event)) = store::stored(&mut tx, self.scope(), id, Opening::Keep).await? else {
            return Ok(None);
        };
        if status != "failed" {
            return Ok(None);
        }
        sqlx::query(
            "UPDATE inbox_events SET status = 'skipped', processed_at = now(), payload = NULL, payload_key_id = NULL,
                    last_error = coalesce(last_error, '') || ' (skipped by an operator)'
             WHERE consumer = $1 AND event_id = $2",
        )
        .persistent(self.persistent)
        .bind(&*self.consumer)
        .bind(id.as_uuid())
        .execute(&mut *tx)
        .await?;
        let Some(entity) = &event.entity else {
            tx.commit().await?;
            return Ok(Some(0));
        };
        let last = store::lock_entity(&mut tx, self.scope(), &entity.key, 0).await?;
        let seq = i64::try_from(entity.seq).unwrap_or(i64::MAX);
        if seq == last + 1 {
            store::advance(&mut tx, self.scope(), &entity.key, seq).await?;
        }
        tx.commit().await?;
        let mut inner = self.inner.clone();
        Ok(Some(self.apply_parked(&mut inner, &entity.key).await))
    }

    /// Runs the handler again on a stored event that failed permanently (operator action), in
    /// order: it is applied if it is its entity's next event (then its parked successors follow);
    /// if earlier events of its entity are still missing it parks ([`Outcome::Parked`]); if an
    /// operator moved the entity past it, it is recorded as stale ([`Outcome::Stale`]). Returns
    /// `None` if no failed event has this id.
    ///
    /// # Errors
    /// The handler's error if it fails again (the event stays failed, with the new reason if the
    /// failure is permanent), or a database error.
    pub async fn retry_failed(&self, id: outbox_types::EventId) -> Result<Option<Outcome>> {
        let scope = self.scope();
        let mut inner = self.inner.clone();
        let mut tx = self.db()?.begin().await?;
        let opening = Opening::With(self.cipher.as_ref());
        let Some((status, event)) = store::stored(&mut tx, scope, id, opening).await? else {
            return Ok(None);
        };
        if status != "failed" {
            return Ok(None);
        }
        let next = match &event.entity {
            Some(entity) => {
                let last = store::lock_entity(&mut tx, scope, &entity.key, 0).await?;
                // Stale if an operator moved the entity past it (a skipped gap); parked like any
                // early event if it is not its entity's next yet.
                if let Some(held) = hold_back(&mut tx, scope, self.cipher.as_ref(), &event, last).await? {
                    tx.commit().await?;
                    return Ok(Some(held));
                }
                Some((entity.key.clone(), last + 1))
            }
            None => None,
        };
        // Applied in the handler's transaction: if the handler fails again, the row stays failed
        // (with the new reason if the failure is permanent) and the error is returned.
        store::mark_processed(&mut tx, scope, event.id).await?;
        let request = self.run_or_record(&mut inner, event, tx).await?;
        let (_, mut tx) = request.into_parts();
        let successors = match next {
            Some((key, seq)) => {
                store::advance(&mut tx, scope, &key, seq).await?;
                tx.commit().await?;
                self.apply_parked(&mut inner, &key).await
            }
            None => {
                tx.commit().await?;
                0
            }
        };
        Ok(Some(Outcome::Applied { successors }))
    }
}
