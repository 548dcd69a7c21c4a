//! The consumer attached to the benchmark queue in every phase: it counts arrivals, times each
//! tenth of the expected total and its completion, and, in the latency phase, records when each
//! event arrived.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, Connection};
use tokio::time::Instant;
use uuid::Uuid;

use super::target::Target;
use crate::error::BoxError;
use crate::wait::{FLOOR, within, within_seeing};

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
    /// How the consumer's stream ended, once it has (cancelled, or failed).
    ended: OnceLock<String>,
}

/// One consumer on the benchmark queue, with automatic acknowledgement, on a connection of its own.
pub(crate) struct Arrivals {
    queue: String,
    expected: u64,
    connection: Connection,
    channel: Channel,
    tag: ShortString,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Arrivals {
    /// Starts consuming; `expected` deliveries make the total (tenths and completion are timed);
    /// with `record`, every delivery's event id and arrival time are kept.
    pub(crate) async fn start(target: Target<'_>, expected: u64, record: bool) -> Result<Self, BoxError> {
        let what = format!("a consumer on queue {}", target.queue);
        let connection = outbox_amqp::connect(target.url, "outbox-bench-arrivals", FLOOR)
            .await
            .map_err(|e| format!("{what}: cannot connect: {e}"))?;
        let consuming = async {
            let channel = connection.create_channel().await?;
            let options = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
            let consumer =
                channel.basic_consume(target.queue.into(), "".into(), options, FieldTable::default()).await?;
            Ok::<_, BoxError>((channel, consumer))
        };
        let (channel, mut consumer) = match within(&what, FLOOR, consuming).await {
            Ok(consuming) => consuming,
            Err(e) => {
                let _ =
                    tokio::time::timeout(FLOOR, outbox_amqp::close(&connection, &[], "benchmark phase failed")).await;
                return Err(e);
            }
        };
        let tag = consumer.tag();
        let seen = Arc::new(Seen::default());
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut tenth = 1;
            loop {
                let delivery = match consumer.next().await {
                    Some(Ok(delivery)) => delivery,
                    Some(Err(e)) => {
                        let _ = sink.ended.set(format!("failed: {e}"));
                        break;
                    }
                    None => {
                        let _ = sink.ended.set("ended".to_owned());
                        break;
                    }
                };
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
        Ok(Self { queue: target.queue.to_owned(), expected, connection, channel, tag, seen, task })
    }

    /// Fails if the consumer's stream ended before every expected delivery arrived.
    pub(crate) fn check_consuming(&self) -> Result<(), BoxError> {
        match self.seen.ended.get() {
            Some(how) if self.all().is_none() => {
                Err(format!("the consumer on queue {} {how} after {} deliveries", self.queue, self.count()).into())
            }
            _ => Ok(()),
        }
    }

    /// What the consumer saw: `120 of 10000 delivered to the consumer on queue q`, and how its
    /// stream ended if it did.
    pub(crate) fn describe(&self) -> String {
        let count = self.count();
        let mut seen = if self.expected == u64::MAX {
            format!("{count} delivered to the consumer on queue {}", self.queue)
        } else {
            format!("{count} of {} delivered to the consumer on queue {}", self.expected, self.queue)
        };
        if let Some(how) = self.seen.ended.get() {
            seen.push_str(&format!(" (its stream {how})"));
        }
        seen
    }

    /// Deliveries so far.
    pub(crate) fn count(&self) -> u64 {
        self.seen.count.load(Ordering::Relaxed)
    }

    /// When the delivery count reached the expected total, if it did.
    pub(crate) fn all(&self) -> Option<Instant> {
        self.seen.all.get().copied()
    }

    /// When the delivery count reached each tenth of the expected total so far, since `start`.
    pub(crate) fn tenths(&self, start: Instant) -> Vec<Duration> {
        self.seen
            .tenths
            .lock()
            .map(|t| t.iter().map(|&at| at.saturating_duration_since(start)).collect())
            .unwrap_or_default()
    }

    /// Cancels the consumer and closes its connection; returns what it recorded.
    /// The cancel and the close may each take [`FLOOR`]; a consumer whose cancel is not answered
    /// is dropped with its connection, and the error says so.
    pub(crate) async fn stop(self) -> Result<Vec<(Uuid, Instant)>, BoxError> {
        let cancel = self.channel.basic_cancel(self.tag.clone(), BasicCancelOptions::default());
        let what = format_args!("the broker to cancel the consumer on queue {}", self.queue);
        let cancelled = within_seeing(what, FLOOR, cancel, || Some(self.describe())).await;
        let channels = [&self.channel];
        let _ =
            tokio::time::timeout(FLOOR, outbox_amqp::close(&self.connection, &channels, "benchmark phase done")).await;
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
