use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use outbox_core::Event;
use sqlx::PgPool;
use tower::{Layer, Service};

use super::{InboxRequest, Outcome, StartPolicy, store};
use crate::{Error, HandlerError, Result};

/// Wraps a handler (`Service<InboxRequest, Response = InboxRequest>`) in the inbox.
///
/// ```no_run
/// use outbox_consumer::{HandlerError, InboxLayer, InboxRequest};
/// use tower::{Layer, ServiceBuilder};
///
/// # fn demo(pool: sqlx::PgPool) {
/// let handler = tower::service_fn(|req: InboxRequest| async move { Ok::<_, HandlerError>(req) });
/// let service = ServiceBuilder::new()
///     .timeout(std::time::Duration::from_secs(5)) // tower's own layers compose around it
///     .layer(InboxLayer::new(pool, "shipping"))
///     .service(handler);
/// # let _ = service;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct InboxLayer {
    pool: PgPool,
    consumer: Arc<str>,
    start: StartPolicy,
}

impl InboxLayer {
    /// An inbox in `pool` for the consumer named `consumer` (its rows are scoped by this name).
    pub fn new(pool: PgPool, consumer: impl Into<String>) -> Self {
        crate::metrics::describe();
        Self { pool, consumer: Arc::from(consumer.into()), start: StartPolicy::default() }
    }

    /// Sets where an entity's numbering starts for this consumer. Defaults to
    /// [`StartPolicy::FromFirst`].
    #[must_use]
    pub fn start_policy(mut self, policy: StartPolicy) -> Self {
        self.start = policy;
        self
    }
}

impl<S> Layer<S> for InboxLayer {
    type Service = InboxService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        InboxService { inner, pool: self.pool.clone(), consumer: self.consumer.clone(), start: self.start }
    }
}

/// The inbox around a handler: a `Service<Event, Response = Outcome>`.
///
/// For each event, in one transaction: record the event id (a duplicate stops here), check the
/// entity sequence (stale: stop; ahead: park), run the handler, advance the entity, commit. Then
/// every parked successor that is now next is applied in order, each in its own transaction.
#[derive(Debug, Clone)]
pub struct InboxService<S> {
    inner: S,
    pool: PgPool,
    consumer: Arc<str>,
    start: StartPolicy,
}

/// Holds back an ordered event that is not its entity's next (the entity being at `last`): one at
/// or below `last` is recorded as stale, one further ahead is stored in the parking. Returns the
/// outcome if it was held back, `None` if it is next (or unordered).
async fn hold_back(tx: &mut sqlx::PgConnection, consumer: &str, event: &Event, last: i64) -> Result<Option<Outcome>> {
    let Some(entity) = &event.entity else { return Ok(None) };
    let seq = i64::try_from(entity.seq).unwrap_or(i64::MAX);
    if seq <= last {
        store::mark_stale(tx, consumer, event.id, last).await?;
        return Ok(Some(Outcome::Stale));
    }
    if seq > last + 1 {
        store::store_content(tx, consumer, event, "parked", None).await?;
        tracing::debug!(event_id = %event.id, entity = %entity.key, seq, last, "inbox.parked");
        return Ok(Some(Outcome::Parked));
    }
    Ok(None)
}

/// Turns whatever the handler stack returned into the inbox's error.
fn handler_error<E: Into<tower::BoxError>>(e: E) -> Error {
    let e: tower::BoxError = e.into();
    match e.downcast::<HandlerError>() {
        Ok(h) => Error::Handler(*h),
        Err(other) => Error::Layer(other),
    }
}

