//! The consumer benchmark: how many events per second the inbox applies compared with what a raw
//! consumer takes from the same queue, what dropping a duplicate costs, and how much memory a
//! consumer process needs.
//!
//! One run, one fresh database ([`TestDb`], with the inbox migrations and a business table
//! `shipments`) and one broker topology ([`TestBroker`], deleted at the end): a durable topic
//! exchange and a durable queue declared as a consumer declares it ([`outbox_consumer::declare_queue`]:
//! dead-letter exchange and queue), bound with `order.updated`, plus a second queue of the same
//! kind bound with `order.replayed` for the duplicates. Every message is wire contract v1 of the
//! producer benchmark's ~300-byte JSON payload, with its own event id, an entity key and a sequence
//! number, as the relay sends it (event `i` belongs to entity `i % entities`, the stream
//! interleaved across entities), persistent, published with confirms and 1,024 in flight before
//! any consumer starts. Both consumers take them with the same prefetch ([`PREFETCH`]).
//!
//! Phases, in order:
//!
//! 1. `raw`: fill the queue, then one lapin consumer that decodes nothing and acks every message on
//!    its own (no multiple-ack; the acks are not awaited one by one): the ceiling. The clock runs from its
//!    connecting to the broker to its last ack; afterwards the queue must be empty.
//! 2. `inbox`: fill the queue again with as many fresh events, then start a consumer process
//!    (`outbox-bench consumer-process`): an [`InboxRunner`] with the runner's default prefetch and
//!    concurrency and a pool of one connection per concurrent delivery, feeding an [`InboxLayer`]
//!    around a handler that upserts the entity's row of `shipments` (order id, total, status,
//!    version = the event's sequence, and a count of applications) in the inbox's transaction,
//!    and refuses an event whose sequence does not follow the stored version. The clock runs from
//!    the process saying it is ready (its pool connected, the runner started) until it has
//!    acknowledged every delivery.
//! 3. Verification: the runner applied every event, directly or after parking it (with 16
//!    deliveries in hand a successor can overtake its predecessor; the inbox parks it and applies
//!    it right after the predecessor), none stale or dead-lettered; every entity's row holds its
//!    last sequence as version and was applied exactly as many times as the entity has events; the
//!    inbox holds exactly one processed row per event. Otherwise the benchmark fails.
//! 4. `duplicates`: publish the first tenth of the applied events again, unchanged, to the second
//!    queue, then tell the consumer process to consume it too; the clock runs until every one was
//!    dropped as a duplicate. Verified again: nothing else happened and the business table and the
//!    inbox did not change.
//! 5. The consumer process's peak RSS (`VmHWM`), read before it shuts down.

use std::collections::HashMap;
use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use outbox_consumer::{HandlerError, InboxLayer, InboxRequest, InboxRunner, RunnerHandle, RunnerStats};
use outbox_core::wire::WireMessage;
use outbox_testkit::{TestBroker, TestDb};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::time::Instant;
use tower::Layer;

use crate::BoxError;
use crate::amqp::{PUBLISH_WINDOW, publish_confirmed, wire_message};
use crate::figure::{Value, comment, figure};
use crate::machine;
use crate::process::{READY, Subprocess, Urls, init_child_logging, stdin_lines};
use crate::producer::{EVENT_TYPE, event};
use crate::relay::with_db;

/// Unacknowledged deliveries the broker sends ahead: the runner's default, used by both consumers.
const PREFETCH: u16 = 64;
/// Transactions the runner has open at once: its default.
const CONCURRENCY: usize = 8;
/// Deliveries per transaction at most: the runner's default.
const BATCH: usize = 16;
/// Connections of the consumer process's pool: one per transaction, and room for the sweeper.
const POOL: u32 = 16;
/// The inbox's consumer name.
const CONSUMER: &str = "bench-shipping";
/// Routing key of the duplicates, bound to the second queue only.
const REPLAY_KEY: &str = "order.replayed";
/// How often the benchmark asks the consumer process how far it got.
const POLL: Duration = Duration::from_millis(5);

