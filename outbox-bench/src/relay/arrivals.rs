//! The consumer attached to the benchmark queue in every phase: it counts arrivals, times each
//! tenth of the expected total and its completion, and, in the latency phase, records when each
//! event arrived.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::time::Instant;
use uuid::Uuid;

use super::Target;
use crate::BoxError;

/// What the consumer task shares with the benchmark.
#[derive(Debug, Default)]
struct Seen {
    /// Deliveries so far.
    count: AtomicU64,
    /// When the delivery count reached each tenth of the expected total.
    tenths: Mutex<Vec<Instant>>,
    /// When the delivery count reached the expected total.
    all: OnceLock<Instant>,
    /// Event id and arrival time of every delivery, when recording.
    arrivals: Mutex<Vec<(Uuid, Instant)>>,
}

/// One consumer on the benchmark queue, with automatic acknowledgement, on a connection of its own.
pub(super) struct Arrivals {
    connection: Connection,
    channel: Channel,
    tag: ShortString,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Arrivals {
    /// Starts consuming; `expected` deliveries make the total (tenths and completion are timed);
    /// with `record`, every delivery's event id and arrival time are kept.
    pub(super) async fn start(target: Target<'_>, expected: u64, record: bool) -> Result<Self, BoxError> {
        let connection = Connection::connect(target.url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        let options = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
        let mut consumer =
            channel.basic_consume(target.queue.into(), "".into(), options, FieldTable::default()).await?;
        let tag = consumer.tag();
        let seen = Arc::new(Seen::default());
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut tenth = 1;
            while let Some(Ok(delivery)) = consumer.next().await {
                let at = Instant::now();
                let n = sink.count.fetch_add(1, Ordering::Relaxed) + 1;
                while tenth <= 10 && n >= share(expected, tenth) {
                    if let Ok(mut tenths) = sink.tenths.lock() {
                        tenths.push(at);
                    }
                    tenth += 1;
                }
                if n == expected {
                    let _ = sink.all.set(at);
                }
                if record
                    && let Some(id) = delivery.properties.message_id().as_ref().and_then(|m| m.as_str().parse().ok())
                    && let Ok(mut arrivals) = sink.arrivals.lock()
                {
                    arrivals.push((id, at));
                }
            }
        });
        Ok(Self { connection, channel, tag, seen, task })
    }

    /// Deliveries so far.
    pub(super) fn count(&self) -> u64 {
        self.seen.count.load(Ordering::Relaxed)
    }

    /// When the delivery count reached the expected total, if it did.
    pub(super) fn all(&self) -> Option<Instant> {
        self.seen.all.get().copied()
    }

    /// When the delivery count reached each tenth of the expected total so far, since `start`.
    pub(super) fn tenths(&self, start: Instant) -> Vec<Duration> {
        self.seen
            .tenths
            .lock()
            .map(|t| t.iter().map(|&at| at.saturating_duration_since(start)).collect())
            .unwrap_or_default()
    }

    /// Cancels the consumer and closes its connection; returns what it recorded.
    pub(super) async fn stop(self) -> Result<Vec<(Uuid, Instant)>, BoxError> {
        let cancelled = self.channel.basic_cancel(self.tag.clone(), BasicCancelOptions::default()).await;
        let _ = self.connection.close(200, "benchmark phase done".into()).await;
        self.task.abort();
        cancelled?;
        let arrivals = self.seen.arrivals.lock().map(|mut a| std::mem::take(&mut *a)).unwrap_or_default();
        Ok(arrivals)
    }
}

/// `tenths` tenths of `total`.
fn share(total: u64, tenths: u64) -> u64 {
    u64::try_from(u128::from(total) * u128::from(tenths) / 10).unwrap_or(u64::MAX)
}
