//! Phase 6, end to end: producers, the relay and the consumer running together on one database
//! server and one broker, from the first commit to the last effect.
//!
//! In a fresh database with `shipments`: a relay process with default settings publishing to the
//! benchmark exchange, and a consumer process as in phase 2 on the benchmark queue, both started
//! first; then the producers write the plan's events over its entities ([`enqueue_spread`], four
//! connections, [`PER_TRANSACTION`] events per transaction, as fast as they can). The clock starts
//! before the first commit. The relay's rate is the events over the time until no row is pending;
//! the end-to-end rate is the events over the time until the consumer applied every one of them.
//! Then the same checks as phase 3.

use std::time::Duration;

use tokio::time::Instant;

use super::inbox::{await_handled, spawn_consumer};
use super::plan::Plan;
use super::shipments::CREATE_SHIPMENTS;
use super::target::Target;
use super::verify::{check_stats, verify};
use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::comment;
use crate::process::Subprocess;
use crate::relay::{ANY_PENDING, enqueue_spread};
use crate::wait::{FLOOR, Progress, until_then, within};

/// Events per producer transaction: a steady stream rather than a backlog.
const PER_TRANSACTION: u64 = 100;
/// The rows the relay has not published yet, counted when waiting for it gives up.
const COUNT_PENDING: &str = "SELECT count(*) FROM outbox_events WHERE status = 'pending'";

/// What the end-to-end phase measured, in events per second from the first commit.
#[derive(Debug, Clone, Copy)]
pub(super) struct EndToEnd {
    /// Until the producers committed every event.
    pub(super) produced: f64,
    /// Until the relay published every event.
    pub(super) relayed: f64,
    /// Until the consumer applied every event.
    pub(super) applied: f64,
}

/// Runs the phase in a database of its own.
pub(super) async fn end_to_end(target: Target<'_>, plan: Plan) -> Result<EndToEnd, BoxError> {
    with_db(async |db| {
        within("the table shipments", FLOOR, sqlx::raw_sql(CREATE_SHIPMENTS).execute(db.pool())).await?;
        let relay_args = ["relay-process", "--exchange", target.exchange];
        let mut relay = Subprocess::spawn("the relay process", &relay_args, &db.url(), target.url).await?;
        let consumer = spawn_consumer(&db.url(), target.url, target.queue).await;
        let mut consumer = match consumer {
            Ok(c) => c,
            Err(e) => {
                let _ = relay.stop().await;
                return Err(e);
            }
        };
        let outcome = async {
            let start = Instant::now();
            let producing = enqueue_spread(db, plan.events, plan.entities, PER_TRANSACTION);
            // The relay is done once the producers are and nothing is pending.
            let produced = producing.await?;
            let what = format!("the relay process to publish {} events", plan.events);
            let relayed = until_then(
                what,
                plan.limit.saturating_sub(start.elapsed()),
                Duration::from_millis(20),
                async || {
                    if !sqlx::query_scalar::<_, bool>(ANY_PENDING).fetch_one(db.pool()).await? {
                        return Ok(Progress::Done(start.elapsed()));
                    }
                    relay.check_alive()?;
                    Ok(Progress::Waiting("the relay process running".to_owned()))
                },
                async |seen| match sqlx::query_scalar::<_, i64>(COUNT_PENDING).fetch_one(db.pool()).await {
                    Ok(pending) => format!("{pending} rows still pending, {seen}"),
                    Err(e) => format!("{seen}; the pending rows could not be counted: {e}"),
                },
            )
            .await?;
            let (applied, stats) = await_handled(&mut consumer, plan.events, start, plan.limit).await?;
            comment(format_args!(
                "end to end: produced in {:.3} s, published by {:.3} s, applied by {:.3} s: {stats:?}",
                produced.as_secs_f64(),
                relayed.as_secs_f64(),
                applied.as_secs_f64()
            ));
            check_stats(&stats, plan.events, 0)?;
            verify(db.pool(), plan).await?;
            let rate = |d: Duration| plan.events as f64 / d.as_secs_f64();
            Ok::<_, BoxError>(EndToEnd { produced: rate(produced), relayed: rate(relayed), applied: rate(applied) })
        }
        .await;
        let stopped = (consumer.stop().await, relay.stop().await);
        let measured = outcome?;
        stopped.0?;
        stopped.1?;
        Ok(measured)
    })
    .await
}
