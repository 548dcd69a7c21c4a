//! The relay benchmark: how fast one relay drains a backlog compared with what the broker takes,
//! how long a committed event needs to reach a consumer at a steady load, whether a large backlog
//! slows the drain down, and how much memory a relay process needs.
//!
//! Every phase uses the same broker topology: a durable topic exchange and one durable queue bound
//! with `#` ([`TestBroker`], deleted at the end), and messages of the same shape: wire contract v1
//! of the producer benchmark's ~300-byte JSON payload with an entity key, persistent, `mandatory`,
//! routing key `order.updated`. In every phase one consumer with automatic acknowledgement is
//! attached to the queue (on a connection of its own): it counts arrivals, or timestamps them in the
//! latency phase. So every phase is measured the same way and the queue stays short instead of
//! growing to a depth that would slow the broker down; the queue is also purged between phases.
//!
//! Phases, in order:
//!
//! 1. `ceiling`, before and after each drain: raw lapin publishing with publisher confirms, 1,024
//!    messages in flight (sliding window): what the broker takes on this machine. Each drain is
//!    compared with the mean of the rounds on either side of it, so with the broker's state around
//!    it.
//! 2. `drain`: three times (once with `--quick`), alternating with the ceiling rounds; the round
//!    with the median ratio gives the figures, the peak RSS is the highest of all rounds. Each
//!    round drains a backlog of committed events, written with `enqueue_many` interleaved across its
//!    entities, drained by one relay with default settings (only the exchange is set, and not
//!    declared). The relay runs as a child process of this benchmark (`outbox-bench relay-process`)
//!    so that its peak RSS (`VmHWM`) is its own. The clock starts when the child says it is ready
//!    (connected to the database, about to run) and stops when every row is marked `published`.
//! 3. `latency`: one event per transaction at a steady 1,000 events/s over 100 entities (ten
//!    producer tasks, each committing once per 10 ms tick, their ticks spread evenly so that one
//!    commit arrives every millisecond), relay in-process with defaults. Latency
//!    is the consumer's arrival time minus the moment `COMMIT` returned to the producer.
//! 4. `backlog`: the drain rate of a large backlog against a small one over the same 1,000 entities,
//!    each in a fresh database, relay in-process with defaults. The small backlog is drained before
//!    and after the large one (each in its own database) and its rate is the mean of both.
//!
//! Before every drain the table is brought to a comparable state, the one a backlog that built up
//! while the relay was down has where autovacuum runs: `VACUUM ANALYZE`, then `CHECKPOINT`. Every
//! drain has a time limit ([`Plan::new`]) well above what a relay near its targets needs; a drain
//! still running then is cut off, its rate counts the rows it published until then, and a `#` line
//! says where the pending rows stand (claimed, due, deferred; ready or behind their predecessor).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use futures::future::try_join_all;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, QueuePurgeOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties};
use outbox_core::{ExchangeKind, Publisher};
use outbox_producer::Outbox;
use outbox_relay::{AmqpPublisher, Relay};
use outbox_testkit::{TestBroker, TestDb};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection as _, PgPool};
use tokio::process::Child;
use tokio::time::Instant;
use uuid::Uuid;

use crate::BoxError;
use crate::amqp::{PUBLISH_WINDOW, publish_confirmed, wire_message};
use crate::figure::{Value, comment, figure};
use crate::process::{READY, Subprocess, Urls, init_child_logging, stdin_lines};
use crate::producer::{EVENT_TYPE, event};

/// Concurrent connections filling a backlog, each with entities of its own.
const FILLERS: u64 = 4;
/// Events per `enqueue_many` transaction when filling a backlog.
const FILL_BATCH: u64 = 2_000;
/// Entities the raw messages are spread over (their headers name one), as in the drains.
const RAW_ENTITIES: u64 = 1_000;
/// Producer tasks of the latency phase, each committing one event per tick.
const PRODUCERS: u64 = 10;
/// Entities of the latency phase, spread round-robin over the producers.
const LATENCY_ENTITIES: u64 = 100;
/// The tick of each latency producer: 10 producers × one event per 10 ms = 1,000 events/s.
const TICK: Duration = Duration::from_millis(10);
/// Connections of a relay's pool, as `outbox relay` opens.
const RELAY_CONNECTIONS: u32 = 4;

