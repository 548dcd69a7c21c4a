//! Messages of the wire contract as the relay sends them, and raw confirmed publishing: what the
//! relay and consumer benchmarks put on the broker themselves.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use outbox_types::wire::{self, WireMessage};
use tokio::time::Instant;

use crate::error::BoxError;
use crate::producer::event;
use crate::wait::{FLOOR, allow_for, within_seeing};

/// Raw publishing: messages awaiting their confirm at once.
pub(crate) const PUBLISH_WINDOW: usize = 1024;
/// Messages per second that raw publishing still reaches on a slow, busy host (this one confirms
/// 14,000 to 34,000), for its deadline.
const PUBLISH_RATE: u64 = 5_000;

/// Event number `i` of a stream spread round-robin over `entities`, as the relay would send it:
/// entity `order-<i % entities + 1>`, sequence `i / entities + 1`, a fresh event id.
pub(crate) fn wire_message(i: u64, entities: u64) -> Result<WireMessage, BoxError> {
    let entity = i % entities;
    let order = i64::try_from(entity + 1)?;
    let event = event(order)?.entity(format!("order-{order}")).into_event(Some(i / entities + 1), SystemTime::now());
    Ok(wire::encode(&event, None))
}

/// Publishes `messages` to `exchange` with `routing_key` on a connection of its own, `mandatory`,
/// with publisher confirms and [`PUBLISH_WINDOW`] messages in flight (sliding window). Fails on the
/// first message that is not confirmed or comes back unroutable, and when the broker has not
/// confirmed every message within a deadline scaled to their number ([`PUBLISH_RATE`]); the error
/// then says how many were published and confirmed and whether the broker blocked the connection.
/// Returns how long it took from the first publish to the last confirm.
pub(crate) async fn publish_confirmed(
    url: &str,
    exchange: &str,
    routing_key: &str,
    messages: impl ExactSizeIterator<Item = Result<WireMessage, BoxError>>,
) -> Result<Duration, BoxError> {
    let total = messages.len();
    let what = format!("the broker to confirm {total} messages published to exchange {exchange} ({routing_key})");
    let connection = outbox_amqp::connect(url, "outbox-bench-publisher", FLOOR)
        .await
        .map_err(|e| format!("{what}: cannot connect: {e}"))?;
    // Shared with the error's account; atomics and a mutex so that the future can be spawned.
    let (published, acked) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let channel = Mutex::new(None);
    let publishing = async {
        let opened = connection.create_channel().await?;
        if let Ok(mut slot) = channel.lock() {
            *slot = Some(opened.clone());
        }
        let channel = opened;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        let options = BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() };
        let mut in_flight = FuturesUnordered::new();
        let start = Instant::now();
        for message in messages {
            if in_flight.len() >= PUBLISH_WINDOW
                && let Some(confirm) = in_flight.next().await
            {
                confirmed(confirm)?;
                acked.fetch_add(1, Ordering::Relaxed);
            }
            let message = message?;
            let confirm = channel
                .basic_publish(
                    exchange.into(),
                    routing_key.into(),
                    options,
                    &message.body,
                    outbox_amqp::to_properties(&message),
                )
                .await?;
            published.fetch_add(1, Ordering::Relaxed);
            in_flight.push(confirm);
        }
        while let Some(confirm) = in_flight.next().await {
            confirmed(confirm)?;
            acked.fetch_add(1, Ordering::Relaxed);
        }
        Ok::<_, BoxError>(start.elapsed())
    };
    let outcome = within_seeing(&what, allow_for(total as u64, PUBLISH_RATE), publishing, || {
        let blocked = if connection.status().blocked() { "blocks" } else { "does not block" };
        Some(format!(
            "{} published, {} confirmed; the broker {blocked} the connection (connection.blocked)",
            published.load(Ordering::Relaxed),
            acked.load(Ordering::Relaxed)
        ))
    })
    .await;
    let channel = channel.lock().ok().and_then(|mut slot| slot.take());
    let _ = tokio::time::timeout(
        FLOOR,
        outbox_amqp::close(&connection, &channel.iter().collect::<Vec<_>>(), "benchmark phase done"),
    )
    .await;
    outcome
}

fn confirmed(confirm: Result<Confirmation, lapin::Error>) -> Result<(), BoxError> {
    match confirm? {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_)) => Err("a raw message came back unroutable".into()),
        other => Err(format!("a raw message was not confirmed: {other:?}").into()),
    }
}

#[cfg(test)]
mod tests {
    use outbox_types::HeaderValue;

    use super::*;

    #[test]
    fn raw_messages_look_like_the_relays() {
        let message = wire_message(1_234, 1_000).expect("message");
        assert_eq!(message.properties.delivery_mode, Some(wire::PERSISTENT));
        assert_eq!(message.headers.get(wire::HEADER_ENTITY), Some(&HeaderValue::String("order-235".into())));
        assert_eq!(message.headers.get(wire::HEADER_SEQ), Some(&HeaderValue::Int(2)));
        assert!((280..=320).contains(&message.body.len()));
    }

    #[test]
    fn every_message_has_its_own_event_id() {
        let a = wire_message(7, 10).expect("message");
        let b = wire_message(7, 10).expect("message");
        assert!(a.properties.message_id.is_some());
        assert_ne!(a.properties.message_id, b.properties.message_id);
    }
}
