//! Phase 1, the raw ceiling: one lapin consumer that decodes nothing and acks every message on its
//! own, what the inbox is compared with.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use outbox_core::wire::WireMessage;
use outbox_testkit::TestBroker;
use tokio::time::Instant;

use super::{PREFETCH, Plan, Target, fill, messages};
use crate::BoxError;
use crate::figure::comment;
use crate::producer::EVENT_TYPE;

/// Fills the queue, drains it with the raw consumer, checks that the queue is empty afterwards and
/// returns the raw consumer's rate in messages per second.
pub(super) async fn ceiling(broker: &TestBroker, target: Target<'_>, plan: Plan) -> Result<f64, BoxError> {
    let raw: Vec<WireMessage> = messages(plan)?;
    fill(target, "raw", EVENT_TYPE, &raw).await?;
    drop(raw);
    let raw_elapsed = raw_drain(target, plan).await?;
    let remaining = broker
        .channel()
        .queue_declare(
            target.queue.into(),
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await?
        .message_count();
    if remaining != 0 {
        return Err(format!("the raw consumer left {remaining} messages in the queue").into());
    }
    let raw_rate = plan.events as f64 / raw_elapsed.as_secs_f64();
    comment(format_args!(
        "raw: {} messages acked in {:.3} s, {raw_rate:.1} msgs/s",
        plan.events,
        raw_elapsed.as_secs_f64()
    ));
    Ok(raw_rate)
}

/// Takes `plan.events` messages from the queue with one consumer, acking each on its own (no
/// multiple-ack), and returns the time from connecting to the last ack done. The acks are not
/// awaited one by one: up to [`PREFETCH`] are in flight while the next deliveries are taken, as the
/// runner's concurrent deliveries ack.
async fn raw_drain(target: Target<'_>, plan: Plan) -> Result<Duration, BoxError> {
    let start = Instant::now();
    let deadline = start + plan.limit;
    let connection = Connection::connect(target.url, ConnectionProperties::default()).await?;
    let outcome = async {
        let channel = connection.create_channel().await?;
        channel.basic_qos(PREFETCH, BasicQosOptions::default()).await?;
        let mut consumer = channel
            .basic_consume(target.queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await?;
        let late = |taken: u64| format!("the raw consumer took only {taken} of {} messages in time", plan.events);
        let mut acks = FuturesUnordered::new();
        for taken in 0..plan.events {
            while acks.len() >= usize::from(PREFETCH) {
                let acked = tokio::time::timeout_at(deadline, acks.next()).await.map_err(|_| late(taken))?;
                acked.ok_or("no ack in flight")??;
            }
            let next = tokio::time::timeout_at(deadline, consumer.next()).await.map_err(|_| late(taken))?;
            let delivery = next.ok_or("the raw consumer's stream ended")??;
            acks.push(async move { delivery.ack(BasicAckOptions::default()).await });
        }
        while let Some(acked) = tokio::time::timeout_at(deadline, acks.next()).await.map_err(|_| late(plan.events))? {
            acked?;
        }
        Ok::<_, BoxError>(start.elapsed())
    }
    .await;
    let _ = connection.close(200, "benchmark phase done".into()).await;
    outcome
}
