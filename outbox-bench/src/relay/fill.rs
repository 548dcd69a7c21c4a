//! Filling a backlog of committed events, as a workload would have written it while the relay was
//! down, and bringing the table to a comparable state before it is drained.

use std::time::Duration;

use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use sqlx::Connection as _;
use sqlx::postgres::PgPoolOptions;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::BoxError;
use crate::figure::comment;
use crate::producer::event;
use crate::wait::{FLOOR, allow_for, join_tasks, secs, within};

/// Concurrent connections filling a backlog, each with entities of its own.
const FILLERS: u64 = 4;
/// Events per `enqueue_many` transaction when filling a backlog.
const FILL_BATCH: u64 = 2_000;

/// Events per second that filling, and vacuuming what was filled, still reach on a slow, busy host
/// (this one fills about 30,000), for their deadlines.
const FILL_RATE: u64 = 10_000;

const PREPARE: &str = "VACUUM ANALYZE outbox_events, outbox_entity_sequences";

/// Writes `total` events over `entities` with `enqueue_many`, as a workload would have: event `i`
/// belongs to entity `i % entities`, and [`FILLERS`] connections write at once, each the events of
/// its own entities (so they never wait on each other's sequence counters), [`FILL_BATCH`] per
/// transaction. Then brings the table to a comparable state. Returns how long the writing took.
/// With `sealed`, the payloads are sealed with the benchmark's key.
pub(super) async fn fill(db: &TestDb, total: u64, entities: u64, sealed: bool) -> Result<Duration, BoxError> {
    let outbox = if sealed { Outbox::builder().cipher(crate::sealed::cipher()).build() } else { Outbox::new() };
    let took = enqueue_spread_with(db, total, entities, FILL_BATCH, outbox).await?;
    let limit = allow_for(total, FILL_RATE);
    within(format_args!("VACUUM ANALYZE of {total} events"), limit, sqlx::raw_sql(PREPARE).execute(db.pool())).await?;
    match tokio::time::timeout(limit, sqlx::raw_sql("CHECKPOINT").execute(db.pool())).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => comment(format_args!("CHECKPOINT skipped: {e}")),
        Err(_) => return Err(format!("waited {} for a CHECKPOINT, without an answer", secs(limit)).into()),
    }
    Ok(took)
}

/// Writes `total` events over `entities` as [`fill`] does, `per_transaction` events per
/// `enqueue_many` transaction, and returns how long it took.
pub(crate) async fn enqueue_spread(
    db: &TestDb,
    total: u64,
    entities: u64,
    per_transaction: u64,
) -> Result<Duration, BoxError> {
    enqueue_spread_with(db, total, entities, per_transaction, Outbox::new()).await
}

/// [`enqueue_spread`] through `outbox`.
async fn enqueue_spread_with(
    db: &TestDb,
    total: u64,
    entities: u64,
    per_transaction: u64,
    outbox: Outbox,
) -> Result<Duration, BoxError> {
    let fillers = FILLERS.min(entities);
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(fillers)?)
        .connect_with(db.connect_options().clone())
        .await?;
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for filler in 0..fillers {
        let (pool, outbox) = (pool.clone(), outbox.clone());
        tasks.spawn(async move {
            let mut conn = pool.acquire().await?;
            let mine: Vec<u64> = (filler..total).step_by(usize::try_from(fillers)?).collect();
            for chunk in mine.chunks(usize::try_from(per_transaction)?) {
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
        });
    }
    let what = format!("{fillers} connections to commit {total} events over {entities} entities");
    let outcome = join_tasks(what, allow_for(total, FILL_RATE), tasks).await;
    // The fillers are done or aborted: their connections are back or closed.
    let _ = tokio::time::timeout(FLOOR, pool.close()).await;
    outcome?;
    Ok(start.elapsed())
}