const PREPARE: &str = "VACUUM ANALYZE outbox_events, outbox_entity_sequences";
/// Polled while a drain runs: stops at the first pending row, unlike the full counts of
/// `admin::stats`, so that polling does not load the database being measured.
const ANY_PENDING: &str = "SELECT EXISTS (SELECT 1 FROM outbox_events WHERE status = 'pending')";
/// Where the pending rows of a drain that was cut off stand: claimed, due or deferred, and whether
/// their predecessor is done (ready) or not (blocked).
const PENDING_STATE: &str = "\
SELECT count(*) FILTER (WHERE lease_owner IS NULL AND next_attempt_at <= now() AND NOT ready),
       count(*) FILTER (WHERE lease_owner IS NULL AND next_attempt_at <= now() AND ready),
       count(*) FILTER (WHERE lease_owner IS NULL AND next_attempt_at > now() AND ready),
       count(*) FILTER (WHERE lease_owner IS NULL AND next_attempt_at > now() AND NOT ready),
       count(*) FILTER (WHERE lease_owner IS NOT NULL)
FROM (SELECT e.lease_owner, e.next_attempt_at, (p.status IS NULL OR p.status IN ('published', 'skipped')) AS ready
      FROM outbox_events e
      LEFT JOIN outbox_events p ON p.entity_key = e.entity_key AND p.seq = e.seq - 1
      WHERE e.status = 'pending') AS pending";

/// A backlog to drain: its size, its entities, and how long the drain may take before it is cut
/// off (far longer than a relay near its targets needs; a cut-off drain counts what it published).
#[derive(Debug, Clone, Copy)]
struct Backlog {
    events: u64,
    entities: u64,
    limit: Duration,
}

/// Sizes and durations of one benchmark run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Messages of each raw-publishing round.
    ceiling_messages: u64,
    /// The backlog the relay process drains.
    drain: Backlog,
    /// How many times it is drained (the round with the median ratio is reported).
    drain_rounds: u32,
    /// Latency phase: warm-up (not measured), then the measured window.
    latency_warmup: Duration,
    latency_window: Duration,
    /// The backlog-size comparison.
    small: Backlog,
    large: Backlog,
}

impl Plan {
    /// Full: 100,000 raw messages per ceiling round, three drains of 100,000 events over 1,000
    /// entities (each cut off after 90 s), 30 s of latency, 1,000,000 (180 s) against 10,000
    /// events (30 s) over 1,000 entities. Quick: 10,000 raw messages, 10,000 events over 100 entities (15 s), 5 s of
    /// latency, 100,000 (30 s) against 10,000 events (10 s).
    pub(crate) fn new(quick: bool) -> Self {
        let secs = Duration::from_secs;
        if quick {
            Self {
                ceiling_messages: 10_000,
                drain: Backlog { events: 10_000, entities: 100, limit: secs(15) },
                drain_rounds: 1,
                latency_warmup: Duration::from_millis(500),
                latency_window: secs(5),
                small: Backlog { events: 10_000, entities: 1_000, limit: secs(10) },
                large: Backlog { events: 100_000, entities: 1_000, limit: secs(30) },
            }
        } else {
            // For experiments only: `OUTBOX_BENCH_RELAY_DRAIN_ENTITIES` spreads the drained
            // backlog over another number of entities (the figures are defined with 1,000).
            let entities = std::env::var("OUTBOX_BENCH_RELAY_DRAIN_ENTITIES")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(1_000);
            Self {
                ceiling_messages: 100_000,
                drain: Backlog { events: 100_000, entities, limit: secs(90) },
                drain_rounds: 3,
                latency_warmup: secs(1),
                latency_window: secs(30),
                small: Backlog { events: 10_000, entities: 1_000, limit: secs(30) },
                large: Backlog { events: 1_000_000, entities: 1_000, limit: secs(180) },
            }
        }
    }
}

/// Where every phase publishes and consumes.
#[derive(Debug, Clone, Copy)]
struct Target<'a> {
    url: &'a str,
    exchange: &'a str,
    queue: &'a str,
    /// The test broker's channel, for purging.
    admin: &'a Channel,
}

impl Target<'_> {
    async fn purge(&self) -> Result<(), BoxError> {
        self.admin.queue_purge(self.queue.into(), QueuePurgeOptions::default()).await?;
        Ok(())
    }
}