/// The business table the handler writes.
const CREATE_SHIPMENTS: &str = "\
CREATE TABLE shipments (
    order_key   text PRIMARY KEY,
    order_id    bigint NOT NULL,
    version     bigint NOT NULL,
    applied     bigint NOT NULL,
    status      text NOT NULL,
    total_cents bigint NOT NULL,
    updated_at  timestamptz NOT NULL
)";
/// The handler's write: the entity's row at the event's version, only if it follows the stored one.
const UPSERT_SHIPMENT: &str = "\
INSERT INTO shipments (order_key, order_id, version, applied, status, total_cents, updated_at)
VALUES ($1, $2, $3, 1, $4, $5, now())
ON CONFLICT (order_key) DO UPDATE
SET version = EXCLUDED.version, applied = shipments.applied + 1, status = EXCLUDED.status,
    total_cents = EXCLUDED.total_cents, updated_at = now()
WHERE shipments.version = EXCLUDED.version - 1";
const SHIPMENTS: &str = "SELECT order_key, version, applied FROM shipments";
const INBOX_ROWS: &str = "\
SELECT count(*) FILTER (WHERE status = 'processed'), count(*) FROM inbox_events WHERE consumer = $1";

/// Sizes of one benchmark run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Events of each fill.
    events: u64,
    /// Entities they are spread over.
    entities: u64,
    /// Applied events published again.
    duplicates: u64,
    /// How long a phase may take before the benchmark fails.
    limit: Duration,
}

impl Plan {
    /// Full: 100,000 events over 1,000 entities, 10,000 duplicates, each phase within 5 minutes.
    /// Quick: 5,000 events over 100 entities, 500 duplicates, each phase within a minute.
    pub(crate) fn new(quick: bool) -> Self {
        if quick {
            Self { events: 5_000, entities: 100, duplicates: 500, limit: Duration::from_secs(60) }
        } else {
            Self { events: 100_000, entities: 1_000, duplicates: 10_000, limit: Duration::from_secs(300) }
        }
    }
}

/// Where the benchmark publishes and consumes.
#[derive(Debug, Clone, Copy)]
struct Target<'a> {
    url: &'a str,
    exchange: &'a str,
    queue: &'a str,
    replay: &'a str,
}

/// Runs the consumer benchmark and prints its figures.
pub(crate) async fn run(plan: Plan) -> Result<(), BoxError> {
    let broker = TestBroker::new().await?;
    let outcome = with_db(async |db| bench(db, &broker, plan).await).await;
    let closed = broker.close().await;
    outcome?;
    closed?;
    Ok(())
}

