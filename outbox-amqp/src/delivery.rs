//! A message received from a queue: its wire-contract fields, acked (coalesced, see `acks`) or
//! requeued once handled.

use std::sync::Arc;
use std::time::Duration;

use lapin::types::ShortString;
use outbox_types::wire::WireMessage;

use crate::Error;
use crate::acks::AckWindow;

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
    /// A delivery just received on the channel `window` watches, entered in it.
    pub(crate) fn received(inner: lapin::message::Delivery, window: Arc<AckWindow>) -> Self {
        window.receive(inner.delivery_tag);
        Self { inner, window }
    }

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
        self.header(outbox_types::wire::HEADER_ENTITY)
    }

    /// The string header `name`, if the message has it, read without decoding the rest of the
    /// message.
    pub fn header(&self, name: &str) -> Option<&str> {
        let headers = self.inner.properties.headers().as_ref()?;
        match headers.inner().get(name)? {
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