/// Relay settings other than the defaults, for experiments only (the figures are defined with
/// default settings): `OUTBOX_BENCH_RELAY_BATCH`, `OUTBOX_BENCH_RELAY_WINDOW`,
/// `OUTBOX_BENCH_RELAY_PER_ENTITY` and `OUTBOX_BENCH_RELAY_FAST_POLL_US` set `batch_size`,
/// `confirm_window`, `events_per_entity` and `fast_poll_interval` (in microseconds);
/// `OUTBOX_BENCH_RELAY_DRAIN_ENTITIES` spreads the drained backlog over another number of entities
/// (see `Plan::new`).
fn experiment<P: Publisher>(mut relay: outbox_relay::RelayBuilder<P>) -> outbox_relay::RelayBuilder<P> {
    let var = |name| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = var("OUTBOX_BENCH_RELAY_BATCH") {
        relay = relay.batch_size(n);
    }
    if let Some(n) = var("OUTBOX_BENCH_RELAY_WINDOW") {
        relay = relay.confirm_window(n);
    }
    if let Some(n) = var("OUTBOX_BENCH_RELAY_PER_ENTITY") {
        relay = relay.events_per_entity(n);
    }
    if let Some(us) = var("OUTBOX_BENCH_RELAY_FAST_POLL_US") {
        relay = relay.fast_poll_interval(Duration::from_micros(us as u64));
    }
    relay
}

/// Whether a phase runs: all by default; `OUTBOX_BENCH_RELAY_PHASES` (a comma-separated subset of
/// `drain`, `latency`, `backlog`) narrows an experiment down.
fn phase(name: &str) -> bool {
    std::env::var("OUTBOX_BENCH_RELAY_PHASES").map_or(true, |phases| phases.split(',').any(|p| p.trim() == name))
}

/// Runs the relay benchmark and prints its figures.
pub(crate) async fn run(plan: Plan) -> Result<(), BoxError> {
    let broker = TestBroker::new().await?;
    let outcome = bench(&broker, plan).await;
    let closed = broker.close().await;
    outcome?;
    closed?;
    Ok(())
}

async fn bench(broker: &TestBroker, plan: Plan) -> Result<(), BoxError> {
    let exchange = broker.declare_exchange("bench.relay", lapin::ExchangeKind::Topic).await?;
    let queue = broker.declare_queue("bench.relay").await?;
    broker.bind(&queue, &exchange, "#").await?;
    let target = Target { url: broker.url(), exchange: &exchange, queue: &queue, admin: broker.channel() };
    comment(format_args!(
        "relay: payload {} bytes, durable topic exchange -> one durable queue (#), persistent, mandatory; \
         one auto-ack consumer attached in every phase",
        event(1)?.event_payload().bytes().len()
    ));

    if phase("drain") {
        drain_phase(target, plan).await?;
    }
    if phase("latency") {
        latency_phase(target, plan).await?;
    }
    if phase("backlog") {
        backlog_phase(target, plan).await?;
    }
    comment(
        "target: relay_drain_ratio >= 0.6, relay_latency_p99_ms <= 25 with relay_latency_p50_ms <= 5, \
         relay_backlog_1m_ratio >= 0.9, relay_peak_rss_mib <= 64",
    );
    Ok(())
}

async fn drain_phase(target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    // 1 and 2: drains alternating with ceiling rounds (ceiling, drain, ceiling, drain, ...); each
    // drain is set against the mean of the ceilings on either side of it, and the round with the
    // median ratio gives the figures. The capacity of a shared host drifts within a minute, so one
    // drain against one pair of ceilings moved by ±15 % from run to run.
    let mut rounds = Vec::new();
    let mut before = ceiling(target, plan.ceiling_messages).await?;
    let mut peak_rss_mib: f64 = 0.0;
    for round in 1..=plan.drain_rounds {
        let drain = with_db(async |db| drain_in_child(db, target, plan.drain).await).await?;
        let after = ceiling(target, plan.ceiling_messages).await?;
        let ceiling = (before + after) / 2.0;
        let ratio = drain.rate / ceiling;
        comment(format_args!(
            "drain round {round}: ceiling {ceiling:.1} msgs/s, drain {:.1} events/s, ratio {ratio:.3}",
            drain.rate
        ));
        peak_rss_mib = peak_rss_mib.max(drain.peak_rss_mib);
        rounds.push((ratio, ceiling, drain.rate));
        before = after;
    }
    rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ratio, ceiling, rate) = rounds[rounds.len() / 2];
    figure("broker_ceiling_msgs_per_s", Value::Rate(ceiling), "msgs/s");
    figure("relay_drain_backlog_events", Value::Count(plan.drain.events), "events");
    figure("relay_drain_events_per_s", Value::Rate(rate), "events/s");
    figure("relay_drain_ratio", Value::Ratio(ratio), "x");
    figure("relay_peak_rss_mib", Value::Mebibytes(peak_rss_mib), "MiB");
    Ok(())
}