impl<S> InboxService<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// The consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn run_handler(
        inner: &mut S,
        event: Event,
        tx: sqlx::Transaction<'static, sqlx::Postgres>,
    ) -> Result<InboxRequest> {
        let request = InboxRequest { event, tx };
        let fut = async {
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await.map_err(handler_error)?;
            inner.call(request).await.map_err(handler_error)
        };
        match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(r) => r,
            Err(_) => Err(Error::Panicked),
        }
    }

    /// Runs the handler; a permanent failure is recorded (see [`InboxService::record_failed`])
    /// before it is returned.
    async fn run_or_record(
        &self,
        inner: &mut S,
        event: Event,
        tx: sqlx::Transaction<'static, sqlx::Postgres>,
    ) -> Result<InboxRequest> {
        let copy = event.clone();
        let result = Self::run_handler(inner, event, tx).await;
        if let Err(e) = &result
            && !e.is_retryable()
        {
            self.record_failed(&copy, e).await?;
        }
        result
    }

    /// Records a failure as final (in a transaction of its own, after the handler's rolled back),
    /// so that the entity's later events park behind it and an operator can retry it later with
    /// [`InboxService::retry_failed`]. Called for permanent failures, and by the runner when
    /// transient ones run out of attempts.
    ///
    /// # Errors
    /// A database error.
    pub async fn record_failed(&self, event: &Event, error: &Error) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if let Some(entity) = &event.entity {
            store::lock_entity(&mut tx, &self.consumer, &entity.key, 0).await?;
        }
        store::store_content(&mut tx, &self.consumer, event, "failed", Some(&error.to_string())).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Where the event's entity starts if this consumer has never seen it (the start policy).
    fn initial_seq(&self, event: &Event) -> i64 {
        match (&event.entity, self.start) {
            (Some(entity), StartPolicy::FromFirstSeen) => i64::try_from(entity.seq).unwrap_or(i64::MAX) - 1,
            _ => 0,
        }
    }

    async fn handle(&self, inner: &mut S, event: Event) -> Result<Outcome> {
        let consumer = &*self.consumer;
        let mut tx = self.pool.begin().await?;
        let (last, fresh) = store::admit(&mut tx, consumer, &event, self.initial_seq(&event)).await?;
        if !fresh {
            tx.rollback().await?;
            return Ok(Outcome::Duplicate);
        }
        if let Some(last) = last
            && let Some(held) = hold_back(&mut tx, consumer, &event, last).await?
        {
            tx.commit().await?;
            return Ok(held);
        }
        let request = self.run_or_record(inner, event, tx).await?;
        let (event, mut tx) = request.into_parts();
        let mut next_parked = false;
        if let Some(entity) = &event.entity {
            next_parked =
                store::advance(&mut tx, consumer, &entity.key, i64::try_from(entity.seq).unwrap_or(i64::MAX)).await?;
        }
        tx.commit().await?;
        let successors = match &event.entity {
            Some(entity) if next_parked => self.apply_parked(inner, &entity.key).await,
            _ => 0,
        };
        Ok(Outcome::Applied { successors })
    }

    /// Handles a batch of events in one transaction, all or nothing, and returns each event's
    /// outcome in order. The events must have distinct ids and distinct entities
    /// ([`Error::InvalidBatch`] otherwise); [`InboxRunner`](crate::InboxRunner) groups its
    /// deliveries so. Each event gets the outcome [`Service::call`] would give it, after the same
    /// checks, but the batch costs one admission statement, one advance and one commit; the
    /// handler runs once per event to apply, on the batch's transaction.
    ///
    /// On any error nothing of the batch is committed (a failing handler consumes its request,
    /// and with it the transaction): apply the events one at a time with [`Service::call`], which
    /// classifies the failure and records a permanent one. Parked successors that the batch made
    /// next are applied after the commit, each in a transaction of its own, as after a single
    /// event.
    ///
    /// # Errors
    /// [`Error::InvalidBatch`], a database error, or the first handler failure.
    pub async fn call_batch(&self, events: Vec<Event>) -> Result<Vec<Outcome>> {
        let mut ids = std::collections::HashSet::with_capacity(events.len());
        let mut keys = std::collections::HashSet::with_capacity(events.len());
        for event in &events {
            if !ids.insert(event.id) {
                return Err(Error::InvalidBatch("event id"));
            }
            if let Some(entity) = &event.entity
                && !keys.insert(entity.key.as_str())
            {
                return Err(Error::InvalidBatch("entity"));
            }
        }
        let consumer = &*self.consumer;
        let mut inner = self.inner.clone();
        let initial: Vec<i64> = events.iter().map(|e| self.initial_seq(e)).collect();
        let mut tx = self.pool.begin().await?;
        let admitted = store::admit_batch(&mut tx, consumer, &events, &initial).await?;
        let mut outcomes = Vec::with_capacity(events.len());
        // Entities moved by the batch: key, new sequence, and the index of the event's outcome.
        let mut moved: Vec<(String, i64, usize)> = Vec::new();
        for (event, (last, fresh)) in events.into_iter().zip(admitted) {
            if !fresh {
                outcomes.push(Outcome::Duplicate);
                continue;
            }
            if let (Some(entity), Some(last)) = (&event.entity, last) {
                if let Some(held) = hold_back(&mut tx, consumer, &event, last).await? {
                    outcomes.push(held);
                    continue;
                }
                moved.push((entity.key.clone(), last + 1, outcomes.len()));
            }
            (_, tx) = Self::run_handler(&mut inner, event, tx).await?.into_parts();
            outcomes.push(Outcome::Applied { successors: 0 });
        }
        let parked = if moved.is_empty() {
            Vec::new()
        } else {
            let keys: Vec<&str> = moved.iter().map(|(k, _, _)| k.as_str()).collect();
            let seqs: Vec<i64> = moved.iter().map(|(_, s, _)| *s).collect();
            store::advance_batch(&mut tx, consumer, &keys, &seqs).await?
        };
        tx.commit().await?;
        for key in parked {
            let applied = self.apply_parked(&mut inner, &key).await;
            if let Some((_, _, i)) = moved.iter().find(|(k, _, _)| *k == key) {
                outcomes[*i] = Outcome::Applied { successors: applied };
            }
        }
        for outcome in &outcomes {
            metrics::counter!(crate::metrics::EVENTS, "consumer" => consumer.to_owned(), "outcome" => outcome.as_str())
                .increment(1);
        }
        Ok(outcomes)
    }

    /// Applies the entity's parked events that are now next, in order, each in its own
    /// transaction. Stops at the first that is missing or fails (it stays parked, or is recorded
    /// as failed); returns how many were applied.
    async fn apply_parked(&self, inner: &mut S, key: &str) -> usize {
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
    async fn apply_next_parked(&self, inner: &mut S, key: &str) -> Result<Option<bool>> {
        let consumer = &*self.consumer;
        let mut tx = self.pool.begin().await?;
        let last = store::lock_entity(&mut tx, consumer, key, 0).await?;
        let Some(event) = store::parked_at(&mut tx, consumer, key, last + 1).await? else {
            tx.rollback().await?;
            return Ok(None);
        };
        store::mark_processed(&mut tx, consumer, event.id).await?;
        let request = self.run_or_record(inner, event, tx).await?;
        let (event, mut tx) = request.into_parts();
        let next_parked = store::advance(&mut tx, consumer, key, last + 1).await?;
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
    /// A database error.
    pub async fn sweep_parked(&self) -> Result<usize> {
        let mut conn = self.pool.acquire().await?;
        let keys = store::ready_entities(&mut conn, &self.consumer, 100).await?;
        drop(conn);
        let mut inner = self.inner.clone();
        let mut applied = 0;
        for key in keys {
            applied += self.apply_parked(&mut inner, &key).await;
        }
        Ok(applied)
    }

    /// Gives up on the missing events of `entity_key` (operator action): the entity jumps to just
    /// before its lowest parked event, and the parked events are applied in order. Returns how many
    /// were applied (0 if nothing is parked).
    ///
    /// # Errors
    /// A database error.
    pub async fn skip_gap(&self, entity_key: &str) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let last = store::lock_entity(&mut tx, &self.consumer, entity_key, 0).await?;
        let first: Option<i64> = sqlx::query_scalar(
            "SELECT min(seq) FROM inbox_events WHERE consumer = $1 AND entity_key = $2 AND status = 'parked'",
        )
        .bind(&*self.consumer)
        .bind(entity_key)
        .fetch_one(&mut *tx)
        .await?;
        let Some(first) = first.filter(|f| *f > last + 1) else {
            tx.rollback().await?;
            return Ok(0);
        };
        store::advance(&mut tx, &self.consumer, entity_key, first - 1).await?;
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
    pub async fn skip_failed(&self, id: outbox_core::EventId) -> Result<Option<usize>> {
        let mut tx = self.pool.begin().await?;
        let Some((status, event)) = store::stored(&mut tx, &self.consumer, id).await? else { return Ok(None) };
        if status != "failed" {
            return Ok(None);
        }
        sqlx::query(
            "UPDATE inbox_events SET status = 'skipped', processed_at = now(), payload = NULL,
                    last_error = coalesce(last_error, '') || ' (skipped by an operator)'
             WHERE consumer = $1 AND event_id = $2",
        )
        .bind(&*self.consumer)
        .bind(id.as_uuid())
        .execute(&mut *tx)
        .await?;
        let Some(entity) = &event.entity else {
            tx.commit().await?;
            return Ok(Some(0));
        };
        let last = store::lock_entity(&mut tx, &self.consumer, &entity.key, 0).await?;
        let seq = i64::try_from(entity.seq).unwrap_or(i64::MAX);
        if seq == last + 1 {
            store::advance(&mut tx, &self.consumer, &entity.key, seq).await?;
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
    pub async fn retry_failed(&self, id: outbox_core::EventId) -> Result<Option<Outcome>> {
        let consumer = &*self.consumer;
        let mut inner = self.inner.clone();
        let mut tx = self.pool.begin().await?;
        let Some((status, event)) = store::stored(&mut tx, consumer, id).await? else {
            return Ok(None);
        };
        if status != "failed" {
            return Ok(None);
        }
        let next = match &event.entity {
            Some(entity) => {
                let last = store::lock_entity(&mut tx, consumer, &entity.key, 0).await?;
                // Stale if an operator moved the entity past it (a skipped gap); parked like any
                // early event if it is not its entity's next yet.
                if let Some(held) = hold_back(&mut tx, consumer, &event, last).await? {
                    tx.commit().await?;
                    return Ok(Some(held));
                }
                Some((entity.key.clone(), last + 1))
            }
            None => None,
        };
        // Applied in the handler's transaction: if the handler fails again, the row stays failed
        // (with the new reason if the failure is permanent) and the error is returned.
        store::mark_processed(&mut tx, consumer, event.id).await?;
        let request = self.run_or_record(&mut inner, event, tx).await?;
        let (_, mut tx) = request.into_parts();
        let successors = match next {
            Some((key, seq)) => {
                store::advance(&mut tx, consumer, &key, seq).await?;
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

impl<S> Service<Event> for InboxService<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    type Response = Outcome;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Outcome>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<()>> {
        // The handler's readiness is awaited inside the call, once the transaction is open.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: Event) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let mut inner = this.inner.clone();
            let id = event.id;
            let result = this.handle(&mut inner, event).await;
            let label = match &result {
                Ok(o) => o.as_str(),
                Err(e) if e.is_retryable() => "transient_failure",
                Err(_) => "permanent_failure",
            };
            metrics::counter!(crate::metrics::EVENTS, "consumer" => this.consumer.to_string(), "outcome" => label)
                .increment(1);
            tracing::debug!(event_id = %id, outcome = label, "inbox.handled");
            result
        })
    }
}
