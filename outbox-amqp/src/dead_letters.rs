//! Dead letters: a delivery the consumer cannot handle, published with its reason to the
//! dead-letter exchange (confirmed) before the original is acked.

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, LongString};
use lapin::{BasicProperties, Channel, Connection};

use crate::{Delivery, Error};

/// Header of a dead letter: the stable reason code (`missing_message_id`, `handler_failed`, ...).
pub const HEADER_DEAD_LETTER_REASON: &str = "x-outbox-dead-letter-reason";
/// Header of a dead letter: a human-readable description (no payload).
pub const HEADER_DEAD_LETTER_DETAIL: &str = "x-outbox-dead-letter-detail";
/// Header of a dead letter: the queue it was consumed from.
pub const HEADER_DEAD_LETTER_QUEUE: &str = "x-outbox-dead-letter-queue";

/// A confirm channel publishing dead letters to one exchange.
#[derive(Clone)]
pub struct DeadLetters {
    channel: Channel,
    exchange: String,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters").field("exchange", &self.exchange).finish_non_exhaustive()
    }
}

impl DeadLetters {
    pub(crate) async fn open(connection: &Connection, exchange: &str) -> Result<Self, Error> {
        let channel = connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(Self { channel, exchange: exchange.to_owned() })
    }

    /// Publishes a copy of `delivery` (its body, properties and headers) with the reason headers
    /// added, routed by `queue`, and waits for the broker's confirm.
    ///
    /// # Errors
    /// The broker's failure, or [`Error::NotConfirmed`]; the caller then requeues the delivery.
    pub async fn publish(&self, delivery: &Delivery, queue: &str, reason: &str, detail: &str) -> Result<(), Error> {
        let original = &delivery.inner;
        let mut headers = original.properties.headers().clone().unwrap_or_default();
        for (name, value) in [
            (HEADER_DEAD_LETTER_REASON, reason),
            (HEADER_DEAD_LETTER_DETAIL, detail),
            (HEADER_DEAD_LETTER_QUEUE, queue),
        ] {
            headers.insert(name.into(), AMQPValue::LongString(LongString::from(value)));
        }
        let props: BasicProperties = original.properties.clone().with_headers(headers);
        let exchange = self.exchange.as_str().into();
        let options = BasicPublishOptions::default();
        let confirm = self.channel.basic_publish(exchange, queue.into(), options, &original.data, props).await?.await?;
        if confirm.is_ack() { Ok(()) } else { Err(Error::NotConfirmed("dead letter nacked".to_owned())) }
    }
}