async fn latency_phase(target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    // 3: latency at a steady load.
    let latency = with_db(async |db| measure_latency(db, target, plan).await).await?;
    figure("relay_latency_offered_events_per_s", Value::Rate(latency.offered), "events/s");
    figure("relay_latency_samples", Value::Count(latency.samples), "events");
    figure("relay_latency_p50_ms", Value::Millis(latency.p50), "ms");
    figure("relay_latency_p99_ms", Value::Millis(latency.p99), "ms");
    figure("relay_latency_max_ms", Value::Millis(latency.max), "ms");
    Ok(())
}

async fn backlog_phase(target: Target<'_>, plan: Plan) -> Result<(), BoxError> {
    // 4: a large backlog against a small one, the small one before and after the large one.
    let small_before = with_db(async |db| drain_in_process(db, target, plan.small).await).await?;
    let large = with_db(async |db| drain_in_process(db, target, plan.large).await).await?;
    let small_after = with_db(async |db| drain_in_process(db, target, plan.small).await).await?;
    let small = (small_before + small_after) / 2.0;
    comment(format_args!(
        "relay_backlog_1m_ratio: {} events against {} events, both over {} entities",
        plan.large.events, plan.small.events, plan.large.entities
    ));
    figure("relay_backlog_small_events_per_s", Value::Rate(small), "events/s");
    figure("relay_backlog_large_events_per_s", Value::Rate(large), "events/s");
    figure("relay_backlog_1m_ratio", Value::Ratio(large / small), "x");
    Ok(())
}

/// Runs `phase` in a fresh database and drops the database afterwards, also when the phase failed.
pub(crate) async fn with_db<T>(phase: impl AsyncFnOnce(&TestDb) -> Result<T, BoxError>) -> Result<T, BoxError> {
    let db = TestDb::new().await?;
    let outcome = phase(&db).await;
    let closed = db.close().await;
    let value = outcome?;
    closed?;
    Ok(value)
}

// ---------------------------------------------------------------------------------------------
// Messages

// ---------------------------------------------------------------------------------------------
// The consumer

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
struct Arrivals {
    connection: Connection,
    channel: Channel,
    tag: ShortString,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Arrivals {
    /// Starts consuming; `expected` deliveries make the total (tenths and completion are timed);
    /// with `record`, every delivery's event id and arrival time are kept.
    async fn start(target: Target<'_>, expected: u64, record: bool) -> Result<Self, BoxError> {
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

    fn count(&self) -> u64 {
        self.seen.count.load(Ordering::Relaxed)
    }

    /// Cancels the consumer and closes its connection; returns what it recorded.
    async fn stop(self) -> Result<Vec<(Uuid, Instant)>, BoxError> {
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

// ---------------------------------------------------------------------------------------------
// 1. The broker's ceiling

/// One round of raw confirmed publishing; returns messages per second. The consumer is attached
/// as in every other phase.
async fn ceiling(target: Target<'_>, messages: u64) -> Result<f64, BoxError> {
    target.purge().await?;
    let arrivals = Arrivals::start(target, messages, false).await?;
    let raw = (0..messages).map(|i| wire_message(i, RAW_ENTITIES));
    let outcome = publish_confirmed(target.url, target.exchange, EVENT_TYPE, raw).await;
    let stopped = arrivals.stop().await;
    let elapsed = outcome?;
    stopped?;
    target.purge().await?;
    let rate = messages as f64 / elapsed.as_secs_f64();
    comment(format_args!(
        "ceiling: {messages} messages confirmed in {:.2} s, {rate:.1} msgs/s ({PUBLISH_WINDOW} in flight)",
        elapsed.as_secs_f64()
    ));
    Ok(rate)
}

// ---------------------------------------------------------------------------------------------
// Backlogs

/// Writes `total` events over `entities` with `enqueue_many`, as a workload would have: event `i`
/// belongs to entity `i % entities`, and [`FILLERS`] connections write at once, each the events of
/// its own entities (so they never wait on each other's sequence counters), [`FILL_BATCH`] per
/// transaction. Then brings the table to a comparable state. Returns how long the writing took.
async fn fill(db: &TestDb, total: u64, entities: u64) -> Result<Duration, BoxError> {
    let fillers = FILLERS.min(entities);
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(fillers)?)
        .connect_with(db.connect_options().clone())
        .await?;
    let start = Instant::now();
    let tasks = (0..fillers).map(|filler| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let outbox = Outbox::new();
            let mut conn = pool.acquire().await?;
            let mine: Vec<u64> = (filler..total).step_by(usize::try_from(fillers)?).collect();
            for chunk in mine.chunks(usize::try_from(FILL_BATCH)?) {
                let events = chunk
                    .iter()
                    .map(|i| {
                        let order = i64::try_from(i % entities + 1)?;
                        Ok(event(order)?.entity(format!("order-{order}")))
                    })
                    .collect::<Result<Vec<_>, BoxError>>()?;
                let mut tx = conn.begin().await?;
                outbox.enqueue_many(&mut tx, events).await?;
                tx.commit().await?;
            }
            Ok::<(), BoxError>(())
        })
    });
    let outcome = try_join_all(tasks).await;
    pool.close().await;
    for done in outcome? {
        done?;
    }
    let took = start.elapsed();
    sqlx::raw_sql(PREPARE).execute(db.pool()).await?;
    if let Err(e) = sqlx::raw_sql("CHECKPOINT").execute(db.pool()).await {
        comment(format_args!("CHECKPOINT skipped: {e}"));
    }
    Ok(took)
}

