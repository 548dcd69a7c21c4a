//! The consumer benchmark: how many events per second the inbox applies compared with what a raw
//! consumer takes from the same queue, what dropping a duplicate costs, and how much memory a
//! consumer process needs.
//!
//! One run, one fresh database ([`TestDb`], with the inbox migrations and a business table
//! `shipments`) and one broker topology ([`TestBroker`], deleted at the end): a durable topic
//! exchange and a durable queue declared as a consumer declares it ([`outbox_inbox::declare_queue`]:
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
//!    (`outbox-bench consumer-process`): an [`InboxRunner`](outbox_inbox::InboxRunner) with the
//!    runner's default prefetch and concurrency and a pool of one connection per concurrent
//!    delivery, feeding an [`InboxLayer`](outbox_inbox::InboxLayer) around a handler that
//!    upserts the entity's row of `shipments` (order id, total, status, version = the event's
//!    sequence, and a count of applications) in the inbox's transaction, and refuses an event whose
//!    sequence does not follow the stored version. The clock runs from the process saying it is
//!    ready (its pool connected, the runner started) until it has acknowledged every delivery.
//! 3. Verification: the runner applied every event, directly or after parking it (with 16
//!    deliveries in hand a successor can overtake its predecessor; the inbox parks it and applies
//!    it right after the predecessor), none stale or dead-lettered; every entity's row holds its
//!    last sequence as version and was applied exactly as many times as the entity has events; the
//!    inbox holds exactly one processed row per event. Otherwise the benchmark fails.
//! 4. `duplicates`: publish the first tenth of the applied events again, unchanged, to the second
//!    queue, then tell the consumer process to consume it too; the clock runs until every one was
//!    dropped as a duplicate. Verified again: nothing else happened and the business table and the
//!    inbox did not change.
//! 5. The consumer process's peak RSS (`VmHWM`), read before it shuts down, and the CPU time per
//!    1,000 events of the process, its PostgreSQL backends and the broker in phases 2 and 4
//!    ([`crate::cpu`]).
//! 6. `end to end`: producers, a relay process and a consumer process together on a fresh
//!    database, from the first commit to the last effect (`end_to_end`).
//!
//! This file holds the command: the topology, the order of the phases and the figures. The rest,
//! one concern per file: the sizes of a run (`plan`), the consumer's settings (`settings`), where
//! the benchmark publishes and consumes (`target`), the fills (`fill`), the raw consumer (`raw`),
//! the inbox phases driven from here (`inbox`), the checks of counts and effects (`verify`), the
//! counts the consumer process reports (`stats`), the business table and its handler
//! (`shipments`), the end-to-end phase (`end_to_end`) and the consumer process, the hidden command
//! `consumer-process` (`process`).

mod end_to_end;
mod fill;
mod inbox;
mod plan;
mod process;
mod raw;
mod settings;
mod shipments;
mod stats;
mod target;
mod verify;

use outbox_testkit::{TestBroker, TestDb};

use self::fill::{fill, messages};
use self::inbox::inbox;
pub(crate) use self::inbox::{spawn_consumer_with, stats};
pub(crate) use self::plan::Plan;
pub(crate) use self::process::{ProcessArgs, process};
use self::settings::{BATCH, CONCURRENCY, POOL, PREFETCH};
pub(crate) use self::shipments::{CREATE_SHIPMENTS, Handler};
pub(crate) use self::stats::{format_stats, handled};
pub(crate) use self::target::declare_queue;
use self::target::{REPLAY_KEY, Target};
use crate::amqp::PUBLISH_WINDOW;
use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::machine;
use crate::producer::{EVENT_TYPE, event};
use crate::wait::{FLOOR, in_phase, within};

/// Runs the consumer benchmark and prints its figures.
pub(crate) async fn run(plan: Plan) -> Result<(), BoxError> {
    crate::broker::with_broker(async |broker| with_db(async |db| bench(db, broker, plan).await).await).await?;
    Ok(())
}

async fn bench(db: &TestDb, broker: &TestBroker, plan: Plan) -> Result<(), BoxError> {
    machine::describe(db.pool()).await;
    let declared = broker.declare_exchange("bench.consumer", lapin::ExchangeKind::Topic);
    let exchange = within("the declaration of exchange bench.consumer", FLOOR, declared).await?;
    let queue = broker.name("bench.consumer");
    let replay = broker.name("bench.consumer.replay");
    for (name, key) in [(&queue, EVENT_TYPE), (&replay, REPLAY_KEY)] {
        declare_queue(broker, &exchange, name, key).await?;
    }
    within("the table shipments", FLOOR, sqlx::raw_sql(CREATE_SHIPMENTS).execute(db.pool())).await?;
    let target = Target { url: broker.url(), exchange: &exchange, queue: &queue, replay: &replay };
    describe(plan)?;

    // For experiments: `OUTBOX_BENCH_CONSUMER_PHASES=end_to_end` runs phase 6 alone.
    if std::env::var("OUTBOX_BENCH_CONSUMER_PHASES").is_ok_and(|p| p == "end_to_end") {
        let together = in_phase("end to end", end_to_end::end_to_end(target, plan)).await?;
        figure("consumer_end_to_end_events_per_s", Value::Rate(together.applied), "events/s");
        figure("consumer_end_to_end_relay_drain_events_per_s", Value::Rate(together.relayed), "events/s");
        return Ok(());
    }

    // 1: the raw ceiling.
    let raw_rate = in_phase("raw", raw::ceiling(broker, target, plan)).await?;

    // 2 to 5: the inbox in a consumer process.
    let measured = in_phase("inbox", async {
        let events = messages(plan)?;
        fill(target, "inbox", EVENT_TYPE, &events).await?;
        let replayed = usize::try_from(plan.duplicates)?;
        inbox(db, target, plan, &events[..replayed]).await
    })
    .await?;

    // 6: producers, relay and consumer together.
    let together = in_phase("end to end", end_to_end::end_to_end(target, plan)).await?;

    let inbox_rate = plan.events as f64 / measured.inbox.as_secs_f64();
    let drop_rate = plan.duplicates as f64 / measured.duplicates.as_secs_f64();
    figure("consumer_events", Value::Count(plan.events), "events");
    figure("consumer_raw_msgs_per_s", Value::Rate(raw_rate), "msgs/s");
    figure("consumer_inbox_events_per_s", Value::Rate(inbox_rate), "events/s");
    figure("consumer_inbox_ratio", Value::Ratio(inbox_rate / raw_rate), "x");
    figure("consumer_duplicate_drop_per_s", Value::Rate(drop_rate), "events/s");
    figure("consumer_peak_rss_mib", Value::Mebibytes(measured.peak_kib as f64 / 1024.0), "MiB");
    figure("consumer_end_to_end_events_per_s", Value::Rate(together.applied), "events/s");
    figure("consumer_end_to_end_relay_drain_events_per_s", Value::Rate(together.relayed), "events/s");
    figure("consumer_end_to_end_produced_events_per_s", Value::Rate(together.produced), "events/s");
    measured.cpu.print("consumer", plan.events);
    measured.duplicates_cpu.print("consumer_duplicate", plan.duplicates);
    Ok(())
}

/// Prints what the run measures and how, as `#` lines.
fn describe(plan: Plan) -> Result<(), BoxError> {
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
    Ok(())
}
