//! Retention against the real PostgreSQL: only old published (and, if asked, skipped) rows go, in
//! bounded batches; every other state stays; sequence numbers are never reused; expired
//! idempotency keys are forgotten.

use std::time::Duration;

use outbox_ops::Retention;
use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use outbox_types::NewEvent;
use sqlx::PgPool;

async fn enqueue(pool: &PgPool, entity: &str, n: usize) -> Vec<uuid::Uuid> {
    let mut tx = pool.begin().await.expect("begin");
    let events = (0..n).map(|_| NewEvent::json("t", &1).expect("json").entity(entity));
    let ids = Outbox::new().enqueue_many(&mut *tx, events).await.expect("enqueue");
    tx.commit().await.expect("commit");
    ids.into_iter().map(|id| *id.as_uuid()).collect()
}

/// Sets the state of the rows of `entity`, aged by `age`.
async fn set(pool: &PgPool, entity: &str, status: &str, age: &str) {
    sqlx::query(
        "UPDATE outbox_events SET status = $2,
             published_at = CASE WHEN $2 = 'published' THEN now() - $3::interval END,
             quarantined_at = CASE WHEN $2 IN ('quarantined', 'skipped') THEN now() - $3::interval END,
             created_at = now() - $3::interval
         WHERE entity_key = $1",
    )
    .bind(entity)
    .bind(status)
    .bind(age)
    .execute(pool)
    .await
    .expect("set");
}

async fn remaining(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query_as("SELECT entity_key, status FROM outbox_events ORDER BY entity_key, seq")
        .fetch_all(pool)
        .await
        .expect("rows")
}

#[tokio::test]
async fn deletes_only_old_final_rows_in_bounded_batches_and_never_reuses_a_sequence() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    enqueue(pool, "old-published", 5).await;
    enqueue(pool, "new-published", 1).await;
    enqueue(pool, "old-skipped", 1).await;
    enqueue(pool, "old-quarantined", 1).await;
    enqueue(pool, "old-pending", 1).await;
    set(pool, "old-published", "published", "2 days").await;
    set(pool, "new-published", "published", "1 minute").await;
    set(pool, "old-skipped", "skipped", "2 days").await;
    set(pool, "old-quarantined", "quarantined", "2 days").await;
    set(pool, "old-pending", "pending", "2 days").await;
    // In flight (claimed, lease held) and waiting for a retry, both old.
    sqlx::query("UPDATE outbox_events SET lease_owner = 'r', attempts = 3, next_attempt_at = now() + interval '1 hour' WHERE entity_key = 'old-pending'")
        .execute(pool)
        .await
        .expect("claim");

    let day = Duration::from_secs(86_400);
    let retention = Retention::builder(day).batch_size(2).max_batches(2).build().expect("retention");
    assert_eq!(retention.run_batch(pool).await.expect("one batch"), 2, "a batch is bounded");
    assert_eq!(retention.run(pool).await.expect("run"), 3, "the rest of the old published rows");
    assert_eq!(retention.run(pool).await.expect("run"), 0, "skipped rows are kept unless asked");
    let with_skipped = Retention::builder(day).include_skipped(true).build().expect("retention");
    assert_eq!(with_skipped.run(pool).await.expect("run"), 1);

    let left = remaining(pool).await;
    let expected = [("new-published", "published"), ("old-pending", "pending"), ("old-quarantined", "quarantined")];
    assert_eq!(left, expected.map(|(e, s)| (e.to_owned(), s.to_owned())));

    // The entity whose rows are all gone continues at 6: no number is reused.
    enqueue(pool, "old-published", 1).await;
    let seq: i64 = sqlx::query_scalar("SELECT seq FROM outbox_events WHERE entity_key = 'old-published'")
        .fetch_one(pool)
        .await
        .expect("seq");
    assert_eq!(seq, 6);
    db.close().await.expect("cleanup");
}

