//! [`AmqpPublisher`]: sends each batch on a confirm channel, (re)connecting with back-off.

use std::sync::Arc;
use std::time::Duration;

use lapin::Channel;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use outbox_types::{
    ConfirmFuture, ExchangeKind, FailureKind, OutgoingMessage, PublishFailure, PublishOutcome, Publisher,
};
use tokio::time::Instant;

use super::confirm::{blame, failed_all, ready};
use super::ledger::{Decided, Ledger};
use super::shared::{Inner, Link, State};
use crate::classify::classify;
use crate::{Error, Topology, topology};

/// Publishes to RabbitMQ with lapin: persistent messages, publisher confirms with the whole batch
/// in flight, and `mandatory` set, so an unroutable message comes back as a failure
/// ([`FailureKind::Rejected`]) instead of vanishing. A returned message is paired with its own
/// event by the `message_id` it carries: AMQP does not say which publish a return answers, and
/// lapin hands it to whichever confirm completes next.
///
/// The connection is opened on first use and re-opened after any loss, with exponential backoff
/// (100 ms doubling to 5 s, a WARN line per failed attempt); while it has no connection, publishes
/// fail at once as [`FailureKind::Unavailable`], which the relay charges to no event: it pauses
/// until [`Publisher::connect`] succeeds. A confirm lost with the connection (dropped, reset, the
/// broker stopping) is `Unavailable` too.
///
/// With several nodes ([`AmqpPublisherBuilder::node`](crate::AmqpPublisherBuilder::node)), each
/// connection attempt tries every node in turn, starting after the node last connected to, so a
/// connection lost with its node is re-opened on another at once. Messages whose confirm was lost
/// are published again by the relay with the same event ids.
/// URLs may hold credentials: they are never logged or shown in errors.
///
/// ```no_run
/// use outbox_amqp::AmqpPublisher;
///
/// let publisher = AmqpPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f")
///     .connection_name("orders-relay")
///     .build()?;
/// # Ok::<(), outbox_amqp::Error>(())
/// ```
#[derive(Clone)]
pub struct AmqpPublisher {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for AmqpPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpPublisher").field("connection_name", &self.inner.connection_name).finish_non_exhaustive()
    }
}

/// The wait before the next connection attempt after `failures` failed ones in a row: 100 ms,
/// doubling, at most 5 s.
fn reconnect_backoff(failures: u32) -> Duration {
    outbox_types::Backoff::new(Duration::from_millis(100), Duration::from_secs(5)).delay(failures)
}

/// Declares `topologies` on a channel of their own. A refusal (a queue declared elsewhere with other
/// arguments, an exchange of another kind) closes only that channel: it is logged, and publishing
/// goes on (where a queue is missing, its events come back unroutable and are quarantined).
async fn declare_topologies(conn: &lapin::Connection, topologies: &[Topology]) {
    if topologies.is_empty() {
        return;
    }
    let channel = match conn.create_channel().await {
        Ok(channel) => channel,
        Err(e) => {
            return tracing::warn!(error = %classify(&e).reason, "could not open a channel to declare the topology");
        }
    };
    for topology in topologies {
        if let Err(e) = topology.declare(&channel).await {
            tracing::warn!(exchange = %topology.exchange, error = %e, "the broker refused the topology; publishing goes on");
            return;
        }
    }
    let _ = channel.close(200, "declared".into()).await;
}

fn failure_of(error: Error) -> PublishFailure {
    match error {
        Error::Broker(failure) => failure,
        other => PublishFailure::new(FailureKind::Transient, other.to_string()),
    }
}

impl AmqpPublisher {
    /// Closes the connection (the next publish opens a new one).
    pub async fn close(&self) {
        let mut state = self.inner.state.lock().await;
        let channel = state.channel.take().map(|link| link.channel);
        if let Some(conn) = state.connection.take() {
            crate::close(&conn, &channel.iter().collect::<Vec<_>>(), "outbox relay closing").await;
        }
    }

    /// A live confirm channel, connecting if needed; or the failure that every message of the
    /// batch gets while the broker is unreachable.
    async fn channel(&self) -> Result<Link, PublishFailure> {
        let mut state = self.inner.state.lock().await;
        if let Some(link) = &state.channel
            && link.channel.status().connected()
        {
            return Ok(link.clone());
        }
        state.channel = None;
        if let (Some(at), Some(f)) = (state.retry_at, &state.last_failure)
            && Instant::now() < at
        {
            return Err(f.clone());
        }
        match self.open(&mut state).await {
            Ok(channel) => {
                state.failures = 0;
                state.retry_at = None;
                state.last_failure = None;
                let link = Link { channel, ledger: Ledger::spawn() };
                state.channel = Some(link.clone());
                Ok(link)
            }
            Err(failure) => {
                state.failures = state.failures.saturating_add(1);
                let backoff = reconnect_backoff(state.failures);
                state.retry_at = Some(Instant::now() + backoff);
                state.last_failure = Some(failure.clone());
                tracing::warn!(kind = %failure.kind, reason = %failure.reason, retry_in_ms = backoff.as_millis() as u64, "outbox.broker_unavailable");
                Err(failure)
            }
        }
    }

