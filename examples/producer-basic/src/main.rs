//! A small producer: each business change and its event are written in one transaction.
//!
//! Run: `cargo run -p producer-basic`
//!
//! Environment: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/outbox_example`; the
//! database is created if it does not exist). It migrates the outbox tables, places and updates a
//! few orders (one change rolls back, so its event never exists), and prints what the outbox holds.

use outbox_core::NewEvent;
use outbox_producer::Outbox;
use serde::Serialize;
use sqlx::migrate::MigrateDatabase;
use sqlx::{PgPool, Postgres};

#[derive(Serialize)]
struct OrderChanged<'a> {
    order_id: i64,
    status: &'a str,
    total_cents: i64,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Writes the business change and its event in one transaction; commits only if `commit`.
async fn change_order(
    pool: &PgPool,
    outbox: &Outbox,
    id: i64,
    status: &str,
    total: i64,
    commit: bool,
) -> Result<(), BoxError> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO orders (id, status, total_cents) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, total_cents = EXCLUDED.total_cents",
    )
    .bind(id)
    .bind(status)
    .bind(total)
    .execute(&mut *tx)
    .await?;
    let event = NewEvent::json("order.changed", &OrderChanged { order_id: id, status, total_cents: total })?
        .entity(format!("order-{id}"))
        .correlation_id(format!("example-{id}-{status}"));
    outbox.enqueue(&mut *tx, event).await?;
    if commit {
        tx.commit().await?;
    } else {
        tx.rollback().await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/outbox_example".to_owned());
    if !Postgres::database_exists(&url).await? {
        Postgres::create_database(&url).await?;
    }
    let pool = PgPool::connect(&url).await?;
    outbox_producer::migrate(&pool).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL, total_cents bigint NOT NULL)",
    )
    .execute(&pool)
    .await?;

    let outbox = Outbox::new();
    let run: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM orders").fetch_one(&pool).await?;
    let (a, b) = (run + 1, run + 2);
    change_order(&pool, &outbox, a, "placed", 1999, true).await?;
    change_order(&pool, &outbox, b, "placed", 4500, true).await?;
    change_order(&pool, &outbox, a, "paid", 1999, true).await?;
    change_order(&pool, &outbox, b, "cancelled", 4500, false).await?; // rolled back: no event
    change_order(&pool, &outbox, a, "shipped", 1999, true).await?;

    type Row = (uuid::Uuid, String, Option<String>, Option<i64>, String);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, event_type, entity_key, seq, status FROM outbox_events
         WHERE entity_key = ANY($1) ORDER BY entity_key, seq",
    )
    .bind(vec![format!("order-{a}"), format!("order-{b}")])
    .fetch_all(&pool)
    .await?;
    println!("{:<38} {:<14} {:<14} {:>4} status", "event id", "type", "entity", "seq");
    for (id, event_type, entity, seq, status) in &rows {
        println!("{id:<38} {event_type:<14} {:<14} {:>4} {status}", entity.as_deref().unwrap_or("-"), seq.unwrap_or(0));
    }
    let expected =
        [(format!("order-{a}"), 1), (format!("order-{a}"), 2), (format!("order-{a}"), 3), (format!("order-{b}"), 1)];
    let got: Vec<(String, i64)> = rows.iter().map(|r| (r.2.clone().unwrap_or_default(), r.3.unwrap_or(0))).collect();
    if got != expected {
        return Err(format!("unexpected outbox content: {got:?}").into());
    }
    println!("4 events stored for 5 changes (the rolled-back change left none); sequences are gapless per order.");
    pool.close().await;
    Ok(())
}
