//! A consumer that records every delivery of a queue, with assertions over what arrived.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use outbox_types::HeaderValue;
use outbox_types::wire::{HEADER_ENTITY, HEADER_SEQ};
use uuid::Uuid;

use crate::Result;

/// One delivery as the recorder saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `message_id` parsed as a UUID (`None` if absent or not a UUID).
    pub event_id: Option<Uuid>,
    /// Header `x-entity`.
    pub entity: Option<String>,
    /// Header `x-seq`.
    pub seq: Option<i64>,
    /// The broker's redelivered flag.
    pub redelivered: bool,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Arrival time.
    pub arrived_at: Instant,
    /// The message body.
    pub payload: Vec<u8>,
}

/// Records every delivery of one queue (acking each), until dropped.
///
/// ```no_run
/// # async fn demo(queue: &str) -> Result<(), outbox_testkit::Error> {
/// use std::time::Duration;
/// let recorder = outbox_testkit::Recorder::start(queue).await?;
/// recorder.wait_for_count(100, Duration::from_secs(10)).await?;
/// assert!(recorder.in_entity_order().is_ok());
/// assert!(recorder.duplicates().is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Recorder {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
    _connection: Connection,
}

/// What arrived, with a running count per event id so that the assertions a test polls while
/// a large queue drains do not copy every record (the recorder shares the test's runtime).
#[derive(Debug, Default)]
struct State {
    records: Vec<Record>,
    arrivals: HashMap<Uuid, usize>,
}

impl Recorder {
    /// Starts consuming `queue` on a connection of its own.
    ///
    /// # Errors
    /// If the broker cannot be reached or the queue does not exist.
    pub async fn start(queue: &str) -> Result<Self> {
        let connection = Connection::connect(&crate::amqp_url(), ConnectionProperties::default()).await?;
        let channel: Channel = connection.create_channel().await?;
        channel.basic_qos(1000, BasicQosOptions::default()).await?;
        let mut consumer = channel
            .basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await?;
        let state = Arc::new(Mutex::new(State::default()));
        let sink = state.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(delivery)) = consumer.next().await {
                let headers = delivery.properties.headers().as_ref().map(outbox_amqp::from_table).unwrap_or_default();
                let record = Record {
                    event_id: delivery.properties.message_id().as_ref().and_then(|m| Uuid::parse_str(m.as_str()).ok()),
                    entity: headers.get(HEADER_ENTITY).and_then(HeaderValue::as_str).map(str::to_owned),
                    seq: headers.get(HEADER_SEQ).and_then(HeaderValue::as_i64),
                    redelivered: delivery.redelivered,
                    routing_key: delivery.routing_key.as_str().to_owned(),
                    arrived_at: Instant::now(),
                    payload: delivery.data.clone(),
                };
                if let Ok(mut s) = sink.lock() {
                    if let Some(id) = record.event_id {
                        *s.arrivals.entry(id).or_default() += 1;
                    }
                    s.records.push(record);
                }
                let _ = delivery.ack(BasicAckOptions::default()).await;
            }
        });
        Ok(Self { state, task, _connection: connection })
    }

    /// Everything recorded so far, in arrival order.
    pub fn records(&self) -> Vec<Record> {
        self.state.lock().map(|s| s.records.clone()).unwrap_or_default()
    }

    /// How many deliveries arrived.
    pub fn count(&self) -> usize {
        self.state.lock().map(|s| s.records.len()).unwrap_or(0)
    }

    /// Waits until at least `n` deliveries arrived.
    ///
    /// # Errors
    /// [`crate::Error::Timeout`] with the count reached.
    pub async fn wait_for_count(&self, n: usize, deadline: Duration) -> Result<()> {
        crate::wait_for("deliveries at the recorder", deadline, || async { crate::at_least(self.count(), n) }).await
    }

    /// The distinct event ids that arrived.
    pub fn ids(&self) -> HashSet<Uuid> {
        self.state.lock().map(|s| s.arrivals.keys().copied().collect()).unwrap_or_default()
    }

    /// Whether every id of `expected` arrived; returns the missing ones otherwise.
    pub fn all_delivered(&self, expected: impl IntoIterator<Item = Uuid>) -> std::result::Result<(), Vec<Uuid>> {
        let Ok(state) = self.state.lock() else {
            return Err(expected.into_iter().collect());
        };
        let missing: Vec<Uuid> = expected.into_iter().filter(|id| !state.arrivals.contains_key(id)).collect();
        if missing.is_empty() { Ok(()) } else { Err(missing) }
    }

    /// Waits until every id of `expected` arrived: the recorder's queue is read apart from the
    /// consumers under test, and may trail them on a busy host.
    ///
    /// # Errors
    /// The ids still missing after `deadline`.
    pub async fn wait_all_delivered(
        &self,
        expected: impl IntoIterator<Item = Uuid>,
        deadline: Duration,
    ) -> std::result::Result<(), Vec<Uuid>> {
        let expected: Vec<Uuid> = expected.into_iter().collect();
        let arrived = crate::wait_for("every expected event recorded", deadline, || async {
            self.all_delivered(expected.iter().copied()).ok()
        })
        .await;
        arrived.or_else(|_| self.all_delivered(expected))
    }

    /// Event ids that arrived more than once, with their counts.
    pub fn duplicates(&self) -> HashMap<Uuid, usize> {
        self.state
            .lock()
            .map(|s| s.arrivals.iter().filter(|(_, c)| **c > 1).map(|(id, c)| (*id, *c)).collect())
            .unwrap_or_default()
    }

    /// Checks that, per entity, the first arrival of each sequence number came in increasing
    /// order (a redelivered duplicate of an earlier number is not a violation). Returns the
    /// violations as `(entity, seq that arrived, highest seq seen before it)`.
    pub fn in_entity_order(&self) -> std::result::Result<(), Vec<(String, i64, i64)>> {
        let mut highest: HashMap<String, i64> = HashMap::new();
        let mut seen: HashSet<(String, i64)> = HashSet::new();
        let mut violations = Vec::new();
        for r in self.records() {
            let (Some(entity), Some(seq)) = (r.entity, r.seq) else {
                continue;
            };
            if !seen.insert((entity.clone(), seq)) {
                continue;
            }
            let top = highest.entry(entity.clone()).or_insert(0);
            if seq != *top + 1 {
                violations.push((entity, seq, *top));
            }
            *top = (*top).max(seq);
        }
        if violations.is_empty() { Ok(()) } else { Err(violations) }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
