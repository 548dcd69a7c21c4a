//! Phase 1, the raw ceiling: one lapin consumer that decodes nothing and acks every message on its
//! own, what the inbox is compared with.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use outbox_testkit::TestBroker;
use outbox_types::wire::WireMessage;
use tokio::time::Instant;

use super::fill::{fill, messages};
use super::plan::Plan;
use super::settings::PREFETCH;
use super::target::Target;
use crate::error::BoxError;
use crate::figure::comment;
use crate::producer::EVENT_TYPE;
use crate::wait::{FLOOR, within, within_seeing};

/// Fills the queue, drains it with the raw consumer, checks that the queue is empty afterwards and
/// returns the raw consumer's rate in messages per second.
pub(super) async fn ceiling(broker: &TestBroker, target: Target<'_>, plan: Plan) -> Result<f64, BoxError> {
    let raw: Vec<WireMessage> = messages(plan)?;
    fill(target, "raw", EVENT_TYPE, &raw).await?;
    drop(raw);
    let raw_elapsed = raw_drain(target, plan).await?;
    let declared = broker.channel().queue_declare(
        target.queue.into(),
        QueueDeclareOptions { passive: true, ..Default::default() },
        FieldTable::default(),
    );
    let remaining = within(format_args!("the depth of queue {}", target.queue), FLOOR, declared).await?.message_count();
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
    let what = format!("the raw consumer to take and ack {} messages from queue {}", plan.events, target.queue);
    let connection = outbox_amqp::connect(target.url, "outbox-bench-raw-consumer", plan.limit)
        .await
        .map_err(|e| format!("{what}: cannot connect: {e}"))?;
    let (taken, acked) = (Cell::new(0_u64), Cell::new(0_u64));
    let channel = RefCell::new(None);
    let draining = async {
        let opened = connection.create_channel().await?;
        *channel.borrow_mut() = Some(opened.clone());
        let channel = opened;
        channel.basic_qos(PREFETCH, BasicQosOptions::default()).await?;
        let mut consumer = channel
            .basic_consume(target.queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await?;
        let mut acks = FuturesUnordered::new();
        for _ in 0..plan.events {
            while acks.len() >= usize::from(PREFETCH) {
                acks.next().await.ok_or("no ack in flight")??;
                acked.set(acked.get() + 1);
            }
            let delivery = consumer.next().await.ok_or("the raw consumer's stream ended")??;
            taken.set(taken.get() + 1);
            acks.push(async move { delivery.ack(BasicAckOptions::default()).await });
        }
        while let Some(ack) = acks.next().await {
            ack?;
            acked.set(acked.get() + 1);
        }
        Ok::<_, BoxError>(start.elapsed())
    };
    let limit = plan.limit.saturating_sub(start.elapsed());
    let outcome =
        within_seeing(&what, limit, draining, || Some(format!("{} taken, {} acked", taken.get(), acked.get()))).await;
    let channel = channel.borrow_mut().take();
    let channels: Vec<&Channel> = channel.iter().collect();
    let _ = tokio::time::timeout(FLOOR, outbox_amqp::close(&connection, &channels, "benchmark phase done")).await;
    outcome
}