async fn bench(db: &TestDb, broker: &TestBroker, plan: Plan) -> Result<(), BoxError> {
    machine::describe(db.pool()).await;
    let exchange = broker.declare_exchange("bench.consumer", lapin::ExchangeKind::Topic).await?;
    let queue = broker.name("bench.consumer");
    let replay = broker.name("bench.consumer.replay");
    for (name, key) in [(&queue, EVENT_TYPE), (&replay, REPLAY_KEY)] {
        // Remembered first, so that whatever was declared is deleted even if a declaration fails.
        broker.remember_queue(name);
        broker.remember_queue(&format!("{name}.dead"));
        broker.remember_exchange(&format!("{name}.dlx"));
        outbox_consumer::declare_queue(broker.channel(), &exchange, name, &[key]).await?;
    }
    sqlx::raw_sql(CREATE_SHIPMENTS).execute(db.pool()).await?;
    let target = Target { url: broker.url(), exchange: &exchange, queue: &queue, replay: &replay };
    comment(format_args!(
        "consumer: {} events over {} entities per phase, payload {} bytes, wire contract v1 (event id, entity, \
         sequence), persistent, published with confirms ({PUBLISH_WINDOW} in flight) to a durable topic exchange \
         -> durable queue with a dead-letter exchange; prefetch {PREFETCH} for both consumers",
        plan.events,
        plan.entities,
        event(1)?.event_payload().bytes().len()
    ));
    comment(format_args!(
        "consumer: raw = one lapin consumer, no decoding, one basic.ack per message (up to {PREFETCH} in \
         flight); inbox = InboxRunner (prefetch {PREFETCH}, concurrency {CONCURRENCY}, batches of up to {BATCH}, \
         the defaults) + InboxLayer \
         in a child process with a pool of {POOL} connections, handler upserts `shipments` in the inbox's \
         transaction"
    ));

    // 1: the raw ceiling.
    let raw: Vec<WireMessage> = messages(plan)?;
    fill(target, "raw", EVENT_TYPE, &raw).await?;
    drop(raw);
    let raw_elapsed = raw_drain(target, plan).await?;
    let remaining = broker
        .channel()
        .queue_declare(
            queue.as_str().into(),
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

    // 2 to 5: the inbox in a consumer process.
    let events = messages(plan)?;
    fill(target, "inbox", EVENT_TYPE, &events).await?;
    let replayed = usize::try_from(plan.duplicates)?;
    let measured = inbox(db, target, plan, &events[..replayed]).await?;

    let inbox_rate = plan.events as f64 / measured.inbox.as_secs_f64();
    let drop_rate = plan.duplicates as f64 / measured.duplicates.as_secs_f64();
    figure("consumer_events", Value::Count(plan.events), "events");
    figure("consumer_raw_msgs_per_s", Value::Rate(raw_rate), "msgs/s");
    figure("consumer_inbox_events_per_s", Value::Rate(inbox_rate), "events/s");
    figure("consumer_inbox_ratio", Value::Ratio(inbox_rate / raw_rate), "x");
    figure("consumer_duplicate_drop_per_s", Value::Rate(drop_rate), "events/s");
    figure("consumer_peak_rss_mib", Value::Mebibytes(measured.peak_kib as f64 / 1024.0), "MiB");
    Ok(())
}

/// The events of one fill, each with a fresh event id.
fn messages(plan: Plan) -> Result<Vec<WireMessage>, BoxError> {
    (0..plan.events).map(|i| wire_message(i, plan.entities)).collect()
}

/// Publishes `messages` with confirms to the benchmark exchange with `routing_key`, which routes
/// them to one queue; `what` names the phase.
async fn fill(target: Target<'_>, what: &str, routing_key: &str, messages: &[WireMessage]) -> Result<(), BoxError> {
    let took = publish_confirmed(target.url, target.exchange, routing_key, messages.iter().cloned().map(Ok)).await?;
    comment(format_args!(
        "{what}: queue filled with {} messages in {:.2} s ({:.1} msgs/s)",
        messages.len(),
        took.as_secs_f64(),
        messages.len() as f64 / took.as_secs_f64()
    ));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 1. The raw consumer

/// Takes `plan.events` messages from the queue with one consumer, acking each on its own (no
/// multiple-ack), and returns the time from connecting to the last ack done. The acks are not
/// awaited one by one: up to [`PREFETCH`] are in flight while the next deliveries are taken, as the
/// runner's concurrent deliveries ack.
async fn raw_drain(target: Target<'_>, plan: Plan) -> Result<Duration, BoxError> {
    use futures::StreamExt;
    use futures::stream::FuturesUnordered;
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

// ---------------------------------------------------------------------------------------------
// 2 to 5. The inbox in a consumer process

/// What the consumer process measured.
#[derive(Debug)]
struct Measured {
    /// Until every event was applied.
    inbox: Duration,
    /// Until every duplicate was dropped.
    duplicates: Duration,
    /// Peak RSS of the process, kB.
    peak_kib: u64,
}

async fn inbox(db: &TestDb, target: Target<'_>, plan: Plan, replayed: &[WireMessage]) -> Result<Measured, BoxError> {
    let pool = db.pool();
    let args = ["consumer-process", "--queue", target.queue, "--consumer", CONSUMER];
    let mut process = Subprocess::spawn("the consumer process", &args, &db.url(), target.url).await?;
    let outcome = async {
        let start = Instant::now();
        let (inbox, stats) = await_handled(&mut process, plan.events, start, plan.limit).await?;
        comment(format_args!("inbox: {stats:?} after {:.3} s", inbox.as_secs_f64()));
        check_stats(&stats, plan.events, 0)?;
        verify(pool, plan).await?;

        fill(target, "duplicates", REPLAY_KEY, replayed).await?;
        let start = Instant::now();
        let answer = process.request(&format!("consume {}", target.replay)).await?;
        if answer != CONSUMING {
            return Err(format!("the consumer process did not start consuming the duplicates: {answer:?}").into());
        }
        let expected = plan.events + plan.duplicates;
        let (duplicates, stats) = await_handled(&mut process, expected, start, plan.limit).await?;
        comment(format_args!("duplicates: {stats:?} after {:.3} s", duplicates.as_secs_f64()));
        check_stats(&stats, plan.events, plan.duplicates)?;
        verify(pool, plan).await?;

        // Read the peak before the shutdown, which allocates nothing worth measuring.
        let (peak_kib, now_kib) = process.memory().await?;
        comment(format_args!("consumer process memory after both phases: VmHWM {peak_kib} kB, VmRSS {now_kib} kB"));
        Ok::<_, BoxError>(Measured { inbox, duplicates, peak_kib })
    }
    .await;
    let stopped = process.stop().await;
    let measured = outcome?;
    stopped?;
    Ok(measured)
}

/// Polls the consumer process until it has handled `expected` deliveries in all (applied,
/// duplicate, stale, parked or dead-lettered), or fails after `limit`.
async fn await_handled(
    process: &mut Subprocess,
    expected: u64,
    start: Instant,
    limit: Duration,
) -> Result<(Duration, RunnerStats), BoxError> {
    loop {
        let stats = parse_stats(&process.request(STATS).await?)?;
        if handled(&stats) >= expected {
            return Ok((start.elapsed(), stats));
        }
        if start.elapsed() >= limit {
            return Err(
                format!("the consumer handled {} of {expected} deliveries within {limit:?}", handled(&stats)).into()
            );
        }
        process.check_alive()?;
        tokio::time::sleep(POLL).await;
    }
}

fn handled(stats: &RunnerStats) -> u64 {
    stats.applied + stats.duplicates + stats.stale + stats.parked + stats.dead_lettered
}

/// Every event applied, directly or after being parked (with concurrent deliveries a successor can
/// overtake its predecessor; the inbox parks it and applies it right after), every replayed one
/// dropped as a duplicate, nothing stale or dead-lettered. Retries (transient failures) are allowed:
/// they cost time but change no outcome.
fn check_stats(stats: &RunnerStats, events: u64, duplicates: u64) -> Result<(), String> {
    if stats.applied + stats.parked == events
        && stats.duplicates == duplicates
        && stats.stale == 0
        && stats.dead_lettered == 0
    {
        Ok(())
    } else {
        Err(format!(
            "the consumer's counts are {stats:?}, expected {events} applied or parked, {duplicates} duplicates, \
             nothing stale or dead-lettered"
        ))
    }
}

/// Checks the business table and the inbox against the plan.
async fn verify(pool: &PgPool, plan: Plan) -> Result<(), BoxError> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(SHIPMENTS).fetch_all(pool).await?;
    check_effects(&rows, plan.events, plan.entities)?;
    let (processed, all): (i64, i64) = sqlx::query_as(INBOX_ROWS).bind(CONSUMER).fetch_one(pool).await?;
    if u64::try_from(processed)? != plan.events || u64::try_from(all)? != plan.events {
        return Err(
            format!("the inbox holds {all} rows, {processed} processed, expected {} of each", plan.events).into()
        );
    }
    comment(format_args!(
        "verified: {} shipments at their last version, each applied once per event; {processed} inbox rows",
        rows.len()
    ));
    Ok(())
}

/// How many of `events` events (event `i` to entity `i % entities`) each entity has, by key.
fn expected_versions(events: u64, entities: u64) -> HashMap<String, u64> {
    (0..entities.min(events))
        .map(|e| (format!("order-{}", e + 1), events / entities + u64::from(e < events % entities)))
        .collect()
}

/// `rows` of `shipments` (key, version, applications) must hold one row per entity, at the
/// entity's last sequence, applied once per event.
fn check_effects(rows: &[(String, i64, i64)], events: u64, entities: u64) -> Result<(), String> {
    let expected = expected_versions(events, entities);
    let mut wrong = Vec::new();
    for (key, version, applied) in rows {
        match expected.get(key) {
            Some(&n) if u64::try_from(*version) == Ok(n) && u64::try_from(*applied) == Ok(n) => {}
            Some(&n) => wrong.push(format!("{key}: version {version}, applied {applied} times, expected {n}")),
            None => wrong.push(format!("{key}: not an entity of the benchmark")),
        }
    }
    if rows.len() != expected.len() {
        wrong.push(format!("{} rows for {} entities", rows.len(), expected.len()));
    }
    if wrong.is_empty() {
        return Ok(());
    }
    let shown = wrong.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    Err(format!("shipments do not hold the expected effects ({} problems): {shown}", wrong.len()))
}

// ---------------------------------------------------------------------------------------------
// The consumer process

/// Request: the runner's counts, answered as one [`format_stats`] line.
const STATS: &str = "stats";
/// Answer to `consume <queue>`.
const CONSUMING: &str = "consuming";

/// One line of counts: `applied=1 duplicates=0 stale=0 parked=0 retried=0 dead_lettered=0`.
fn format_stats(s: &RunnerStats) -> String {
    format!(
        "applied={} duplicates={} stale={} parked={} retried={} dead_lettered={}",
        s.applied, s.duplicates, s.stale, s.parked, s.retried, s.dead_lettered
    )
}

/// Reads a [`format_stats`] line.
fn parse_stats(line: &str) -> Result<RunnerStats, String> {
    let mut stats = RunnerStats::default();
    for field in line.split_whitespace() {
        let (name, value) = field.split_once('=').ok_or_else(|| format!("not a count: {field:?}"))?;
        let value: u64 = value.parse().map_err(|_| format!("not a count: {field:?}"))?;
        let slot = match name {
            "applied" => &mut stats.applied,
            "duplicates" => &mut stats.duplicates,
            "stale" => &mut stats.stale,
            "parked" => &mut stats.parked,
            "retried" => &mut stats.retried,
            "dead_lettered" => &mut stats.dead_lettered,
            other => return Err(format!("unknown count {other:?}")),
        };
        *slot = value;
    }
    Ok(stats)
}

fn sum(handles: &[RunnerHandle]) -> RunnerStats {
    handles.iter().map(RunnerHandle::stats).fold(RunnerStats::default(), |mut a, b| {
        a.applied += b.applied;
        a.duplicates += b.duplicates;
        a.stale += b.stale;
        a.parked += b.parked;
        a.retried += b.retried;
        a.dead_lettered += b.dead_lettered;
        a
    })
}

/// Arguments of the hidden `consumer-process` command. The URLs come from the environment, where
/// `consumer` puts them.
#[derive(Debug, clap::Args)]
pub(crate) struct ProcessArgs {
    #[command(flatten)]
    urls: Urls,
    /// Queue to consume (declared, with its dead-letter exchange `<queue>.dlx`).
    #[arg(long)]
    queue: String,
    /// The inbox's consumer name.
    #[arg(long)]
    consumer: String,
}

/// The consumer process: an [`InboxRunner`] with default prefetch and concurrency over a pool of
/// [`POOL`] connections, applying events to `shipments`. Answers `stats` with the runners' counts
/// and `consume <queue>` by starting one more runner (same inbox) on that queue; shuts the runners
/// down gracefully at SIGTERM, SIGINT or the end of standard input.
pub(crate) async fn process(args: ProcessArgs) -> Result<(), BoxError> {
    init_child_logging();
    let pool = PgPoolOptions::new().max_connections(POOL).connect(&args.urls.database_url).await?;
    let service = InboxLayer::new(pool.clone(), args.consumer).layer(tower::service_fn(apply_shipment));
    // Experiments only (the figures are defined with the defaults): other batch sizes and
    // concurrency through the environment.
    let knob = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let (batch, concurrency) = (knob("OUTBOX_BENCH_CONSUMER_BATCH"), knob("OUTBOX_BENCH_CONSUMER_CONCURRENCY"));
    let start = |queue: &str| {
        let mut runner = InboxRunner::builder(args.urls.amqp_url.as_str(), service.clone())
            .connection_name("outbox-bench-consumer")
            .queue(queue);
        if let Some(n) = batch {
            runner = runner.batch_size(n);
        }
        if let Some(n) = concurrency {
            runner = runner.concurrency(n);
        }
        runner.build().map(InboxRunner::spawn)
    };
    let mut runners = vec![start(&args.queue)?];
    let mut requests = stdin_lines();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("{READY}");
    loop {
        tokio::select! {
            request = requests.recv() => match request.as_deref() {
                None => break,
                Some(STATS) => println!("{}", format_stats(&sum(&runners))),
                Some(other) => match other.strip_prefix("consume ") {
                    Some(queue) => {
                        runners.push(start(queue)?);
                        println!("{CONSUMING}");
                    }
                    None => println!("unknown request {other:?}"),
                },
            },
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    let mut outcome = Ok(());
    for runner in runners {
        if let Err(e) = runner.shutdown().await {
            outcome = Err(e);
        }
    }
    pool.close().await;
    Ok(outcome?)
}

/// The business write: the order's shipment row at the event's version, in the inbox's
/// transaction. An event that does not follow the stored version fails permanently (and is
/// dead-lettered, which fails the benchmark).
async fn apply_shipment(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let event = req.event();
    let entity = event.entity.as_ref().ok_or_else(|| HandlerError::permanent("event without entity"))?;
    let key = entity.key.clone();
    let version = i64::try_from(entity.seq).map_err(|_| HandlerError::permanent("sequence out of range"))?;
    let order: serde_json::Value =
        event.payload.json().map_err(|_| HandlerError::permanent("payload is not a JSON order"))?;
    let field = |name: &str| order.get(name).cloned().ok_or_else(|| HandlerError::permanent(format!("no {name}")));
    let order_id = field("order_id")?.as_i64().ok_or_else(|| HandlerError::permanent("order_id is not a number"))?;
    let total = field("total_cents")?.as_i64().ok_or_else(|| HandlerError::permanent("total_cents is not a number"))?;
    let status = field("status")?.as_str().map(str::to_owned).ok_or_else(|| HandlerError::permanent("bad status"))?;
    let done = sqlx::query(UPSERT_SHIPMENT)
        .bind(&key)
        .bind(order_id)
        .bind(version)
        .bind(status)
        .bind(total)
        .execute(req.conn())
        .await?;
    if done.rows_affected() != 1 {
        return Err(HandlerError::permanent(format!("{key}: version {version} does not follow the stored one")));
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runner counts: applied, duplicates, stale, parked, retried, dead-lettered.
    fn counts([applied, duplicates, stale, parked, retried, dead_lettered]: [u64; 6]) -> RunnerStats {
        let mut stats = RunnerStats::default();
        (stats.applied, stats.duplicates, stats.stale) = (applied, duplicates, stale);
        (stats.parked, stats.retried, stats.dead_lettered) = (parked, retried, dead_lettered);
        stats
    }

    #[test]
    fn stats_lines_round_trip() {
        let stats = counts([100_000, 10_000, 1, 2, 3, 4]);
        let line = format_stats(&stats);
        assert_eq!(line, "applied=100000 duplicates=10000 stale=1 parked=2 retried=3 dead_lettered=4");
        assert_eq!(parse_stats(&line), Ok(stats));
        assert!(parse_stats("applied=1 weird=2").is_err());
        assert!(parse_stats("applied=-1").is_err());
        assert!(parse_stats("unknown request").is_err());
    }

    #[test]
    fn every_delivery_acked_counts_as_handled_but_retries_do_not() {
        let stats = counts([5, 4, 3, 2, 100, 1]);
        assert_eq!(handled(&stats), 15);
    }

    #[test]
    fn counts_must_account_for_every_event() {
        // applied, duplicates, stale, parked, retried, dead-lettered
        assert!(check_stats(&counts([10, 1, 0, 0, 0, 0]), 10, 1).is_ok());
        assert!(check_stats(&counts([9, 1, 0, 1, 0, 0]), 10, 1).is_ok());
        assert!(check_stats(&counts([10, 1, 0, 0, 3, 0]), 10, 1).is_ok());
        assert!(check_stats(&counts([9, 1, 0, 0, 0, 0]), 10, 1).is_err());
        assert!(check_stats(&counts([10, 0, 0, 0, 0, 0]), 10, 1).is_err());
        assert!(check_stats(&counts([9, 1, 1, 0, 0, 0]), 10, 1).is_err());
        assert!(check_stats(&counts([9, 1, 0, 0, 0, 1]), 10, 1).is_err());
    }

    #[test]
    fn versions_follow_the_round_robin_spread() {
        let v = expected_versions(10, 4);
        assert_eq!(v.len(), 4);
        assert_eq!(v["order-1"], 3); // events 0, 4, 8
        assert_eq!(v["order-2"], 3); // 1, 5, 9
        assert_eq!(v["order-3"], 2);
        assert_eq!(v["order-4"], 2);
        assert_eq!(expected_versions(2, 5).len(), 2);
        // Each wire message carries the sequence the expectation counts to.
        let last = wire_message(9, 4).expect("message");
        assert_eq!(last.headers.get(outbox_core::wire::HEADER_SEQ), Some(&outbox_core::HeaderValue::Int(3)));
        assert_eq!(
            last.headers.get(outbox_core::wire::HEADER_ENTITY),
            Some(&outbox_core::HeaderValue::String("order-2".into()))
        );
    }

    #[test]
    fn effects_must_match_exactly() {
        let good = vec![("order-1".to_owned(), 2, 2), ("order-2".to_owned(), 1, 1)];
        assert!(check_effects(&good, 3, 2).is_ok());
        let twice = vec![("order-1".to_owned(), 2, 3), ("order-2".to_owned(), 1, 1)];
        assert!(check_effects(&twice, 3, 2).is_err());
        let behind = vec![("order-1".to_owned(), 1, 1), ("order-2".to_owned(), 1, 1)];
        assert!(check_effects(&behind, 3, 2).is_err());
        let missing = vec![("order-1".to_owned(), 2, 2)];
        assert!(check_effects(&missing, 3, 2).is_err());
        let stranger = vec![("order-1".to_owned(), 2, 2), ("order-2".to_owned(), 1, 1), ("order-9".to_owned(), 1, 1)];
        assert!(check_effects(&stranger, 3, 2).is_err());
    }
}
