//! A small producer: each business change and its event are written in one transaction.
//!
//! Run: `cargo run -p producer-basic`
//!
//! Environment (optional): `DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/outbox_example_producer` (the database is created if
//! missing). It creates the outbox tables and its own table `basic_orders`, places two orders and
//! changes them (one change rolls back, so its event never exists), and prints the events this run
//! stored. Run it as often as you like, also several at once: each run works on new orders.

use std::collections::HashMap;
use std::process::ExitCode;

use outbox_producer::Outbox;
use outbox_types::{EventId, NewEvent};
use serde::Serialize;
use sqlx::migrate::MigrateDatabase;
use sqlx::{PgPool, Postgres};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The key of the advisory lock that serialises the set-up across processes (ASCII "basicord").
const SETUP_LOCK: i64 = 0x6261_7369_636f_7264;

#[derive(Serialize)]
struct OrderChanged<'a> {
    order_id: i64,
    status: &'a str,
    total_cents: i64,
}

/// Creates the database of `url` unless it exists; a database created meanwhile by another
/// process is fine.
async fn create_database_if_missing(url: &str) -> Result<(), sqlx::Error> {
    if Postgres::database_exists(url).await? {
        return Ok(());
    }
    match Postgres::create_database(url).await {
        // 42P04 duplicate_database; 23505 when the other CREATE DATABASE had not committed yet.
        Err(sqlx::Error::Database(e)) if matches!(e.code().as_deref(), Some("42P04" | "23505")) => Ok(()),
        other => other,
    }
}

/// Creates the outbox tables and `basic_orders`, holding an advisory lock so that processes
/// starting at once do not trip over each other's `CREATE TABLE`.
async fn set_up(pool: &PgPool) -> Result<(), BoxError> {
    // A connection of its own, closed afterwards: the lock is released even if the set-up fails.
    let mut lock = pool.acquire().await?.detach();
    sqlx::query("SELECT pg_advisory_lock($1)").bind(SETUP_LOCK).execute(&mut lock).await?;
    let result = set_up_locked(pool).await;
    let _ = sqlx::Connection::close(lock).await;
    result
}

async fn set_up_locked(pool: &PgPool) -> Result<(), BoxError> {
    outbox_producer::migrate(pool).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS basic_orders (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, status text NOT NULL, total_cents bigint NOT NULL)",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The event of a change of order `id`, ordered per order by its entity key `order-<id>`.
fn order_changed(id: i64, status: &str, total: i64) -> Result<NewEvent, BoxError> {
    Ok(NewEvent::json("order.changed", &OrderChanged { order_id: id, status, total_cents: total })?
        .entity(format!("order-{id}"))
        .correlation_id(format!("example-{id}-{status}")))
}

/// Places a new order and enqueues its event, in one transaction. Returns the order's id and the
/// event's id.
async fn place_order(pool: &PgPool, outbox: &Outbox, total: i64) -> Result<(i64, EventId), BoxError> {
    let mut tx = pool.begin().await?;
    let id: i64 =
        sqlx::query_scalar("INSERT INTO basic_orders (status, total_cents) VALUES ('placed', $1) RETURNING id")
            .bind(total)
            .fetch_one(&mut *tx)
            .await?;
    let event_id = outbox.enqueue(&mut *tx, order_changed(id, "placed", total)?).await?;
    tx.commit().await?;
    Ok((id, event_id))
}

/// Changes the status of order `id` and enqueues its event, in one transaction; commits only if
/// `commit`. Returns the event's id.
async fn change_order(
    pool: &PgPool,
    outbox: &Outbox,
    id: i64,
    status: &str,
    commit: bool,
) -> Result<EventId, BoxError> {
    let mut tx = pool.begin().await?;
    let total: i64 = sqlx::query_scalar("UPDATE basic_orders SET status = $2 WHERE id = $1 RETURNING total_cents")
        .bind(id)
        .bind(status)
        .fetch_one(&mut *tx)
        .await?;
    let event_id = outbox.enqueue(&mut *tx, order_changed(id, status, total)?).await?;
    if commit {
        tx.commit().await?;
    } else {
        tx.rollback().await?;
    }
    Ok(event_id)
}

/// One stored event: its id, type, entity key, sequence number and status.
type Row = (uuid::Uuid, String, Option<String>, Option<i64>, String);

/// Prints the events of `ids` in the order they were written and checks them: every committed
/// event stored, the rolled-back one absent, and each order's sequence numbers consecutive.
async fn show_and_check(pool: &PgPool, committed: &[EventId], rolled_back: EventId) -> Result<(), BoxError> {
    let ids: Vec<uuid::Uuid> = committed.iter().chain([&rolled_back]).map(|id| *id.as_uuid()).collect();
    let rows: Vec<Row> =
        sqlx::query_as("SELECT id, event_type, entity_key, seq, status FROM outbox_events WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(pool)
            .await?;
    let by_id: HashMap<uuid::Uuid, &Row> = rows.iter().map(|r| (r.0, r)).collect();
    println!("{:<38} {:<14} {:<14} {:>4} status", "event id", "type", "entity", "seq");
    let mut last_seq: HashMap<&str, i64> = HashMap::new();
    for id in committed {
        let Some((id, event_type, entity, seq, status)) = by_id.get(id.as_uuid()) else {
            return Err(format!("event {id} was committed but is not in the outbox").into());
        };
        let (entity, seq) = (entity.as_deref().unwrap_or("-"), seq.unwrap_or(0));
        println!("{id:<38} {event_type:<14} {entity:<14} {seq:>4} {status}");
        if let Some(previous) = last_seq.insert(entity, seq)
            && seq != previous + 1
        {
            return Err(format!("{entity}: sequence {seq} follows {previous}").into());
        }
    }
    if by_id.contains_key(rolled_back.as_uuid()) {
        return Err(format!("event {rolled_back} was rolled back but is in the outbox").into());
    }
    Ok(())
}

async fn run() -> Result<(), BoxError> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/outbox_example_producer".to_owned());
    create_database_if_missing(&url).await?;
    let pool = PgPool::connect(&url).await?;
    set_up(&pool).await?;

    let outbox = Outbox::new();
    let (a, placed_a) = place_order(&pool, &outbox, 1999).await?;
    let (b, placed_b) = place_order(&pool, &outbox, 4500).await?;
    let paid_a = change_order(&pool, &outbox, a, "paid", true).await?;
    let cancelled_b = change_order(&pool, &outbox, b, "cancelled", false).await?; // rolled back: no event
    let shipped_a = change_order(&pool, &outbox, a, "shipped", true).await?;

    show_and_check(&pool, &[placed_a, placed_b, paid_a, shipped_a], cancelled_b).await?;
    println!("4 events stored for 5 changes (the rolled-back change left none); sequences are gapless per order.");
    pool.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    // Errors are shown with their message only (`Display`): a database error's `Debug` form
    // carries PostgreSQL's DETAIL, which can quote a row.
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("producer-basic: {e}");
            ExitCode::FAILURE
        }
    }
}
