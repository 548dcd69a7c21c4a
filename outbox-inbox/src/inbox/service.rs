//! [`InboxService`]: one event, or a batch of them, applied once and in order, in the handler's
//! transaction.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use outbox_types::Event;
use sqlx::PgPool;
use tower::Service;

use super::hold_back::hold_back;
use super::outcome::Outcome;
use super::request::InboxRequest;
use super::start_policy::StartPolicy;
use super::store;
use super::tenants::{Databases, Tenants};
use crate::{Error, HandlerError, Result};

/// The inbox around a handler: a `Service<Event, Response = Outcome>`.
///
/// For each event, in one transaction: record the event id (a duplicate stops here), check the
/// entity sequence (stale: stop; ahead: park), run the handler, advance the entity, commit. Then
/// every parked successor that is now next is applied in order, each in its own transaction.
///
/// A multi-tenant inbox ([`InboxLayer::for_tenants`](crate::InboxLayer::for_tenants)) does all
/// of this in the event's tenant's database.
#[derive(Debug, Clone)]
pub struct InboxService<S> {
    pub(super) inner: S,
    pub(super) databases: Databases,
    pub(super) consumer: Arc<str>,
    pub(super) start: StartPolicy,
    pub(super) cipher: Option<outbox_types::PayloadCipher>,
    pub(super) persistent: bool,
}

/// [`Error::InvalidBatch`] unless the events have distinct ids and distinct entities (across
/// tenants too: checked before anything is written anywhere).
fn check_distinct(events: &[Event]) -> Result<()> {
    let mut ids = std::collections::HashSet::with_capacity(events.len());
    let mut keys = std::collections::HashSet::with_capacity(events.len());
    for event in events {
        if !ids.insert(event.id) {
            return Err(Error::InvalidBatch("event id"));
        }
        if let Some(entity) = &event.entity
            && !keys.insert(entity.key.as_str())
        {
            return Err(Error::InvalidBatch("entity"));
        }
    }
    Ok(())
}

/// Turns whatever the handler stack returned into the inbox's error.
fn handler_error<E: Into<tower::BoxError>>(e: E) -> Error {
    let e: tower::BoxError = e.into();
    match e.downcast::<HandlerError>() {
        Ok(h) => Error::Handler(*h),
        Err(other) => Error::Layer(other),
    }
}

impl<S> InboxService<S> {
    /// The consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// This consumer's rows, and how the inbox's statements are sent.
    pub(super) fn scope(&self) -> super::store::Scope<'_> {
        super::store::Scope { consumer: &self.consumer, persistent: self.persistent }
    }

    /// The pool of an inbox in one database; `None` for a multi-tenant inbox.
    pub fn pool(&self) -> Option<&PgPool> {
        match &self.databases {
            Databases::One(pool) => Some(pool),
            Databases::Tenants(_) => None,
        }
    }

    /// The tenants of a multi-tenant inbox; `None` for an inbox in one database.
    pub fn tenants(&self) -> Option<&Tenants> {
        match &self.databases {
            Databases::One(_) => None,
            Databases::Tenants(tenants) => Some(tenants),
        }
    }

    /// The one database this inbox writes to: a multi-tenant inbox is routed to its tenant's
    /// first (`with_pool`), so that only a repair asked of it without a tenant fails here.
    pub(super) fn db(&self) -> Result<&PgPool> {
        self.pool().ok_or(Error::TenantNotChosen)
    }

    /// The event's database, and its tenant's name in a multi-tenant inbox.
    pub(super) fn route(&self, event: &Event) -> Result<(Option<Arc<str>>, PgPool)> {
        match &self.databases {
            Databases::One(pool) => Ok((None, pool.clone())),
            Databases::Tenants(tenants) => tenants.resolve(event).map(|(name, pool)| (Some(name), pool)),
        }
    }

    /// Every database with its tenant's name (none for an inbox in one database).
    pub(crate) fn databases(&self) -> Vec<(Option<Arc<str>>, PgPool)> {
        match &self.databases {
            Databases::One(pool) => vec![(None, pool.clone())],
            Databases::Tenants(tenants) => tenants.all().into_iter().map(|(n, p)| (Some(n), p)).collect(),
        }
    }
}

impl<S: Clone> InboxService<S> {
    /// This inbox in the one database `pool`.
    pub(super) fn with_pool(&self, pool: PgPool) -> Self {
        Self { databases: Databases::One(pool), ..self.clone() }
    }

    /// The inbox of the tenant `name` of a multi-tenant inbox, for an operator's repairs
    /// ([`InboxService::retry_failed`], [`InboxService::skip_gap`], ...); `None` if the tenant is
    /// not listed or the inbox has one database.
    pub fn tenant(&self, name: &str) -> Option<Self> {
        self.tenants()?.pool(name).map(|pool| self.with_pool(pool))
    }
}

