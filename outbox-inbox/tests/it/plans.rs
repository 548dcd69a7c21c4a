//! The inbox's statements keep plans made on a nearly empty table: those plans must still read
//! only the rows of the entity at hand once the consumer's history has grown.

use outbox_testkit::{TestDb, rows_fetched};
use sqlx::{Connection, PgConnection};

/// Events of other entities the consumer applied after the plans were made.
const HISTORY: i64 = 20_000;
/// Events of other entities, with long keys, applied before: they make the index of entity
/// positions larger than the primary key while the table is still small, the state in which a plan
/// chose to read the consumer's events through the primary key and sort them.
const FIRST: i64 = 200;
/// Inserts `n` processed events of consumer `c` over 100 other entities with keys of 300 bytes.
const OTHERS: &str = "INSERT INTO inbox_events (consumer, event_id, entity_key, seq, status, attempts, processed_at) \
                      SELECT 'c', gen_random_uuid(), 'other-' || repeat('x', 300) || (n % 100), n / 100 + 1, \
                             'processed', 1, now() \
                      FROM generate_series($2, $1 + $2 - 1) n";

/// Locks `entity` of consumer `c` in a transaction of its own; returns its last applied sequence
/// and the rows of `inbox_events` the lock read.
async fn lock(conn: &mut PgConnection, entity: &str) -> (i64, i64) {
    let mut tx = conn.begin().await.expect("begin");
    let before = rows_fetched(&mut tx, "inbox_events").await.expect("rows fetched");
    let last: i64 = sqlx::query_scalar("SELECT inbox_lock_entity('c', $1, 0)")
        .bind(entity)
        .fetch_one(&mut *tx)
        .await
        .expect("lock entity");
    let read = rows_fetched(&mut tx, "inbox_events").await.expect("rows fetched") - before;
    tx.commit().await.expect("commit");
    (last, read)
}

#[tokio::test]
async fn an_entity_locked_on_a_nearly_empty_table_reads_only_its_own_events_once_the_history_grew() {
    let db = TestDb::new().await.expect("db");
    let mut conn = PgConnection::connect_with(db.connect_options()).await.expect("connect");
    sqlx::query(OTHERS).bind(FIRST).bind(0_i64).execute(db.pool()).await.expect("first events");
    // Enough calls for PL/pgSQL to settle on a plan while the table is small and never analyzed.
    for _ in 0..8 {
        assert_eq!(lock(&mut conn, "order-1").await.0, 0);
    }
    sqlx::query(OTHERS).bind(HISTORY).bind(FIRST).execute(db.pool()).await.expect("history");
    let mine = "INSERT INTO inbox_events (consumer, event_id, entity_key, seq, status, attempts, processed_at) \
                SELECT 'c', gen_random_uuid(), 'order-1', n, 'processed', 1, now() FROM generate_series(1, 3) n";
    sqlx::query(mine).execute(db.pool()).await.expect("the entity's events");

    let (last, read) = lock(&mut conn, "order-1").await;
    assert_eq!(last, 3, "the entity's last applied event");
    assert!(read <= 10, "the lock read {read} rows of inbox_events for one entity, history {HISTORY}");
    conn.close().await.expect("close");
    db.close().await.expect("cleanup");
}
