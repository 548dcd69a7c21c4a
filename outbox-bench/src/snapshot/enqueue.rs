//! Part 3, the producer: how many transactions of one `Outbox::enqueue` each [`WRITERS`] writers
//! commit on 10 hot entities and on 1,000, free and with a snapshot held, at the end of a long run.
//! Each enqueue increments its entity's counter in `outbox_entity_sequences`; with the snapshot held
//! no version of a counter row can be pruned, so every increment walks a chain that grows for as
//! long as the snapshot stays.

use outbox_testkit::TestDb;

use super::compare::free_and_held;
use super::plan::Plan;
use super::series::sample;
use super::writers::{Load, Writers};
use crate::error::BoxError;
use crate::figure::comment;

/// Concurrent writers, as in the producer benchmark.
const WRITERS: u64 = 8;

/// Runs the part and prints `snapshot_enqueue_{hot,many}_{free,held,ratio}`: transactions per
/// second over the last window of each run ([`Plan::window`]).
pub(super) async fn enqueue(plan: Plan) -> Result<(), BoxError> {
    comment(format_args!(
        "producer: {WRITERS} writers, one Outbox::enqueue per transaction (no business write), each to a random \
         entity of the set, for {:?}; the rate over the last {:?}",
        plan.load,
        plan.window()
    ));
    free_and_held("enqueue", "tps", async |db, entities, label| write(db, plan, entities, label).await).await
}

/// One run: the writers for [`Plan::load`] over `entities`, sampled; the rate over the last window.
async fn write(db: &TestDb, plan: Plan, entities: u64, label: &str) -> Result<f64, BoxError> {
    let load = Load { writers: WRITERS, entities, rate: None, per_transaction: 1, length: plan.load };
    let mut writers = Writers::start(db, load).await?;
    let start = writers.start_time();
    let sampled = sample(label, "events", plan, start, async || {
        writers.check()?;
        Ok(writers.committed())
    })
    .await;
    let finished = writers.finish().await;
    let series = sampled?;
    let committed = finished?;
    comment(format_args!("{label}: {committed} transactions committed in {:?}", plan.load));
    Ok(series.figure(label, "tps", plan))
}
