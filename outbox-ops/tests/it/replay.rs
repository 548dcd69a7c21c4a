//! A replay job's record and its reads against the real PostgreSQL: what a selection holds, and
//! each batch reading about its own size by index (never every published row, sorted), also on a
//! table whose statistics lag behind a backlog just published.

use outbox_ops::replay::{self, Cursor, NewReplayJob, ReplaySelection, ReplayTarget};
use outbox_testkit::{TestDb, rows_fetched};
use sqlx::Row;

const ENTITIES: usize = 200;
const PER_ENTITY: usize = 100;

/// `ENTITIES * PER_ENTITY` events (and 500 of no entity) written by SQL in one statement, then
/// published, so that the table's statistics still say "pending" and hold no dead rows.
async fn published_backlog(db: &TestDb) {
    // 200 entities of 100 events each (ENTITIES, PER_ENTITY), every other one an `order.placed`.
    sqlx::raw_sql(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
         SELECT gen_random_uuid(), CASE WHEN i % 2 = 0 THEN 'order.placed' ELSE 'invoice.sent' END, 1,
                'entity-' || lpad((i % 200)::text, 3, '0'), i / 200 + 1, '\\x7b7d', 'application/json'
         FROM generate_series(0, 19999) i;
         INSERT INTO outbox_events (id, event_type, event_version, payload, content_type)
         SELECT gen_random_uuid(), 'order.placed', 1, '\\x7b7d', 'application/json' FROM generate_series(1, 500);
         UPDATE outbox_events SET status = 'published', published_at = now() - interval '1 minute';",
    )
    .execute(db.pool())
    .await
    .expect("backlog");
}

/// The rows one batch returns after `cursor`, and how many rows of `outbox_events` it fetched.
async fn batch(
    db: &TestDb,
    job: &replay::ReplayJob,
    cursor: &Cursor,
    limit: i64,
) -> (Vec<(Option<String>, Option<i64>)>, i64) {
    let mut tx = db.pool().begin().await.expect("begin");
    let before = rows_fetched(&mut tx, "outbox_events").await.expect("before");
    let rows = replay::next_rows(&mut tx, job, cursor, limit).await.expect("rows");
    let read = rows_fetched(&mut tx, "outbox_events").await.expect("after") - before;
    tx.commit().await.expect("commit");
    let keys = rows.iter().map(|r| (r.get("entity_key"), r.get("seq"))).collect();
    (keys, read)
}

#[tokio::test]
async fn each_batch_reads_about_its_size_in_the_jobs_order() {
    let db = TestDb::new().await.expect("database");
    published_backlog(&db).await;
    let (job, survey) = replay::create(db.pool(), NewReplayJob::new(ReplaySelection::all(), ReplayTarget::queue("q")))
        .await
        .expect("job");
    assert_eq!(survey.total as usize, ENTITIES * PER_ENTITY + 500);
    assert_eq!((survey.by_entity.len(), survey.unordered), (ENTITIES, 500));

    let middle = Cursor::Entity { key: "entity-100".into(), seq: 50 };
    let (rows, read) = batch(&db, &job, &middle, 100).await;
    let expected: Vec<_> = (51..=100)
        .map(|s| (Some("entity-100".to_owned()), Some(s)))
        .chain((1..=50).map(|s| (Some("entity-101".to_owned()), Some(s))))
        .collect();
    assert_eq!(rows, expected, "each entity's events in sequence order, entities by key");
    assert!(read <= 200, "a batch of 100 read {read} rows");

    let (rows, read) = batch(&db, &job, &replay::unordered_start(), 100).await;
    assert_eq!(rows.len(), 100);
    assert!(rows.iter().all(|(key, _)| key.is_none()), "then the events of no entity");
    assert!(read <= 200, "a batch of 100 of no entity read {read} rows");

    // A type filter walks the same order; it may pass over rows of the other type, not sort them all.
    let typed = ReplaySelection::all().event_type("order.*");
    let (job, _) = replay::create(db.pool(), NewReplayJob::new(typed, ReplayTarget::queue("q"))).await.expect("typed");
    let (rows, read) = batch(&db, &job, &Cursor::Start, 100).await;
    assert_eq!(rows.len(), 100);
    assert!(read <= 400, "a typed batch of 100 read {read} rows");
    db.close().await.expect("cleanup");
}
