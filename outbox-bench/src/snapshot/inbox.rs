//! Part 4, the inbox: how many deliveries per second the consumer process of the consumer
//! benchmark handles (the inbox middleware, runner defaults) on 10 hot entities and on 1,000, free
//! and with a snapshot held, at the end of a long run. The handler inserts one `shipment_log` row
//! per event and updates no business row ([`Handler::Log`]): an updated business row would grow a
//! version chain of its own under the snapshot, which is the application's cost, not the inbox's.
//! Every delivery writes an `inbox_events` row (and, where it raises an entity's floor, its
//! `inbox_entities` row); with the snapshot held none of their dead versions can be removed.
//!
//! The queue is kept full by a feeder ([`super::feed`]), so the rate is the inbox's capacity; the
//! count of handled deliveries (applied, parked, dropped as duplicates) is read from the process
//! every sample. Each run has a queue of its own, deleted at the end: left bound to the exchange, it
//! would take a copy of every message of the later runs, and the broker would hold millions.

use outbox_inbox::RunnerStats;
use outbox_testkit::{TestBroker, TestDb};
use tokio::time::Instant;

use super::compare::free_and_held;
use super::feed::{Fed, Feeder, Queue, reserve};
use super::plan::Plan;
use super::series::{Series, sample};
use crate::consumer::{Handler, declare_queue, format_stats, handled, spawn_consumer_with, stats};
use crate::error::BoxError;
use crate::figure::comment;
use crate::process::Subprocess;
use crate::producer::EVENT_TYPE;
use crate::wait::{FLOOR, allow_for, within};

/// Messages per second a slow host still deletes with their queue.
const DELETED_PER_SECOND: u64 = 20_000;

/// Runs the part and prints `snapshot_inbox_{hot,many}_{free,held,ratio}`: deliveries handled per
/// second over the last window of each run ([`Plan::window`]).
pub(super) async fn inbox(broker: &TestBroker, plan: Plan) -> Result<(), BoxError> {
    let declared = broker.declare_exchange("bench.snapshot.inbox", lapin::ExchangeKind::Topic);
    let exchange = within("the declaration of exchange bench.snapshot.inbox", FLOOR, declared).await?;
    comment(format_args!(
        "inbox: the consumer process (runner defaults, InboxLayer, an insert-only handler) on a queue kept full, for {:?}; \
         the rate over the last {:?}",
        plan.load,
        plan.window()
    ));
    let run = async |db: &TestDb, entities, label: &str| apply(db, broker, &exchange, plan, entities, label).await;
    free_and_held("inbox", "events/s", run).await
}

/// One run: a fresh queue kept full, the consumer process applying it for [`Plan::load`], sampled;
/// the rate over the last window. The queue is deleted at the end.
async fn apply(
    db: &TestDb,
    broker: &TestBroker,
    exchange: &str,
    plan: Plan,
    entities: u64,
    label: &str,
) -> Result<f64, BoxError> {
    within("the table shipment_log", FLOOR, sqlx::raw_sql(Handler::Log.schema()).execute(db.pool())).await?;
    let name = broker.name(&format!("bench.snapshot.{}", label.replace(' ', ".")));
    declare_queue(broker, exchange, &name, EVENT_TYPE).await?;
    let queue =
        Queue { url: broker.url().to_owned(), exchange: exchange.to_owned(), name, channel: broker.channel().clone() };
    let outcome = async {
        let feeder = Feeder::start(queue.clone(), entities, plan.load).await?;
        let consumed = consume(db, &queue, &feeder, plan, label).await;
        let fed = feeder.stop().await;
        let (series, stats) = consumed?;
        Ok::<_, BoxError>((series, stats, fed?))
    }
    .await;
    let delete = queue.channel.queue_delete(queue.name.as_str().into(), Default::default());
    // The queue may still hold the feeder's whole reserve.
    let limit = allow_for(reserve(plan.load), DELETED_PER_SECOND);
    let deleted = within(format_args!("the deletion of queue {}", queue.name), limit, delete).await;
    let (series, stats, fed) = outcome?;
    deleted?;
    report(label, &stats, fed);
    Ok(series.figure(label, "events/s", plan))
}

/// Runs the consumer process on the fed queue for [`Plan::load`], reading its count every sample;
/// returns the series and its last counts. Fails if the feeder ends or the inbox finds an event
/// stale or dead-letters one (the stream is gapless: neither may happen).
async fn consume(
    db: &TestDb,
    queue: &Queue,
    feeder: &Feeder,
    plan: Plan,
    label: &str,
) -> Result<(Series, RunnerStats), BoxError> {
    let mut process = spawn_consumer_with(&db.url(), &queue.url, &queue.name, Handler::Log).await?;
    let mut last = RunnerStats::default();
    let sampled = sample(label, "deliveries", plan, Instant::now(), async || {
        feeder.check()?;
        last = checked(&mut process).await?;
        Ok(handled(&last))
    })
    .await;
    let stopped = process.stop().await;
    let series = sampled?;
    stopped?;
    Ok((series, last))
}

/// The process's counts, failing on a stale or dead-lettered delivery.
async fn checked(process: &mut Subprocess) -> Result<RunnerStats, BoxError> {
    let counts = stats(process).await?;
    if counts.stale > 0 || counts.dead_lettered > 0 {
        return Err(format!("the inbox found events stale or dead-lettered them: {}", format_stats(&counts)).into());
    }
    Ok(counts)
}

/// The run's last counts and what the feeder did, as a `#` line.
fn report(label: &str, stats: &RunnerStats, fed: Fed) {
    let starved = if fed.empty > 0 {
        format!(", empty at {} of {} readings: the consumer may have waited for work", fed.empty, fed.readings)
    } else {
        String::new()
    };
    comment(format_args!(
        "{label}: {}; {} messages fed, at least {} ready in the queue{starved}",
        format_stats(stats),
        fed.published,
        fed.least_ready
    ));
}