/// How a drain went, from the start of the relay.
#[derive(Debug)]
struct Drained {
    backlog: u64,
    /// Rows marked `published` at the end: the whole backlog, unless the drain was cut off.
    published: u64,
    /// Until every message arrived at the consumer (`None` if the drain was cut off first).
    arrived: Option<Duration>,
    /// Until every row was marked `published`, or until the drain was cut off.
    elapsed: Duration,
    /// When each tenth of the backlog had arrived.
    tenths: Vec<Duration>,
}

impl Drained {
    fn complete(&self) -> bool {
        self.published >= self.backlog
    }

    /// Rows marked published per second.
    fn rate(&self) -> f64 {
        self.published as f64 / self.elapsed.as_secs_f64()
    }

    /// The rate of each tenth of the drain, to see whether it slows down as it goes.
    fn tenth_rates(&self) -> String {
        let mut previous = Duration::ZERO;
        let mut rates = Vec::new();
        for &at in &self.tenths {
            let secs = (at - previous).as_secs_f64();
            rates.push(format!("{:.0}", self.backlog as f64 / 10.0 / secs.max(f64::EPSILON)));
            previous = at;
        }
        rates.join(" ")
    }
}

/// Waits until every message arrived and every row is marked published, or until `limit` has
/// passed since `start` (then the drain is cut off and its rate is what it published until then);
/// fails if the relay process ends early.
async fn await_drain(
    pool: &PgPool,
    arrivals: &Arrivals,
    backlog: u64,
    start: Instant,
    limit: Duration,
    mut child: Option<&mut Child>,
) -> Result<Drained, BoxError> {
    let tenths = |arrivals: &Arrivals| {
        arrivals
            .seen
            .tenths
            .lock()
            .map(|t| t.iter().map(|&at| at.saturating_duration_since(start)).collect())
            .unwrap_or_default()
    };
    loop {
        if let Some(&all) = arrivals.seen.all.get()
            && !sqlx::query_scalar::<_, bool>(ANY_PENDING).fetch_one(pool).await?
        {
            let elapsed = start.elapsed();
            let arrived = Some(all.saturating_duration_since(start));
            return Ok(Drained { backlog, published: backlog, arrived, elapsed, tenths: tenths(arrivals) });
        }
        if start.elapsed() >= limit {
            let elapsed = start.elapsed();
            let published = outbox_producer::admin::stats(pool).await?.published;
            let (due_blocked, due_ready, deferred_ready, deferred_blocked, in_flight): (i64, i64, i64, i64, i64) =
                sqlx::query_as(PENDING_STATE).fetch_one(pool).await?;
            comment(format_args!(
                "drain of {backlog} events cut off after {:.1} s: {} messages arrived, {published} rows published; \
                 pending: {in_flight} claimed, {due_ready} due and ready, {due_blocked} due behind their \
                 predecessor, {deferred_blocked} deferred behind their predecessor, {deferred_ready} deferred \
                 although their predecessor is published (a lost wake-up)",
                elapsed.as_secs_f64(),
                arrivals.count()
            ));
            let published = u64::try_from(published)?;
            return Ok(Drained { backlog, published, arrived: None, elapsed, tenths: tenths(arrivals) });
        }
        if let Some(child) = child.as_deref_mut()
            && let Some(status) = child.try_wait()?
        {
            return Err(format!("the relay process ended during the drain: {status}").into());
        }
        let poll = if arrivals.seen.all.get().is_some() { 5 } else { 20 };
        tokio::time::sleep(Duration::from_millis(poll)).await;
    }
}