impl<S> InboxService<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    pub(super) async fn run_handler(
        inner: &mut S,
        event: Event,
        tx: sqlx::Transaction<'static, sqlx::Postgres>,
    ) -> Result<InboxRequest> {
        let request = InboxRequest::new(event, tx);
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
    pub(super) async fn run_or_record(
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

    /// Where the event's entity starts if this consumer has never seen it (the start policy).
    pub(super) fn initial_seq(&self, event: &Event) -> i64 {
        match (&event.entity, self.start) {
            (Some(entity), StartPolicy::FromFirstSeen) => i64::try_from(entity.seq).unwrap_or(i64::MAX) - 1,
            _ => 0,
        }
    }

    pub(super) async fn handle(&self, inner: &mut S, event: Event) -> Result<Outcome> {
        let scope = self.scope();
        let mut tx = self.db()?.begin().await?;
        let (last, fresh) = store::admit(&mut tx, scope, &event, self.initial_seq(&event)).await?;
        if !fresh {
            tx.rollback().await?;
            return Ok(Outcome::Duplicate);
        }
        if let Some(last) = last
            && let Some(held) = hold_back(&mut tx, scope, self.cipher.as_ref(), &event, last).await?
        {
            tx.commit().await?;
            return Ok(held);
        }
        let request = self.run_or_record(inner, event, tx).await?;
        let (event, mut tx) = request.into_parts();
        let mut next_parked = false;
        if let Some(entity) = &event.entity {
            next_parked =
                store::advance(&mut tx, scope, &entity.key, i64::try_from(entity.seq).unwrap_or(i64::MAX)).await?;
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
    /// A multi-tenant inbox splits the batch by tenant, a transaction in each tenant's database;
    /// on an error, the tenants done before it stay committed (their events come back as
    /// duplicates when applied again one at a time).
    ///
    /// # Errors
    /// [`Error::InvalidBatch`], [`Error::UnknownTenant`] (before anything is written), a database
    /// error, or the first handler failure.
    #[tracing::instrument(name = "inbox.handle_batch", skip_all, fields(consumer = &*self.consumer, events = events.len()))]
    pub async fn call_batch(&self, events: Vec<Event>) -> Result<Vec<Outcome>> {
        check_distinct(&events)?;
        if self.tenants().is_none() {
            return self.call_batch_in_one(events).await;
        }
        let mut groups: Vec<(PgPool, Vec<usize>, Vec<Event>)> = Vec::new();
        let mut names: Vec<Arc<str>> = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            let (name, pool) = self.route(&event)?;
            let name = name.unwrap_or_default();
            let at = names.iter().position(|n| *n == name).unwrap_or_else(|| {
                names.push(name);
                groups.push((pool, Vec::new(), Vec::new()));
                groups.len() - 1
            });
            groups[at].1.push(i);
            groups[at].2.push(event);
        }
        let mut outcomes = vec![None; groups.iter().map(|g| g.1.len()).sum()];
        for (pool, positions, events) in groups {
            for (i, outcome) in positions.into_iter().zip(self.with_pool(pool).call_batch_in_one(events).await?) {
                outcomes[i] = Some(outcome);
            }
        }
        Ok(outcomes.into_iter().map(|o| o.expect("every position of the batch has its tenant's outcome")).collect())
    }

    /// [`InboxService::call_batch`] in the one database of this inbox, on a checked batch.
    async fn call_batch_in_one(&self, events: Vec<Event>) -> Result<Vec<Outcome>> {
        let (consumer, scope) = (&*self.consumer, self.scope());
        let mut inner = self.inner.clone();
        let initial: Vec<i64> = events.iter().map(|e| self.initial_seq(e)).collect();
        let mut tx = self.db()?.begin().await?;
        let admitted = store::admit_batch(&mut tx, scope, &events, &initial).await?;
        let mut outcomes = Vec::with_capacity(events.len());
        // Entities moved by the batch: key, new sequence, and the index of the event's outcome.
        let mut moved: Vec<(String, i64, usize)> = Vec::new();
        for (event, (last, fresh)) in events.into_iter().zip(admitted) {
            if !fresh {
                outcomes.push(Outcome::Duplicate);
                continue;
            }
            if let (Some(entity), Some(last)) = (&event.entity, last) {
                if let Some(held) = hold_back(&mut tx, scope, self.cipher.as_ref(), &event, last).await? {
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
            store::advance_batch(&mut tx, scope, &keys, &seqs).await?
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
        let span = tracing::info_span!(
            "inbox.handle",
            consumer = &*this.consumer,
            event_id = %event.id,
            event_type = event.event_type.as_str(),
            entity = event.entity.as_ref().map(|e| e.key.as_str()),
            seq = event.entity.as_ref().map(|e| e.seq),
            correlation_id = event.correlation_id.as_deref(),
            tenant = tracing::field::Empty,
        );
        #[cfg(feature = "otel")]
        crate::otel::set_parent(&span, event.traceparent.as_deref());
        Box::pin(tracing::Instrument::instrument(
            async move {
                let mut inner = this.inner.clone();
                let id = event.id;
                let result = match this.route(&event) {
                    Ok((None, _)) => this.handle(&mut inner, event).await,
                    Ok((Some(tenant), pool)) => {
                        tracing::Span::current().record("tenant", &*tenant);
                        this.with_pool(pool).handle(&mut inner, event).await
                    }
                    Err(e) => Err(e),
                };
                let label = match &result {
                    Ok(o) => o.as_str(),
                    Err(e) if e.is_retryable() => "transient_failure",
                    Err(_) => "permanent_failure",
                };
                metrics::counter!(crate::metrics::EVENTS, "consumer" => this.consumer.to_string(), "outcome" => label)
                    .increment(1);
                tracing::debug!(event_id = %id, outcome = label, "inbox.handled");
                result
            },
            span,
        ))
    }
}
