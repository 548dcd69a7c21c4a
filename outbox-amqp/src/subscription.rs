//! The consumer's side of the broker: a connection consuming some queues with a prefetch, the
//! deliveries it yields, acked (coalesced, see `acks`) or requeued.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, Connection, Consumer};
use outbox_core::wire::WireMessage;

use crate::acks::AckWindow;
use crate::{DeadLetters, Error, Nodes};

/// How long opening a subscription's connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A message received from a queue, to be acked or requeued once handled.
///
/// Acks are coalesced: a delivery acked goes with every delivery before it on its channel in one
/// `basic.ack` (`multiple`), once none of those is still in hand. A delivery dropped unsettled stays
/// unacknowledged until its connection closes, and the broker then delivers it again.
#[derive(Debug)]
pub struct Delivery {
    pub(crate) inner: lapin::message::Delivery,
    window: Arc<AckWindow>,
}

impl Drop for Delivery {
    fn drop(&mut self) {
        // Unsettled: never covered by a coalesced ack, and it must not hold the others back. (A
        // settled delivery is no longer in the window: nothing to do.)
        if self.window.is_open(self.inner.delivery_tag) {
            self.window.set_aside_later(self.inner.delivery_tag);
        }
    }
}

impl Delivery {
    /// The message in the neutral form of the wire contract (the body is copied).
    pub fn message(&self) -> WireMessage {
        crate::to_wire(&self.inner.properties, &self.inner.data)
    }

    /// The routing key it was published with.
    pub fn routing_key(&self) -> &str {
        self.inner.routing_key.as_str()
    }

    /// The `message_id` property (the event id under the wire contract), if any.
    pub fn message_id(&self) -> Option<&str> {
        self.inner.properties.message_id().as_ref().map(ShortString::as_str)
    }

    /// The entity key of the wire contract's `x-entity` header, if the message has one, read
    /// without decoding the rest of the message.
    pub fn entity(&self) -> Option<&str> {
        let headers = self.inner.properties.headers().as_ref()?;
        match headers.inner().get(outbox_core::wire::HEADER_ENTITY)? {
            lapin::types::AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
            lapin::types::AMQPValue::ShortString(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// The `correlation_id` property, if any.
    pub fn correlation_id(&self) -> Option<&str> {
        self.inner.properties.correlation_id().as_ref().map(ShortString::as_str)
    }

    /// Acknowledges the delivery: the broker forgets it once every delivery before it on its
    /// channel is settled (the ack is coalesced with theirs).
    ///
    /// # Errors
    /// The channel's failure (the broker then delivers it again).
    pub async fn ack(&self) -> Result<(), Error> {
        self.window.ack([self.inner.delivery_tag]).await
    }

    /// Acknowledges deliveries of one subscription together, as [`Delivery::ack`] does each.
    ///
    /// # Errors
    /// The channel's failure (the broker then delivers them again).
    pub async fn ack_all(deliveries: &[Delivery]) -> Result<(), Error> {
        let mut rest: Vec<&Delivery> = deliveries.iter().collect();
        while let Some(first) = rest.first() {
            let window = first.window.clone();
            let (same, other): (Vec<&Delivery>, Vec<&Delivery>) =
                rest.into_iter().partition(|d| Arc::ptr_eq(&d.window, &window));
            window.ack(same.iter().map(|d| d.inner.delivery_tag)).await?;
            rest = other;
        }
        Ok(())
    }

    /// Gives the delivery back to its queue, to be delivered again.
    ///
    /// # Errors
    /// The channel's failure (the broker then delivers it again anyway).
    pub async fn requeue(&self) -> Result<(), Error> {
        self.window.requeue(self.inner.delivery_tag).await
    }

    /// Gives the delivery back to its queue after `delay`; meanwhile the deliveries after it are
    /// acked without waiting for it.
    ///
    /// # Errors
    /// The channel's failure (the broker then delivers it again anyway).
    pub async fn requeue_after(&self, delay: Duration) -> Result<(), Error> {
        self.window.set_aside(self.inner.delivery_tag).await?;
        tokio::time::sleep(delay).await;
        self.requeue().await
    }
}

/// One connection consuming `queues` with at most `prefetch` unacknowledged deliveries, and a
/// confirm channel for dead letters.
pub struct Subscription {
    connection: Connection,
    channel: Channel,
    streams: SelectAll<Consumer>,
    tags: Vec<ShortString>,
    dead_letters: DeadLetters,
    window: Arc<AckWindow>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("consumers", &self.tags.len()).finish_non_exhaustive()
    }
}

impl Subscription {
    /// Connects to the first of `nodes` that answers (named `connection_name` in the management
    /// UI; see [`Nodes::connect`]), sets the prefetch and starts consuming every queue; dead
    /// letters go to `dead_letter_exchange`.
    ///
    /// # Errors
    /// An invalid URL, or the broker's failure or refusal (for example a queue that does not exist).
    pub async fn open(
        nodes: &Nodes,
        connection_name: &str,
        prefetch: u16,
        queues: &[String],
        dead_letter_exchange: &str,
    ) -> Result<Self, Error> {
        let connection = nodes.connect(connection_name, CONNECT_TIMEOUT).await?;
        let channel = connection.create_channel().await?;
        channel.basic_qos(prefetch, BasicQosOptions::default()).await?;
        let dead_letters = DeadLetters::open(&connection, dead_letter_exchange).await?;
        let mut streams = SelectAll::new();
        let mut tags = Vec::new();
        for queue in queues {
            let options = BasicConsumeOptions::default();
            let consumer =
                channel.basic_consume(queue.as_str().into(), "".into(), options, FieldTable::default()).await?;
            tags.push(consumer.tag());
            streams.push(consumer);
        }
        let window = AckWindow::new(channel.clone());
        Ok(Self { connection, channel, streams, tags, dead_letters, window })
    }

    /// The next delivery; `None` when the broker ended every consumer.
    pub async fn next(&mut self) -> Option<Result<Delivery, Error>> {
        Some(self.streams.next().await?.map(|inner| self.delivery(inner)).map_err(Error::from))
    }

    fn delivery(&self, inner: lapin::message::Delivery) -> Delivery {
        self.window.receive(inner.delivery_tag);
        Delivery { inner, window: self.window.clone() }
    }

    /// Moves the deliveries already received into `batch`, up to `max` in all, without waiting.
    ///
    /// # Errors
    /// The stream's failure, or `None` inside `Err` when it ended: the deliveries taken so far
    /// are still to be handled; the subscription is done.
    pub fn take_ready(&mut self, batch: &mut Vec<Delivery>, max: usize) -> Result<(), Option<Error>> {
        while batch.len() < max {
            match self.streams.next().now_or_never() {
                Some(Some(Ok(inner))) => batch.push(self.delivery(inner)),
                Some(Some(Err(e))) => return Err(Some(e.into())),
                Some(None) => return Err(None),
                None => break,
            }
        }
        Ok(())
    }

    /// Where this subscription's dead letters go.
    pub fn dead_letters(&self) -> DeadLetters {
        self.dead_letters.clone()
    }

    /// Stops taking deliveries; those in hand can still be acked.
    pub async fn cancel(&self) {
        for tag in &self.tags {
            let _ = self.channel.basic_cancel(tag.clone(), BasicCancelOptions::default()).await;
        }
    }

    /// Closes the channel and the connection; deliveries not acked come back to their queues.
    pub async fn close(self) {
        crate::close(&self.connection, &[&self.channel], "shutdown").await;
    }
}