fn report_drain(what: &str, entities: u64, filled: Duration, drained: &Drained) {
    let arrived = drained.arrived.map_or_else(|| "not all".to_owned(), |d| format!("{:.3} s", d.as_secs_f64()));
    comment(format_args!(
        "{what}: {} events over {entities} entities filled in {:.1} s; all arrived after {arrived}; \
         {} marked published after {:.3} s: {:.1} events/s{}",
        drained.backlog,
        filled.as_secs_f64(),
        drained.published,
        drained.elapsed.as_secs_f64(),
        drained.rate(),
        if drained.complete() { "" } else { " (CUT OFF)" }
    ));
    if drained.backlog >= 100_000 {
        comment(format_args!("{what}: events/s per tenth of the backlog: {}", drained.tenth_rates()));
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Drain by a relay process

/// What the drain phase measured.
#[derive(Debug)]
struct Drain {
    rate: f64,
    peak_rss_mib: f64,
}

async fn drain_in_child(db: &TestDb, target: Target<'_>, backlog: Backlog) -> Result<Drain, BoxError> {
    let filled = fill(db, backlog.events, backlog.entities).await?;
    target.purge().await?;
    let arrivals = Arrivals::start(target, backlog.events, false).await?;
    let outcome = async {
        let args = ["relay-process", "--exchange", target.exchange];
        let mut process = Subprocess::spawn("the relay process", &args, &db.url(), target.url).await?;
        let start = Instant::now();
        let drained =
            await_drain(db.pool(), &arrivals, backlog.events, start, backlog.limit, Some(&mut process.child)).await;
        // Read the peak before the shutdown, which allocates nothing worth measuring.
        let memory = process.memory().await;
        let stopped = process.stop().await;
        let drained = drained?;
        let (peak_kib, now_kib) = memory?;
        stopped?;
        Ok::<_, BoxError>((drained, peak_kib, now_kib))
    }
    .await;
    let stopped = arrivals.stop().await;
    let (drained, peak_kib, now_kib) = outcome?;
    stopped?;
    target.purge().await?;
    report_drain("drain (relay process)", backlog.entities, filled, &drained);
    comment(format_args!("relay process memory after the drain: VmHWM {peak_kib} kB, VmRSS {now_kib} kB"));
    Ok(Drain { rate: drained.rate(), peak_rss_mib: peak_kib as f64 / 1024.0 })
}

/// Arguments of the hidden `relay-process` command. The URLs come from the environment, where
/// `relay` puts them.
#[derive(Debug, clap::Args)]
pub(crate) struct ProcessArgs {
    #[command(flatten)]
    urls: Urls,
    /// Exchange to publish to (it must exist: the relay does not declare it).
    #[arg(long)]
    exchange: String,
}

/// The relay process: one relay with default settings (a pool of 4 connections, as `outbox relay`
/// opens) until SIGTERM, SIGINT or the end of standard input, then a graceful shutdown.
pub(crate) async fn process(args: ProcessArgs) -> Result<(), BoxError> {
    init_child_logging();
    let pool = PgPoolOptions::new().max_connections(RELAY_CONNECTIONS).connect(&args.urls.database_url).await?;
    let publisher = AmqpPublisher::builder(args.urls.amqp_url).connection_name("outbox-bench-relay").build();
    let relay = experiment(
        Relay::builder(pool.connect_options().as_ref().clone(), publisher.clone())
            .exchange(args.exchange)
            .declare_exchange(false),
    )
    .build()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut stdin = stdin_lines();
    println!("{READY}");
    let outcome = relay
        .run(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
                () = async { while stdin.recv().await.is_some() {} } => {}
            }
        })
        .await;
    publisher.close().await;
    pool.close().await;
    Ok(outcome?)
}

// ---------------------------------------------------------------------------------------------
// 3. Latency at a steady load

