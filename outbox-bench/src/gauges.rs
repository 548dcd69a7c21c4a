//! `outbox-bench gauges`: what the backlog query behind the relays' gauges and `outbox status`
//! ([`outbox_ops::admin::backlog`]) costs on a big table, in the two shapes that matter: a
//! large backlog (1,000,000 pending rows over 1,000 entities) and a long history (10,000,000
//! published rows and 1,000 pending). Target: at most 50 ms each.
//!
//! The rows are written by one `INSERT ... SELECT` each, as `enqueue` would have written them
//! (entity keys, gapless sequences, the per-entity counters), then the table is vacuumed and
//! analyzed, as autovacuum would have left it.

use std::time::{Duration, Instant};

use outbox_ops::admin;
use outbox_testkit::TestDb;

use crate::db::with_db;
use crate::error::BoxError;
use crate::figure::{Value, comment, figure};
use crate::wait::{FLOOR, allow_for, within};

/// Entities the rows are spread over.
const ENTITIES: i64 = 1_000;
/// Timed reads of the backlog, after one warm-up; the median is the figure.
const READS: usize = 9;

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pending: i64,
    published: i64,
    pending_after_published: i64,
}

impl Plan {
    pub(crate) fn new(quick: bool) -> Self {
        if quick {
            Self { pending: 100_000, published: 1_000_000, pending_after_published: 1_000 }
        } else {
            Self { pending: 1_000_000, published: 10_000_000, pending_after_published: 1_000 }
        }
    }
}

/// Writes `rows` events with status `status` after those already there: event `i` belongs to
/// entity `i % ENTITIES`, sequences continue each entity's counter.
const FILL: &str = "\
WITH base AS (SELECT COALESCE(max(last_seq), 0) AS seq FROM outbox_entity_sequences)
INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type, status, published_at)
SELECT gen_random_uuid(), 'order.changed', 1, 'order-' || (i % $2), base.seq + i / $2 + 1,
       convert_to('{\"order_id\":' || (i % $2) || ',\"status\":\"confirmed\"}', 'UTF8'), 'application/json',
       $3, CASE WHEN $3 = 'published' THEN now() END
FROM base, generate_series(0, $1 - 1) AS i";

const COUNTERS: &str = "\
INSERT INTO outbox_entity_sequences (entity_key, last_seq)
SELECT entity_key, max(seq) FROM outbox_events GROUP BY entity_key
ON CONFLICT (entity_key) DO UPDATE SET last_seq = excluded.last_seq";

/// Rows per second that writing them, and vacuuming them, still reach on a slow, busy host, for
/// their deadlines.
const FILL_RATE: u64 = 20_000;

async fn fill(db: &TestDb, rows: i64, status: &str) -> Result<(), BoxError> {
    let started = Instant::now();
    let limit = allow_for(u64::try_from(rows)?, FILL_RATE);
    let write = async {
        sqlx::query(FILL).bind(rows).bind(ENTITIES).bind(status).execute(db.pool()).await?;
        sqlx::query(COUNTERS).execute(db.pool()).await?;
        sqlx::raw_sql("VACUUM ANALYZE outbox_events, outbox_entity_sequences").execute(db.pool()).await
    };
    within(format_args!("{rows} {status} rows written and vacuumed"), limit, write).await?;
    comment(format_args!("wrote {rows} {status} rows in {:.1} s", started.elapsed().as_secs_f64()));
    Ok(())
}

/// The median time of [`READS`] reads of the backlog, after a warm-up; checks the read's answer.
/// Each read may take [`FLOOR`].
async fn time_backlog(db: &TestDb, expect_waiting: i64) -> Result<Duration, BoxError> {
    let first = within("a read of the backlog", FLOOR, admin::backlog(db.pool())).await?;
    if !first.waiting_exact && first.waiting < expect_waiting / 2
        || first.waiting_exact && first.waiting != expect_waiting
    {
        return Err(format!("the backlog read {} waiting rows, {expect_waiting} were written", first.waiting).into());
    }
    comment(format_args!("backlog: {first:?}"));
    let mut took = Vec::with_capacity(READS);
    for _ in 0..READS {
        let started = Instant::now();
        within("a read of the backlog", FLOOR, admin::backlog(db.pool())).await?;
        took.push(started.elapsed());
    }
    took.sort();
    comment(format_args!("reads: min {:?}, max {:?}", took[0], took[READS - 1]));
    Ok(took[READS / 2])
}

/// The median time of [`READS`] runs of what `outbox status` reads of the outbox (the backlog and
/// the activity: published in the last minute and hour, claims by relay), after a warm-up.
/// Each read may take [`FLOOR`].
async fn time_status(db: &TestDb) -> Result<Duration, BoxError> {
    let mut conn = within("a connection", FLOOR, db.pool().acquire()).await?;
    within("a read of the activity", FLOOR, admin::activity(&mut conn)).await?;
    let mut took = Vec::with_capacity(READS);
    for _ in 0..READS {
        let started = Instant::now();
        let read = async {
            admin::backlog(&mut *conn).await?;
            admin::activity(&mut conn).await
        };
        within("a read of the backlog and the activity", FLOOR, read).await?;
        took.push(started.elapsed());
    }
    took.sort();
    Ok(took[READS / 2])
}

/// Runs the benchmark: prints `gauge_query_ms_1m_pending`, `gauge_query_ms_10m_published` and the
/// same for everything `outbox status` reads of the outbox (`status_query_ms_*`).
pub(crate) async fn run(plan: Plan) -> Result<(), BoxError> {
    comment("target: gauge_query_ms_1m_pending <= 50, gauge_query_ms_10m_published <= 50");
    let (pending, status) = with_db(async |db| {
        crate::machine::describe(db.pool()).await;
        fill(db, plan.pending, "pending").await?;
        Ok((time_backlog(db, plan.pending).await?, time_status(db).await?))
    })
    .await?;
    figure("gauge_query_ms_1m_pending", Value::Millis(pending.as_secs_f64() * 1e3), "ms");
    figure("status_query_ms_1m_pending", Value::Millis(status.as_secs_f64() * 1e3), "ms");

    let (history, status) = with_db(async |db| {
        fill(db, plan.published, "published").await?;
        fill(db, plan.pending_after_published, "pending").await?;
        Ok((time_backlog(db, plan.pending_after_published).await?, time_status(db).await?))
    })
    .await?;
    figure("gauge_query_ms_10m_published", Value::Millis(history.as_secs_f64() * 1e3), "ms");
    comment(
        "status_query_ms_10m_published: every published row is from the last hour, so the hour's count stops at its cap",
    );
    figure("status_query_ms_10m_published", Value::Millis(status.as_secs_f64() * 1e3), "ms");
    Ok(())
}
