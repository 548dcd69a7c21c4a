//! The writers of the steady and producer parts: tasks committing one event per transaction through
//! `Outbox::enqueue` (or a few through `Outbox::enqueue_many`), each on a connection of its own, for
//! a fixed time, either as fast as they can or paced to a fixed rate, and counting what they
//! committed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use crate::error::BoxError;
use crate::producer::{commit_one, commit_several};
use crate::wait::{FLOOR, allow, join_tasks, within};

/// How the writers write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Load {
    /// Writer tasks, each with its own connection.
    pub(super) writers: u64,
    /// Entities the events go to, one drawn at random for each event (`order-1` to `order-<n>`).
    pub(super) entities: u64,
    /// Events per second offered by all writers together; `None`: each as fast as it can.
    pub(super) rate: Option<f64>,
    /// Events per transaction, each to an entity of its own draw: 1 through `Outbox::enqueue`, more
    /// through `Outbox::enqueue_many`.
    pub(super) per_transaction: u64,
    /// How long they write.
    pub(super) length: Duration,
}

/// The writers, running.
pub(super) struct Writers {
    committed: Arc<AtomicU64>,
    tasks: JoinSet<Result<(), BoxError>>,
    pool: PgPool,
    load: Load,
    /// When the writers started.
    begin: Instant,
    /// When the writers stop.
    end: Instant,
}

impl Writers {
    /// Connects the writers and starts them; they stop by themselves after `load.length`. Paced
    /// writers commit on ticks spread evenly over the period, so the load arrives as a stream, not
    /// in bursts; a tick missed by a slow commit is caught up, so the offered rate holds as long as
    /// the writers can keep up.
    pub(super) async fn start(db: &TestDb, load: Load) -> Result<Self, BoxError> {
        let connections = u32::try_from(load.writers)?;
        let connect = PgPoolOptions::new()
            .max_connections(connections)
            .min_connections(connections)
            .connect_with(db.connect_options().clone());
        let pool = within(format_args!("{connections} writer connections"), FLOOR, connect).await?;
        let begin = Instant::now();
        let end = begin + load.length;
        let committed = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        for writer in 0..load.writers {
            let per_transaction = load.per_transaction.max(1);
            let period = load.rate.map(|rate| Duration::from_secs_f64((load.writers * per_transaction) as f64 / rate));
            let start = begin + period.unwrap_or_default().mul_f64(writer as f64 / load.writers as f64);
            let (pool, committed) = (pool.clone(), committed.clone());
            let draw = Draw { entities: load.entities, per_transaction, writer };
            tasks.spawn(write(pool, committed, draw, start, period, end));
        }
        Ok(Self { committed, tasks, pool, load, begin, end })
    }

    /// When the writers started: the start of the run.
    pub(super) fn start_time(&self) -> Instant {
        self.begin
    }

    /// When the writers stop: the end of the run.
    pub(super) fn end_time(&self) -> Instant {
        self.end
    }

    /// Events committed so far.
    pub(super) fn committed(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    /// Fails if a writer has ended before its time, or failed.
    pub(super) fn check(&mut self) -> Result<(), BoxError> {
        let Some(ended) = self.tasks.try_join_next() else { return Ok(()) };
        match ended {
            Ok(Ok(())) if Instant::now() >= self.end => Ok(()),
            Ok(Ok(())) => Err("a writer ended early".into()),
            Ok(Err(e)) => Err(format!("a writer failed: {e}").into()),
            Err(e) => Err(format!("a writer failed: {e}").into()),
        }
    }

    /// Waits for the writers to stop (they are late after several times their length) and closes
    /// their connections; returns the events committed.
    pub(super) async fn finish(self) -> Result<u64, BoxError> {
        let what = format!("{} writers to stop after {:?}", self.load.writers, self.load.length);
        let limit = allow(self.end.saturating_duration_since(Instant::now()));
        let joined = join_tasks(what, limit, self.tasks).await;
        // The writers are done or aborted: their connections are back or closed.
        let _ = tokio::time::timeout(FLOOR, self.pool.close()).await;
        joined?;
        Ok(self.committed.load(Ordering::Relaxed))
    }
}

/// What one writer's transactions hold.
#[derive(Debug, Clone, Copy)]
struct Draw {
    /// Entities drawn from.
    entities: u64,
    /// Events per transaction.
    per_transaction: u64,
    /// The writer's number, its random seed.
    writer: u64,
}

/// One writer: from `start` until `end`, one transaction of `draw.per_transaction` events, each to
/// a random entity, on every tick of `period` if given, else back to back.
async fn write(
    pool: PgPool,
    committed: Arc<AtomicU64>,
    draw: Draw,
    start: Instant,
    period: Option<Duration>,
    end: Instant,
) -> Result<(), BoxError> {
    let outbox = Outbox::new();
    let mut conn = pool.acquire().await?;
    let mut rng = SmallRng::seed_from_u64(draw.writer);
    let mut ticks = period.map(|p| {
        let mut ticks = tokio::time::interval_at(start, p);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
        ticks
    });
    loop {
        if let Some(ticks) = &mut ticks {
            ticks.tick().await;
        }
        if Instant::now() >= end {
            return Ok(());
        }
        if draw.per_transaction == 1 {
            let order = i64::try_from(rng.random_range(1..=draw.entities))?;
            commit_one(&mut conn, &outbox, order).await?;
        } else {
            let orders = (0..draw.per_transaction).map(|_| rng.random_range(1..=draw.entities));
            commit_several(&mut conn, &outbox, orders.map(i64::try_from).collect::<Result<_, _>>()?).await?;
        }
        committed.fetch_add(draw.per_transaction, Ordering::Relaxed);
    }
}