/// What the latency phase measured.
#[derive(Debug)]
struct Latency {
    offered: f64,
    samples: u64,
    p50: f64,
    p99: f64,
    max: f64,
}

/// An in-process relay with default settings over `db`, publishing to the benchmark exchange.
/// Its publisher is connected before it starts, so a measurement does not include the connection.
struct InProcess {
    pool: PgPool,
    publisher: AmqpPublisher,
    handle: outbox_relay::RelayHandle,
}

impl InProcess {
    async fn start(db: &TestDb, target: Target<'_>) -> Result<Self, BoxError> {
        let pool =
            PgPoolOptions::new().max_connections(RELAY_CONNECTIONS).connect_with(db.connect_options().clone()).await?;
        let publisher = AmqpPublisher::builder(target.url).connection_name("outbox-bench-relay").build();
        if let Err(f) = publisher.declare_exchange(target.exchange, ExchangeKind::Topic).await {
            pool.close().await;
            return Err(format!("cannot connect the relay's publisher: {} ({})", f.reason, f.kind).into());
        }
        let relay = experiment(
            Relay::builder(pool.connect_options().as_ref().clone(), publisher.clone())
                .exchange(target.exchange)
                .declare_exchange(false),
        );
        let handle = match relay.build() {
            Ok(relay) => relay.spawn(),
            Err(e) => {
                publisher.close().await;
                pool.close().await;
                return Err(e.into());
            }
        };
        Ok(Self { pool, publisher, handle })
    }

    async fn stop(self) -> Result<(), BoxError> {
        let stopped = self.handle.shutdown().await;
        self.publisher.close().await;
        self.pool.close().await;
        Ok(stopped?)
    }
}

async fn measure_latency(db: &TestDb, target: Target<'_>, plan: Plan) -> Result<Latency, BoxError> {
    target.purge().await?;
    crate::counters::install();
    let claims = || {
        let rows = crate::counters::get("outbox_relay_claims_total{found=\"rows\"}");
        (rows, rows + crate::counters::get("outbox_relay_claims_total{found=\"none\"}"))
    };
    let claims_before = claims();
    for (name, _) in RELAY_STAGES {
        crate::counters::take_samples(name);
    }
    crate::counters::sample_histograms(true);
    let arrivals = Arrivals::start(target, u64::MAX, true).await?;
    let outcome = async {
        let relay = InProcess::start(db, target).await?;
        let produced = produce(db, plan).await;
        // Wait for the stragglers (every event committed, warm-up included), then stop the relay.
        let expected = produced.as_ref().map(|c| c.len() as u64).unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(30);
        while arrivals.count() < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stopped = relay.stop().await;
        let produced = produced?;
        stopped?;
        Ok::<_, BoxError>(produced)
    }
    .await;
    let arrived = arrivals.stop().await;
    crate::counters::sample_histograms(false);
    let claims_after = claims();
    let commits = outcome?;
    let arrived = arrived?;
    target.purge().await?;

    let mut first_arrival: HashMap<Uuid, Instant> = HashMap::with_capacity(arrived.len());
    for (id, at) in arrived {
        first_arrival.entry(id).or_insert(at);
    }
    let measured: Vec<&Commit> = commits.iter().filter(|c| c.measured).collect();
    let mut latencies: Vec<f64> = measured
        .iter()
        .filter_map(|c| first_arrival.get(&c.id).map(|at| at.saturating_duration_since(c.at).as_secs_f64() * 1e3))
        .collect();
    latencies.sort_by(f64::total_cmp);
    let missing = measured.len() - latencies.len();
    let offered = measured.len() as f64 / plan.latency_window.as_secs_f64();
    comment(format_args!(
        "latency: {} events committed in {:?} after {:?} of warm-up ({PRODUCERS} producers, {LATENCY_ENTITIES} \
         entities, one event per transaction), {} arrived, {missing} missing",
        measured.len(),
        plan.latency_window,
        plan.latency_warmup,
        latencies.len()
    ));
    if latencies.is_empty() {
        return Err("no event of the latency phase arrived".into());
    }
    let p90 = percentile(&latencies, 0.90);
    let p999 = percentile(&latencies, 0.999);
    comment(format_args!("latency: p90 {p90:.2} ms, p99.9 {p999:.2} ms"));
    let (with_rows, all) = (claims_after.0 - claims_before.0, claims_after.1 - claims_before.1);
    comment(format_args!(
        "latency: {all} claims ({with_rows} found rows), {:.2} claims per event committed",
        all as f64 / commits.len().max(1) as f64
    ));
    for (name, what) in RELAY_STAGES {
        let mut took: Vec<f64> = crate::counters::take_samples(name).into_iter().map(|s| s * 1e3).collect();
        took.sort_by(f64::total_cmp);
        if let Some(max) = took.last() {
            comment(format_args!(
                "latency: {what} (whole phase, {} samples): p50 {:.2} ms, p99 {:.2} ms, max {max:.2} ms",
                took.len(),
                percentile(&took, 0.50),
                percentile(&took, 0.99),
            ));
        }
    }
    Ok(Latency {
        offered,
        samples: latencies.len() as u64,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or(0.0),
    })
}

