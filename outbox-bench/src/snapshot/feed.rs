//! Keeping the inbox's queue full for as long as a run lasts. On this 2-core host the inbox applies
//! events of many entities faster than one publisher beside it can publish them (about 7,200/s), so
//! topping the queue up is not enough: the feeder publishes a reserve before the consumer starts,
//! [`RESERVE_PER_SECOND`] for every second of the run (at least [`LOW`]), and another chunk whenever
//! fewer than the reserve are ready. Publishing goes on through the whole run, and what the inbox
//! applies faster than the feeder publishes comes out of the reserve, which lasts the run.
//!
//! The events continue one stream: event `i` belongs to entity `i % entities` with sequence
//! `i / entities + 1` ([`wire_message`]), so every entity's sequence is gapless and the inbox
//! applies each event in turn.

use std::time::Duration;

use lapin::Channel;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::amqp::{publish_confirmed, wire_message};
use crate::error::BoxError;
use crate::producer::EVENT_TYPE;
use crate::wait::{FLOOR, allow_for, within};

/// Messages per chunk.
const CHUNK: u64 = 20_000;
/// The fewest ready messages the feeder keeps in the queue.
const LOW: u64 = 2 * CHUNK;
/// The reserve published before the consumer starts, per second of the run: more than the inbox
/// applies beyond the feeder's own rate (about 2,000 events/s with 1,000 entities here).
const RESERVE_PER_SECOND: u64 = 3_000;
/// How often the feeder reads the queue's depth.
const POLL: Duration = Duration::from_millis(100);
/// Messages per second that publishing a chunk still reaches on a slow, busy host, for the
/// deadline of a feeder's stop.
const PUBLISH_RATE: u64 = 5_000;

/// Where the feeder publishes, and how it reads the queue's depth.
#[derive(Clone)]
pub(super) struct Queue {
    /// The broker's URL.
    pub(super) url: String,
    /// The exchange the events are published to, with the routing key the queue is bound with.
    pub(super) exchange: String,
    /// The queue.
    pub(super) name: String,
    /// A channel of the benchmark's broker connection, for passive declarations.
    pub(super) channel: Channel,
}

/// What a feeder did.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fed {
    /// Messages published.
    pub(super) published: u64,
    /// The fewest ready in the queue at any reading (0: the consumer may have waited for work).
    pub(super) least_ready: u32,
    /// Readings of the queue's depth, and those that found it empty.
    pub(super) readings: u64,
    pub(super) empty: u64,
}

/// The feeder, running.
pub(super) struct Feeder {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<Fed, BoxError>>,
}

impl Feeder {
    /// Publishes the reserve of a run of `load` over `entities`, then keeps feeding in a task of its
    /// own until [`Feeder::stop`].
    pub(super) async fn start(queue: Queue, entities: u64, load: Duration) -> Result<Self, BoxError> {
        let reserve = reserve(load);
        let mut published = 0;
        while published < reserve {
            publish(&queue, published, entities).await?;
            published += CHUNK;
        }
        let (stop, stopping) = oneshot::channel();
        let task = tokio::spawn(feed(queue, entities, Stream { published, reserve }, stopping));
        Ok(Self { stop, task })
    }

    /// Fails if the feeder has ended (it runs until stopped).
    pub(super) fn check(&self) -> Result<(), BoxError> {
        if self.task.is_finished() { Err("the feeder of the queue ended early".into()) } else { Ok(()) }
    }

    /// Stops the feeder (after the chunk it may be publishing) and returns what it did.
    pub(super) async fn stop(mut self) -> Result<Fed, BoxError> {
        let _ = self.stop.send(());
        let limit = FLOOR + allow_for(CHUNK, PUBLISH_RATE);
        match tokio::time::timeout(limit, &mut self.task).await {
            Ok(ended) => ended?,
            Err(_) => {
                self.task.abort();
                Err(format!("waited {limit:?} for the feeder of the queue to stop (aborted)").into())
            }
        }
    }
}

/// The ready messages a run of `load` starts with and is topped up to: whole chunks.
pub(super) fn reserve(load: Duration) -> u64 {
    let wanted = (RESERVE_PER_SECOND * load.as_secs()).max(LOW);
    wanted.div_ceil(CHUNK) * CHUNK
}

/// Where the feeder's stream stands when it starts feeding.
struct Stream {
    /// The events of the first fill.
    published: u64,
    /// The ready messages below which the next chunk is published.
    reserve: u64,
}

/// Publishes chunks whenever the queue's ready messages fall below the reserve, until `stopping`;
/// the stream goes on after the events of the first fill.
async fn feed(
    queue: Queue,
    entities: u64,
    stream: Stream,
    mut stopping: oneshot::Receiver<()>,
) -> Result<Fed, BoxError> {
    let mut fed = Fed { published: stream.published, least_ready: u32::MAX, readings: 0, empty: 0 };
    loop {
        tokio::select! {
            _ = &mut stopping => return Ok(fed),
            () = tokio::time::sleep(POLL) => {}
        }
        let ready = depth(&queue).await?;
        fed.least_ready = fed.least_ready.min(ready);
        fed.readings += 1;
        fed.empty += u64::from(ready == 0);
        if u64::from(ready) < stream.reserve {
            publish(&queue, fed.published, entities).await?;
            fed.published += CHUNK;
        }
    }
}

/// The ready messages of the queue (a passive declaration, within [`FLOOR`]).
async fn depth(queue: &Queue) -> Result<u32, BoxError> {
    let options = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    let declared = queue.channel.queue_declare(queue.name.as_str().into(), options, FieldTable::default());
    let what = format!("the depth of queue {}", queue.name);
    Ok(within(what, FLOOR, declared).await?.message_count())
}

/// Publishes events `from` to `from + CHUNK` of the stream, with confirms.
async fn publish(queue: &Queue, from: u64, entities: u64) -> Result<(), BoxError> {
    let messages = (0..usize::try_from(CHUNK)?).map(|k| wire_message(from + k as u64, entities));
    publish_confirmed(&queue.url, &queue.exchange, EVENT_TYPE, messages).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_lasts_the_run_in_whole_chunks() {
        assert_eq!(reserve(Duration::from_secs(600)), 1_800_000);
        assert_eq!(reserve(Duration::from_secs(25)), 80_000);
        assert_eq!(reserve(Duration::from_secs(10)), LOW);
    }
}
