//! A consumer process for the chaos soak (`tests/system/chaos.rs`): an `InboxRunner` whose handler
//! records each applied event in the business table `chaos_effects`, in the inbox's transaction.
//!
//! ```text
//! DATABASE_URL=postgres://... AMQP_URL=amqp://... CHAOS_NAME=consumer-1 CHAOS_QUEUE=q \
//!   [CHAOS_CONSUMER=chaos] [CHAOS_STATS_MS=200] outbox-chaos-consumer
//! ```
//!
//! - SIGTERM: graceful shutdown (deliveries in hand finish and are acked), exit 0.
//! - SIGUSR1: a second runner joins on the same queue with the crash point
//!   `AfterCommitBeforeAck` armed; the first delivery it commits kills the whole process before
//!   the ack (exit code 3), as if it died between the two.
//! - Every `CHAOS_STATS_MS` the runner's counts go to stdout as one line:
//!   `stats applied=.. duplicates=.. stale=.. parked=.. retried=.. dead_lettered=..`.
//!
//! The table is created by the soak: `chaos_effects (n bigserial, event_id uuid, entity text,
//! seq bigint, version bigint)`, deliberately without a unique key so that an effect applied twice
//! shows as two rows.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use outbox_inbox::{CrashPoint, HandlerError, InboxLayer, InboxRequest, InboxRunner, RunnerStats};
use outbox_types::RetryPolicy;
use tower::Layer;

#[path = "../chaos_env.rs"]
mod chaos_env;

use chaos_env::{ProcessError, millis, required};

/// Exit code of a process killed at the crash point.
const CRASHED: i32 = 3;

/// The business effect: one row per applied event.
async fn apply(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let event = req.event();
    let entity = event.entity.as_ref().ok_or_else(|| HandlerError::permanent("unordered event"))?;
    let (id, key, seq) = (*event.id.as_uuid(), entity.key.clone(), entity.seq as i64);
    let body: serde_json::Value = event.payload.json().map_err(|_| HandlerError::permanent("payload is not JSON"))?;
    sqlx::query("INSERT INTO chaos_effects (event_id, entity, seq, version) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(key)
        .bind(seq)
        .bind(body["version"].as_i64())
        .execute(req.conn())
        .await?;
    Ok(req)
}

fn print_stats(s: RunnerStats) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "stats applied={} duplicates={} stale={} parked={} retried={} dead_lettered={}",
        s.applied, s.duplicates, s.stale, s.parked, s.retried, s.dead_lettered
    );
    let _ = out.flush();
}

async fn run() -> Result<(), ProcessError> {
    use tokio::signal::unix::{SignalKind, signal};
    let name = required("CHAOS_NAME")?;
    let url = required("AMQP_URL")?;
    let queue = required("CHAOS_QUEUE")?;
    let consumer = std::env::var("CHAOS_CONSUMER").unwrap_or_else(|_| "chaos".to_owned());
    let pool =
        sqlx::postgres::PgPoolOptions::new().max_connections(10).connect_lazy_with(chaos_env::connect_options(&name)?);
    let service = InboxLayer::new(pool, consumer).layer(tower::service_fn(apply));
    // Terminated backends and cut connections fail deliveries transiently; retry them quickly
    // and long enough that chaos never dead-letters one.
    let retry = RetryPolicy::default()
        .initial_delay(Duration::from_millis(50))
        .max_delay(Duration::from_secs(1))
        .max_attempts(100);
    let runner = InboxRunner::builder(url.clone(), service.clone())
        .connection_name(name.clone())
        .queue(queue.clone())
        .prefetch(64)
        .concurrency(8)
        .retry_policy(retry)
        .sweep_interval(Duration::from_millis(500))
        .build()?
        .spawn();

    let mut arm = signal(SignalKind::user_defined1())?;
    let mut stats = tokio::time::interval(millis("CHAOS_STATS_MS", 200)?);
    let terminated = chaos_env::terminated()?;
    tokio::pin!(terminated);
    let mut armed = false;
    loop {
        tokio::select! {
            () = &mut terminated => {
                let last = runner.stats();
                runner.shutdown().await?;
                print_stats(last);
                return Ok(());
            }
            _ = arm.recv(), if !armed => {
                armed = true;
                let doomed = InboxRunner::builder(url.clone(), service.clone())
                    .connection_name(format!("{name}-armed"))
                    .queue(queue.clone())
                    .prefetch(1)
                    .concurrency(1)
                    .crash_at(CrashPoint::AfterCommitBeforeAck)
                    .build()?
                    .spawn();
                tokio::spawn(async move {
                    if doomed.join().await.is_err() {
                        // The delivery it committed is not acked: die now, with every other
                        // delivery in hand, as the whole process would.
                        std::process::exit(CRASHED);
                    }
                });
            }
            _ = stats.tick() => print_stats(runner.stats()),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    chaos_env::init_logging();
    chaos_env::exit_code(run().await)
}