/// Scrubbing: the payload of published rows older than the scrub age is cleared and the row kept
/// (ids, type, entity, sequence, times) until the deletion age; no other state is touched, a row
/// is scrubbed once, and the rows' own payload bytes are gone from the table.
#[tokio::test]
async fn scrubs_only_old_published_payloads_and_keeps_their_rows() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    for (entity, status, age) in [
        ("scrub-me", "published", "2 days"),
        ("fresh", "published", "1 minute"),
        ("skipped", "skipped", "2 days"),
        ("quarantined", "quarantined", "2 days"),
        ("waiting", "pending", "2 days"),
    ] {
        enqueue(pool, entity, 3).await;
        set(pool, entity, status, age).await;
    }
    let day = Duration::from_secs(86_400);
    let week = Retention::builder(7 * day).scrub_payload_after(day).batch_size(2).build().expect("retention");
    assert_eq!(week.scrub_batch(pool).await.expect("a batch"), 2, "a batch is bounded");
    assert_eq!(week.run(pool).await.expect("run"), 0, "nothing is old enough to delete");
    assert_eq!(week.scrub_batch(pool).await.expect("again"), 0, "each row is scrubbed once");

    let rows: Vec<(String, i64, bool, bool)> = sqlx::query_as(
        "SELECT entity_key, seq, payload = ''::bytea, payload_scrubbed_at IS NOT NULL FROM outbox_events
         ORDER BY entity_key, seq",
    )
    .fetch_all(pool)
    .await
    .expect("rows");
    assert_eq!(rows.len(), 15, "every row kept");
    for (entity, seq, empty, scrubbed) in rows {
        let expected = entity == "scrub-me";
        assert_eq!((empty, scrubbed), (expected, expected), "{entity} {seq}");
    }
    let too_late = Retention::builder(day).scrub_payload_after(day).build();
    assert!(matches!(too_late, Err(outbox_ops::Error::InvalidConfig(_))), "scrubbing at the deletion age");

    // The deletion age still deletes the scrubbed rows.
    set(pool, "scrub-me", "published", "8 days").await;
    assert_eq!(week.run(pool).await.expect("run"), 3);
    db.close().await.expect("cleanup");
}

/// A row another transaction holds is waited for, not skipped: once the holder lets go it is
/// scrubbed with the others, and later batches, which start at the newest scrubbed row, never leave
/// it behind.
#[tokio::test]
async fn a_scrub_waits_for_a_held_row_and_leaves_none_behind() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool().clone();
    enqueue(&pool, "old", 3).await;
    sqlx::query(
        "UPDATE outbox_events SET status = 'published', published_at = now() - interval '3 days' + seq * interval '1 minute'
         WHERE entity_key = 'old'",
    )
    .execute(&pool)
    .await
    .expect("published three days ago, one minute apart");
    let mut holder = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM outbox_events WHERE entity_key = 'old' AND seq = 1 FOR UPDATE")
        .execute(&mut *holder)
        .await
        .expect("hold the oldest row");

    let day = Duration::from_secs(86_400);
    let retention = Retention::builder(7 * day).scrub_payload_after(day).build().expect("retention");
    let scrub = tokio::spawn({
        let (retention, pool) = (retention.clone(), pool.clone());
        async move { retention.scrub_batch(&pool).await }
    });
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
    outbox_testkit::wait_for("the scrub to wait for the held row, or to end", Duration::from_secs(60), || async {
        let n: i64 = sqlx::query_scalar(waiting).fetch_one(&pool).await.ok()?;
        (n > 0 || scrub.is_finished()).then_some(())
    })
    .await
    .expect("waiting or done");
    holder.rollback().await.expect("let go");
    scrub.await.expect("join").expect("scrub");
    retention.scrub_batch(&pool).await.expect("a later batch");

    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE payload_scrubbed_at IS NULL")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(left, 0, "no row left unscrubbed behind the mark");
    db.close().await.expect("cleanup");
}

/// Expired idempotency keys are deleted; a key still within its window is kept.
#[tokio::test]
async fn retention_forgets_expired_idempotency_keys_and_keeps_live_ones() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    let keyed = |key: &str| NewEvent::json("order.placed", &1).expect("json").idempotency_key(key);
    let short = Outbox::builder().idempotency_window(Duration::from_secs(2)).build();
    let mut tx = pool.begin().await.expect("begin");
    short.enqueue(&mut *tx, keyed("w-1")).await.expect("a key of 2 seconds");
    Outbox::new().enqueue(&mut *tx, keyed("w-live")).await.expect("a key of 24 hours");
    tx.commit().await.expect("commit");
    outbox_testkit::wait_for("the window to pass", Duration::from_secs(30), || async {
        let expired: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_idempotency_keys WHERE expires_at <= now()")
            .fetch_one(pool)
            .await
            .map_err(|e| e.to_string())?;
        outbox_testkit::equal(expired, 1)
    })
    .await
    .expect("expired");
    Retention::builder(Duration::from_secs(3600)).build().expect("retention").run(pool).await.expect("run");
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT idempotency_key FROM outbox_idempotency_keys").fetch_all(pool).await.expect("keys");
    assert_eq!(kept, vec!["w-live".to_owned()], "the expired key deleted, the live one kept");
    db.close().await.expect("cleanup");
}
