//! What happens to deliveries taken together: decoded, applied in batches of distinct ids and
//! entities (one at a time when a batch fails), then each acked, requeued or dead-lettered.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use outbox_amqp::{DeadLetters, Delivery};
use outbox_types::{Event, EventId, FailureKind, RetryDecision};
use tower::Service;

use super::handle::Counters;
use super::shared::Shared;
use crate::{Error, InboxRequest, Result, decode_delivery};

/// A batch's hold on its runner: its share of the concurrency, and where to say, once its
/// database work is done, which of its entities it still holds (those of deliveries waiting to be
/// requeued); the others are free for the next batches at once.
pub(super) struct Hold {
    pub(super) permit: tokio::sync::OwnedSemaphorePermit,
    pub(super) done_with: tokio::sync::mpsc::UnboundedSender<(tokio::task::Id, Vec<String>)>,
}

/// What to do with a delivery once its event was handled.
enum Verdict {
    Ack,
    Requeue(Duration),
    DeadLetter { reason: &'static str, detail: String },
}

/// Splits events (with their delivery index) into groups without a repeated event id or entity,
/// in delivery order: each event joins the first group after the last one that holds its id or
/// its entity, so the events of one entity keep their order from group to group.
fn distinct_groups(events: Vec<(usize, Event)>) -> Vec<Vec<(usize, Event)>> {
    #[derive(Default)]
    struct Group {
        ids: HashSet<EventId>,
        keys: HashSet<String>,
        members: Vec<(usize, Event)>,
    }
    let mut groups: Vec<Group> = Vec::new();
    for (i, event) in events {
        let key = event.entity.as_ref().map(|e| e.key.clone());
        let after = groups
            .iter()
            .rposition(|g| g.ids.contains(&event.id) || key.as_ref().is_some_and(|k| g.keys.contains(k)))
            .map_or(0, |g| g + 1);
        if after == groups.len() {
            groups.push(Group::default());
        }
        let group = &mut groups[after];
        group.ids.insert(event.id);
        group.keys.extend(key);
        group.members.push((i, event));
    }
    groups.into_iter().map(|g| g.members).collect()
}

fn queue_of(queues: &[String], delivery: &Delivery) -> String {
    // The routing key does not name the queue; with one queue it is that one, with partitions the
    // dead letter names the partition routing key instead.
    if queues.len() == 1 { queues[0].clone() } else { delivery.routing_key().to_owned() }
}

impl<S> Shared<S>
where
    S: Service<InboxRequest, Response = InboxRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send,
{
    /// Handles deliveries taken together: those that decode are applied in batches of distinct
    /// event ids and entities ([`InboxService::call_batch`](crate::InboxService::call_batch), in
    /// delivery order; a delivery that repeats an id or an entity goes to a later batch), each
    /// batch that fails is applied one delivery at a time, and then every delivery is acked,
    /// requeued or dead-lettered.
    ///
    /// Once the database work is done, the batch gives back its share of the runner's concurrency
    /// and every entity but those of deliveries to requeue: acks, dead letters and the waits of
    /// deliveries to requeue (a transient failure's back-off) go on without them, so that
    /// failures that last (a tenant's database down) take neither every slot nor the entities
    /// that did not fail while they wait.
    pub(super) async fn handle_batch(
        &self,
        deliveries: Vec<Delivery>,
        dead_letters: &DeadLetters,
        hold: Hold,
    ) -> Result<()> {
        let mut verdicts: Vec<Option<Verdict>> = deliveries.iter().map(|_| None).collect();
        let mut events = Vec::new();
        for (i, delivery) in deliveries.iter().enumerate() {
            match decode_delivery(delivery.message(), &self.settings.limits) {
                Err(e) => {
                    tracing::warn!(reason = e.code(), detail = %e, "inbox.bad_delivery");
                    metrics::counter!(crate::metrics::BAD_DELIVERIES, "consumer" => self.service.consumer().to_owned(), "reason" => e.code())
                        .increment(1);
                    verdicts[i] = Some(Verdict::DeadLetter { reason: e.code(), detail: e.to_string() });
                }
                Ok(event) => events.push((i, event)),
            }
        }
        for group in distinct_groups(events) {
            self.apply_group(group, &mut verdicts).await?;
        }
        self.done_with_database(hold, &deliveries, &verdicts);
        let (acked, others): (Vec<_>, Vec<_>) = deliveries
            .into_iter()
            .zip(verdicts)
            .filter_map(|(delivery, verdict)| Some((delivery, verdict?)))
            .partition(|(_, verdict)| matches!(verdict, Verdict::Ack));
        let finishing = others.into_iter().map(|(delivery, verdict)| self.finish(delivery, verdict, dead_letters));
        let acked: Vec<Delivery> = acked.into_iter().map(|(delivery, _)| delivery).collect();
        let (acking, finished) = tokio::join!(self.ack(&acked), futures::future::join_all(finishing));
        acking?;
        finished.into_iter().collect()
    }

    /// Gives back the permit, and every entity of the batch but those of deliveries to requeue.
    fn done_with_database(&self, hold: Hold, deliveries: &[Delivery], verdicts: &[Option<Verdict>]) {
        let kept = deliveries
            .iter()
            .zip(verdicts)
            .filter(|(_, verdict)| matches!(verdict, Some(Verdict::Requeue(_))))
            .filter_map(|(delivery, _)| self.schedule_key(delivery))
            .collect();
        drop(hold.permit);
        if let Some(id) = tokio::task::try_id() {
            let _ = hold.done_with.send((id, kept));
        }
    }

    /// Acks the deliveries whose events committed, together (one coalesced ack where the channel
    /// allows it).
    async fn ack(&self, deliveries: &[Delivery]) -> Result<()> {
        if deliveries.is_empty() {
            return Ok(());
        }
        #[cfg(feature = "fail-points")]
        if self.settings.crash_at == Some(super::settings::CrashPoint::AfterCommitBeforeAck) {
            self.crashed.store(true, std::sync::atomic::Ordering::SeqCst);
            tracing::warn!("crash point reached: the runner stops before acking");
            return Err(Error::Crashed);
        }
        let _ = Delivery::ack_all(deliveries).await;
        Ok(())
    }

    /// Applies a group in one transaction, or, if that fails, one event at a time.
    async fn apply_group(&self, group: Vec<(usize, Event)>, verdicts: &mut [Option<Verdict>]) -> Result<()> {
        if group.len() > 1 {
            let batch = group.iter().map(|(_, e)| e.clone()).collect();
            match self.service.call_batch(batch).await {
                Ok(outcomes) => {
                    for ((i, event), outcome) in group.iter().zip(outcomes) {
                        self.forget(event.id);
                        self.counters.count(outcome);
                        verdicts[*i] = Some(Verdict::Ack);
                    }
                    return Ok(());
                }
                Err(e) => tracing::debug!(error = %e, size = group.len(), "inbox.batch_failed; one at a time"),
            }
        }
        for (i, event) in group {
            verdicts[i] = Some(self.apply(event).await?);
        }
        Ok(())
    }

    /// Requeues or dead-letters a delivery as its verdict says.
    async fn finish(&self, delivery: Delivery, verdict: Verdict, dead_letters: &DeadLetters) -> Result<()> {
        match verdict {
            Verdict::Ack => self.ack(std::slice::from_ref(&delivery)).await?,
            // The wait keeps the entity in hand (its next event cannot overtake this one), not
            // the batch's permit: see `handle_batch`.
            Verdict::Requeue(delay) => {
                let _ = delivery.requeue_after(delay).await;
            }
            Verdict::DeadLetter { reason, detail } => self.dead_letter(delivery, dead_letters, reason, &detail).await,
        }
        Ok(())
    }

    async fn apply(&self, event: Event) -> Result<Verdict> {
        let id = event.id;
        let mut service = self.service.clone();
        let copy = event.clone();
        match service.call(event).await {
            Ok(outcome) => {
                self.forget(id);
                self.counters.count(outcome);
                Ok(Verdict::Ack)
            }
            Err(e) if e.is_retryable() => self.retry_or_give_up(&copy, &e).await,
            Err(e) => {
                self.forget(id);
                let reason = if matches!(e, Error::UnknownTenant(_)) { "unknown_tenant" } else { "handler_failed" };
                Ok(Verdict::DeadLetter { reason, detail: e.to_string() })
            }
        }
    }

    /// A transient failure: requeued after the policy's delay, or, out of attempts, recorded as
    /// failed (so the entity's later events wait for an operator) and dead-lettered.
    async fn retry_or_give_up(&self, event: &Event, e: &Error) -> Result<Verdict> {
        let (id, attempts) = (event.id, self.bump(event.id));
        // Only attempts bound a delivery's retries: an old event (a backlog) is no reason to give
        // up, so its age is not given to the policy.
        let now = SystemTime::now();
        match self.settings.retry.decide(attempts, now, now, FailureKind::Transient) {
            RetryDecision::RetryAt(at) => {
                let delay = at.duration_since(SystemTime::now()).unwrap_or_default();
                tracing::info!(event_id = %id, attempts, delay_ms = delay.as_millis() as u64, error = %e, "inbox.retry");
                Counters::bump(&self.counters.retried);
                Ok(Verdict::Requeue(delay))
            }
            RetryDecision::Quarantine(reason) => {
                // Recorded as failed first, so that the entity's later events park behind it; if
                // that fails for a passing reason (its database still down), the delivery comes
                // back later; for good, it is dead-lettered all the same.
                match self.service.record_failed(event, e).await {
                    Ok(()) => {}
                    Err(not_recorded) if not_recorded.is_retryable() => {
                        let delay = self.settings.retry.delay_bound(attempts);
                        Counters::bump(&self.counters.retried);
                        tracing::warn!(event_id = %id, error = %not_recorded, delay_ms = delay.as_millis() as u64, "inbox could not record a failure; retrying later");
                        return Ok(Verdict::Requeue(delay));
                    }
                    Err(not_recorded) => {
                        tracing::warn!(event_id = %id, error = %not_recorded, "inbox could not record a failure; dead-lettered without its record");
                    }
                }
                self.forget(id);
                Ok(Verdict::DeadLetter { reason: "attempts_exhausted", detail: format!("{e}; {reason}") })
            }
        }
    }

    fn bump(&self, id: EventId) -> u32 {
        let mut map = self.attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(id).or_insert(0);
        *n += 1;
        *n
    }

    fn forget(&self, id: EventId) {
        self.attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
    }

    /// Publishes the delivery to the dead-letter exchange and acks it; if that fails, requeues it
    /// after a second.
    async fn dead_letter(&self, delivery: Delivery, dead_letters: &DeadLetters, reason: &'static str, detail: &str) {
        let queue = queue_of(&self.settings.queues, &delivery);
        match dead_letters.publish(&delivery, &queue, reason, detail).await {
            Ok(()) => {
                metrics::counter!(crate::metrics::DEAD_LETTERS, "consumer" => self.service.consumer().to_owned(), "reason" => reason)
                    .increment(1);
                Counters::bump(&self.counters.dead_lettered);
                tracing::warn!(reason, queue, message_id = ?delivery.message_id(),
                    correlation_id = delivery.correlation_id(), "inbox.dead_lettered");
                let _ = delivery.ack().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not dead-letter; the delivery is requeued");
                let _ = delivery.requeue_after(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use outbox_types::{Entity, Payload};

    use super::*;

    fn event(id: u128, entity: Option<(&str, u64)>) -> Event {
        let payload = Payload::new(b"{}".to_vec(), "application/json");
        let mut event = Event::new(EventId::from_uuid(uuid::Uuid::from_u128(id)), "t", payload, SystemTime::UNIX_EPOCH);
        event.entity = entity.map(|(key, seq)| Entity { key: key.to_owned(), seq });
        event
    }

    fn shape(groups: &[Vec<(usize, Event)>]) -> Vec<Vec<usize>> {
        groups.iter().map(|g| g.iter().map(|(i, _)| *i).collect()).collect()
    }

    #[test]
    fn groups_never_repeat_an_id_or_an_entity_and_keep_each_entitys_order() {
        let events = vec![
            (0, event(1, Some(("a", 1)))),
            (1, event(2, Some(("b", 1)))),
            (2, event(3, Some(("a", 2)))),
            (3, event(4, None)),
            (4, event(4, None)),
            (5, event(5, Some(("c", 1)))),
            (6, event(6, Some(("a", 3)))),
            (7, event(7, Some(("b", 2)))),
        ];
        // a2 after a1, a3 after a2; the repeated id 4 goes after its first delivery; c joins the
        // first group; b2 follows b1 in the second group.
        assert_eq!(shape(&distinct_groups(events)), [vec![0, 1, 3, 5], vec![2, 4, 7], vec![6]]);
        assert!(distinct_groups(Vec::new()).is_empty());
    }
}
