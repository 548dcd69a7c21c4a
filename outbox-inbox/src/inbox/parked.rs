//! Events that arrived ahead of their entity's next (held back by `hold_back`): applied in order
//! when their gap fills (right after the predecessor, or by the periodic sweep).

use tower::Service;

use super::request::InboxRequest;
use super::service::InboxService;
use super::store;
use crate::Result;

impl<S> InboxService<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// Applies the entity's parked events that are now next, in order, each in its own
    /// transaction. Stops at the first that is missing or fails (it stays parked, or is recorded
    /// as failed); returns how many were applied.
    pub(super) async fn apply_parked(&self, inner: &mut S, key: &str) -> usize {
        let mut applied = 0;
        loop {
            match self.apply_next_parked(inner, key).await {
                Ok(Some(next_parked)) => {
                    applied += 1;
                    if !next_parked {
                        return applied;
                    }
                }
                Ok(None) => return applied,
                Err(e) => {
                    tracing::warn!(entity = %key, error = %e, "inbox.parked_failed");
                    return applied;
                }
            }
        }
    }

    /// Applies the entity's next event if it is parked; returns `None` if it is not, or whether the
    /// one after it is parked too.
    pub(super) async fn apply_next_parked(&self, inner: &mut S, key: &str) -> Result<Option<bool>> {
        let (consumer, scope) = (&*self.consumer, self.scope());
        let mut tx = self.db()?.begin().await?;
        let last = store::lock_entity(&mut tx, scope, key, 0).await?;
        let Some(event) = store::parked_at(&mut tx, scope, key, last + 1, self.cipher.as_ref()).await? else {
            tx.rollback().await?;
            return Ok(None);
        };
        store::mark_processed(&mut tx, scope, event.id).await?;
        let request = self.run_or_record(inner, event, tx).await?;
        let (event, mut tx) = request.into_parts();
        let next_parked = store::advance(&mut tx, scope, key, last + 1).await?;
        tx.commit().await?;
        metrics::counter!(crate::metrics::EVENTS, "consumer" => consumer.to_owned(), "outcome" => "applied_from_parking")
            .increment(1);
        tracing::debug!(event_id = %event.id, entity = %key, seq = last + 1, "inbox.unparked");
        Ok(Some(next_parked))
    }

    /// Applies parked events whose gap has filled but which were not applied yet (after a handler
    /// failure or a crash between two transactions). The AMQP runner calls this periodically;
    /// returns how many were applied.
    ///
    /// # Errors
    /// A database error (in a multi-tenant inbox, the first tenant's that failed; the others are
    /// swept all the same).
    pub async fn sweep_parked(&self) -> Result<usize> {
        if self.tenants().is_none() {
            return self.sweep_parked_in_one().await;
        }
        let (mut applied, mut failed) = (0, None);
        for (_, pool) in self.databases() {
            match self.with_pool(pool).sweep_parked_in_one().await {
                Ok(n) => applied += n,
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        failed.map_or(Ok(applied), Err)
    }

    async fn sweep_parked_in_one(&self) -> Result<usize> {
        // In a transaction, as every statement of the inbox: behind a pooler in transaction mode
        // an unnamed statement is safe only there.
        let mut tx = self.db()?.begin().await?;
        let keys = store::ready_entities(&mut tx, self.scope(), 100).await?;
        tx.commit().await?;
        let mut inner = self.inner.clone();
        let mut applied = 0;
        for key in keys {
            applied += self.apply_parked(&mut inner, &key).await;
        }
        Ok(applied)
    }
}