/// The relay's histograms that show where an event's time goes, and what each measures.
const RELAY_STAGES: [(&str, &str); 5] = [
    ("outbox_event_age_at_claim_seconds", "event age when claimed"),
    ("outbox_relay_claim_seconds", "claim statement"),
    ("outbox_publish_to_confirm_seconds", "publish to confirm"),
    ("outbox_relay_record_seconds", "recording a batch's outcomes"),
    ("outbox_commit_to_confirm_seconds", "event age when confirmed"),
];

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One committed event of the latency phase.
#[derive(Debug)]
struct Commit {
    id: Uuid,
    /// When `COMMIT` returned.
    at: Instant,
    /// Whether its tick fell in the measured window (not the warm-up).
    measured: bool,
}

/// The steady load: [`PRODUCERS`] tasks, each with its own connection, committing one event per
/// [`TICK`] (missed ticks are caught up, so the offered rate holds), each over its own entities.
/// The producers' ticks are spread evenly over a tick, so the load arrives as one commit every
/// `TICK / PRODUCERS` rather than as bursts of [`PRODUCERS`] simultaneous commits.
async fn produce(db: &TestDb, plan: Plan) -> Result<Vec<Commit>, BoxError> {
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(PRODUCERS)?)
        .min_connections(u32::try_from(PRODUCERS)?)
        .connect_with(db.connect_options().clone())
        .await?;
    let begin = Instant::now() + Duration::from_millis(100);
    let measure_from = begin + plan.latency_warmup;
    let end = measure_from + plan.latency_window;
    let tasks = (0..PRODUCERS).map(|producer| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let outbox = Outbox::new();
            let mut conn = pool.acquire().await?;
            let offset = TICK * u32::try_from(producer)? / u32::try_from(PRODUCERS)?;
            let mut ticks = tokio::time::interval_at(begin + offset, TICK);
            let mut commits = Vec::new();
            for n in 0_u64.. {
                let tick = ticks.tick().await;
                if tick >= end {
                    break;
                }
                let order = i64::try_from(producer + PRODUCERS * (n % (LATENCY_ENTITIES / PRODUCERS)) + 1)?;
                let mut tx = conn.begin().await?;
                let id = outbox.enqueue(&mut tx, event(order)?.entity(format!("order-{order}"))).await?;
                tx.commit().await?;
                commits.push(Commit { id: *id.as_uuid(), at: Instant::now(), measured: tick >= measure_from });
            }
            Ok::<_, BoxError>(commits)
        })
    });
    let outcome = try_join_all(tasks).await;
    pool.close().await;
    let mut commits = Vec::new();
    for done in outcome? {
        commits.extend(done?);
    }
    Ok(commits)
}

// ---------------------------------------------------------------------------------------------
// 4. Backlog size

/// Fills a backlog, drains it with an in-process relay and returns events per second.
async fn drain_in_process(db: &TestDb, target: Target<'_>, backlog: Backlog) -> Result<f64, BoxError> {
    let filled = fill(db, backlog.events, backlog.entities).await?;
    target.purge().await?;
    let arrivals = Arrivals::start(target, backlog.events, false).await?;
    let outcome = async {
        let relay = InProcess::start(db, target).await?;
        let drained = await_drain(db.pool(), &arrivals, backlog.events, Instant::now(), backlog.limit, None).await;
        let stopped = relay.stop().await;
        let drained = drained?;
        stopped?;
        Ok::<_, BoxError>(drained)
    }
    .await;
    let stopped = arrivals.stop().await;
    let drained = outcome?;
    stopped?;
    target.purge().await?;
    report_drain("backlog (relay in-process)", backlog.entities, filled, &drained);
    Ok(drained.rate())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.50), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&values, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
    }
}
