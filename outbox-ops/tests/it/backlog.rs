//! The backlog read from a queue position on, against the real PostgreSQL: it counts what waits at
//! or after the position and every held row wherever it is, as a read from the front does, and
//! walks none of the queue index's entries below the position (which a held snapshot keeps there).

use outbox_ops::admin;
use outbox_producer::Outbox;
use outbox_testkit::{SnapshotHolder, TestDb};
use outbox_types::NewEvent;
use sqlx::{PgConnection, PgPool};

const EVENTS: i64 = 2_000;
const PUBLISHED: i64 = 1_500;

/// `EVENTS` events in position order, each of an entity of its own but the 10th, the second event
/// of the 9th's entity.
async fn enqueue(pool: &PgPool) {
    let mut tx = pool.begin().await.expect("begin");
    let entity = |i: i64| format!("e{:05}", if i == 9 { 8 } else { i });
    let events = (0..EVENTS).map(|i| NewEvent::json("t", &i).expect("json").entity(entity(i)));
    Outbox::new().enqueue_many(&mut *tx, events).await.expect("enqueue");
    tx.commit().await.expect("commit");
}

/// The position of the `n`-th event (from 1) in queue order.
async fn position(pool: &PgPool, n: i64) -> i64 {
    sqlx::query_scalar("SELECT position FROM outbox_events ORDER BY position OFFSET $1 LIMIT 1")
        .bind(n - 1)
        .fetch_one(pool)
        .await
        .expect("position")
}

/// Entries of the pending rows' queue index the connection's transaction has read so far.
async fn queue_entries_read(conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT pg_stat_get_xact_tuples_returned('outbox_events_queue'::regclass)")
        .fetch_one(conn)
        .await
        .expect("index reads")
}

/// Reads the backlog from `from` in a transaction of its own, with the relay's planner settings;
/// returns it with the queue index entries it read.
async fn read(pool: &PgPool, from: i64) -> (admin::Backlog, i64) {
    let mut tx = pool.begin().await.expect("begin");
    for (name, value) in [("enable_seqscan", "off"), ("enable_bitmapscan", "off")] {
        sqlx::query("SELECT set_config($1, $2, true)").bind(name).bind(value).execute(&mut *tx).await.expect("set");
    }
    let before = queue_entries_read(&mut tx).await;
    let backlog = admin::backlog_from(&mut *tx, from).await.expect("backlog");
    let read = queue_entries_read(&mut tx).await - before;
    tx.rollback().await.expect("rollback");
    (backlog, read)
}

/// 2,000 events; while another session holds a snapshot, the first 1,500 are published, except the
/// 9th (quarantined) and the 10th (held behind it). From the 1,501st position the
/// backlog counts the same 502 waiting rows as from the front, and reads about 1,000 entries of the
/// queue index where the read from the front walks more than 4,000.
#[tokio::test]
async fn the_backlog_from_a_position_counts_what_waits_and_walks_nothing_below_it() {
    let db = TestDb::new().await.expect("db");
    enqueue(db.pool()).await;
    let holder = SnapshotHolder::hold(&db).await.expect("hold a snapshot");
    sqlx::query(
        "WITH f AS (SELECT position, row_number() OVER (ORDER BY position) AS n FROM outbox_events)
         UPDATE outbox_events o SET
             status = CASE WHEN f.n = 9 THEN 'quarantined' WHEN f.n = 10 THEN 'pending' ELSE 'published' END,
             next_attempt_at = CASE WHEN f.n = 10 THEN 'infinity' ELSE o.next_attempt_at END,
             quarantined_at = CASE WHEN f.n = 9 THEN now() END,
             published_at = CASE WHEN f.n NOT IN (9, 10) THEN now() END
         FROM f WHERE o.position = f.position AND f.n <= $1",
    )
    .bind(PUBLISHED)
    .execute(db.pool())
    .await
    .expect("publish");

    let from = position(db.pool(), PUBLISHED + 1).await;
    let (front, walked) = read(db.pool(), 0).await;
    let (low, read_from) = read(db.pool(), from).await;
    let waiting = EVENTS - PUBLISHED + 1;
    assert_eq!((front.waiting, front.held), (waiting, 1), "from the front: {front:?}");
    assert_eq!((low.waiting, low.held), (waiting, 1), "from position {from}: {low:?}");
    assert_eq!(low.quarantined, front.quarantined);
    assert_eq!(low.entities_behind, front.entities_behind);
    assert!(low.oldest_waiting_age >= front.oldest_waiting_age.saturating_sub(std::time::Duration::from_secs(1)));
    // The count and the sample of entities each walk the queue: twice what waits from `from` (and
    // a few more), twice everything from the front.
    assert!(walked >= 2 * EVENTS, "the read from the front walks every published row's entry: {walked}");
    assert!(read_from <= 2 * (EVENTS - PUBLISHED) + 10, "read {read_from} entries from position {from}");

    holder.release().await.expect("commit");
    db.close().await.expect("cleanup");
}
