//! The enqueue's statements keep plans made on a nearly empty table: those plans must still read
//! only the rows of the entity at hand once the outbox's history has grown.

use outbox_testkit::{TestDb, rows_fetched};
use sqlx::{Connection, PgConnection};

/// Events of other entities written after the plans were made.
const HISTORY: i64 = 20_000;
/// Events of other entities, with long keys, written before: they make the index of entity
/// sequences larger than the primary key while the table is still small.
const FIRST: i64 = 200;
/// Inserts `n` published events over 100 other entities with keys of 200 bytes.
const OTHERS: &str = "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type, \
                                                  status, published_at) \
                      SELECT gen_random_uuid(), 'order.changed', 1, 'other-' || repeat('x', 200) || (n % 100), \
                             n / 100 + 1, '\\x00', 'application/json', 'published', now() \
                      FROM generate_series($2, $1 + $2 - 1) n";

/// Draws the next sequence of `entity` in a transaction of its own (rolled back); returns it and
/// the rows of `outbox_events` the draw read.
async fn next_seq(conn: &mut PgConnection, entity: &str) -> (i64, i64) {
    let mut tx = conn.begin().await.expect("begin");
    let before = rows_fetched(&mut tx, "outbox_events").await.expect("rows fetched");
    let seq: i64 =
        sqlx::query_scalar("SELECT outbox_next_seq($1)").bind(entity).fetch_one(&mut *tx).await.expect("next seq");
    let read = rows_fetched(&mut tx, "outbox_events").await.expect("rows fetched") - before;
    tx.rollback().await.expect("rollback");
    (seq, read)
}

#[tokio::test]
async fn a_sequence_drawn_on_a_nearly_empty_table_reads_only_its_entity_once_the_history_grew() {
    let db = TestDb::new().await.expect("db");
    let mut conn = PgConnection::connect_with(db.connect_options()).await.expect("connect");
    sqlx::query(OTHERS).bind(FIRST).bind(0_i64).execute(db.pool()).await.expect("first events");
    // Enough calls for PL/pgSQL to settle on a plan while the table is small and never analyzed.
    for _ in 0..8 {
        assert_eq!(next_seq(&mut conn, "order-1").await.0, 1);
    }
    sqlx::query(OTHERS).bind(HISTORY).bind(FIRST).execute(db.pool()).await.expect("history");

    let mine = "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type) \
                SELECT gen_random_uuid(), 'order.changed', 1, 'order-1', n, '\\x00', 'application/json' \
                FROM generate_series(1, 3) n";
    sqlx::query(mine).execute(db.pool()).await.expect("the entity's events");

    let (seq, read) = next_seq(&mut conn, "order-1").await;
    assert_eq!(seq, 4, "the entity's next sequence");
    assert!(read <= 10, "the draw read {read} rows of outbox_events for one entity, history {HISTORY}");
    conn.close().await.expect("close");
    db.close().await.expect("cleanup");
}