    async fn open(&self, state: &mut State) -> Result<Channel, PublishFailure> {
        let connected = matches!(&state.connection, Some(c) if c.status().connected());
        if !connected {
            if let Some(old) = state.connection.take() {
                let _ = old.close(200, "reconnecting".into()).await;
            }
            let inner = &self.inner;
            let conn = inner.nodes.connect(&inner.connection_name, inner.connect_timeout).await.map_err(failure_of)?;
            state.connection = Some(conn);
        }
        let conn =
            state.connection.as_ref().ok_or_else(|| PublishFailure::new(FailureKind::Transient, "no connection"))?;
        let channel = conn.create_channel().await.map_err(|e| classify(&e))?;
        channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| classify(&e))?;
        for (name, kind) in &state.exchanges {
            topology::declare_exchange(&channel, name, *kind).await.map_err(failure_of)?;
        }
        self.inner.topologies_pending.store(false, std::sync::atomic::Ordering::Relaxed);
        declare_topologies(conn, &self.inner.topologies()).await;
        Ok(channel)
    }

    async fn forget_channel(&self, broken: &Channel) {
        let mut state = self.inner.state.lock().await;
        if state.channel.as_ref().is_some_and(|link| link.channel.id() == broken.id()) {
            state.channel = None;
        }
    }

    /// Sends one message, or says why it was not sent (it is larger than the broker accepts, or
    /// the channel failed, in which case nothing after it is sent either: `Err`).
    async fn send(&self, link: &Link, msg: &OutgoingMessage) -> Result<ConfirmFuture, PublishFailure> {
        let body_len = msg.message.body.len();
        if body_len > self.inner.max_message_bytes {
            let reason =
                format!("message is {body_len} bytes, the broker accepts at most {}", self.inner.max_message_bytes);
            return Ok(ready(PublishOutcome::Failed(PublishFailure::new(FailureKind::Rejected, reason))));
        }
        let options = BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() };
        let props = crate::to_properties(&msg.message);
        let (exchange, key) = (msg.exchange.as_str().into(), msg.routing_key.as_str().into());
        let ticket = link.ledger.begin();
        match link.channel.basic_publish(exchange, key, options, &msg.message.body, props).await {
            Ok(pending) => {
                let decided = ticket.register(msg.message.properties.message_id.clone(), pending);
                let inner = self.inner.clone();
                Ok(Box::pin(async move {
                    match decided.await {
                        Decided::Outcome(outcome) => outcome,
                        Decided::Error(e) => {
                            PublishOutcome::Failed(blame(inner.lost_or_classified(&e).await, body_len))
                        }
                    }
                }))
            }
            Err(e) => {
                // Not sent: no confirm of it can hold a return, so the ledger need not wait for it.
                drop(ticket);
                let failure = blame(self.inner.lost_or_classified(&e).await, body_len);
                tracing::warn!(event_id = %msg.event_id, kind = %failure.kind, reason = %failure.reason, "outbox.publish_failed");
                self.forget_channel(&link.channel).await;
                Err(failure)
            }
        }
    }
}

impl Publisher for AmqpPublisher {
    async fn publish(&self, batch: Vec<OutgoingMessage>) -> Vec<ConfirmFuture> {
        let link = match self.channel().await {
            Ok(link) => link,
            // Nothing was sent: not the events' failure, whatever the cause of the connection's.
            Err(failure) => {
                return failed_all(batch.len(), &PublishFailure::new(FailureKind::Unavailable, failure.reason));
            }
        };
        let mut out: Vec<ConfirmFuture> = Vec::with_capacity(batch.len());
        for msg in &batch {
            match self.send(&link, msg).await {
                Ok(confirm) => out.push(confirm),
                Err(failure) => {
                    out.extend(failed_all(batch.len() - out.len(), &failure));
                    break;
                }
            }
        }
        out
    }

    async fn declare_exchange(&self, exchange: &str, kind: ExchangeKind) -> Result<(), PublishFailure> {
        {
            let mut state = self.inner.state.lock().await;
            if !state.exchanges.iter().any(|(n, _)| n == exchange) {
                state.exchanges.push((exchange.to_owned(), kind));
            }
        }
        let link = self.channel().await?;
        topology::declare_exchange(&link.channel, exchange, kind).await.map_err(failure_of)?;
        // A topology added after the connection opened is declared now.
        if self.inner.topologies_pending.swap(false, std::sync::atomic::Ordering::Relaxed) {
            let state = self.inner.state.lock().await;
            if let Some(conn) = &state.connection {
                declare_topologies(conn, &self.inner.topologies()).await;
            }
        }
        Ok(())
    }

    async fn connect(&self) -> Result<(), PublishFailure> {
        self.channel().await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_backoff_starts_at_100_ms_and_stops_at_5_s() {
        let waits: Vec<u64> = (1..=9).map(|n| reconnect_backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }
}
