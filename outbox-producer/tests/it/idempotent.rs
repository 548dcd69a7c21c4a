//! Idempotent enqueue against the real PostgreSQL: a retried request with the same key makes no
//! second event, two racing requests make one, a refused key leaves no gap in its entity's
//! sequence, a batch with a taken key writes nothing, and a key past its window is taken again
//! (retention deleting expired keys is tested in `outbox-ops`).

use std::time::Duration;

use outbox_producer::{Error, Outbox};
use outbox_system_tests::count;
use outbox_testkit::TestDb;
use outbox_types::{EventError, EventId, KEY_BYTES, KeyProvider, NewEvent, PayloadCipher};
use sqlx::PgPool;

fn keyed(key: &str) -> NewEvent {
    NewEvent::json("order.placed", &serde_json::json!({ "order": 7 })).expect("json").idempotency_key(key)
}

async fn enqueue_committed(pool: &PgPool, outbox: &Outbox, event: NewEvent) -> Result<EventId, Error> {
    let mut tx = pool.begin().await.expect("begin");
    let outcome = outbox.enqueue(&mut *tx, event).await;
    tx.commit().await.expect("the transaction stays usable whatever the outcome");
    outcome
}

#[tokio::test]
async fn a_retried_request_gets_the_first_events_id_and_writes_nothing() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY)").execute(pool).await.expect("orders");
    let outbox = Outbox::new();
    let first = enqueue_committed(pool, &outbox, keyed("req-1").entity("order-7")).await.expect("first");

    // The retry: the business change is made, the enqueue refuses, the caller commits anyway.
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders VALUES (1)").execute(&mut *tx).await.expect("business change");
    let again = outbox.enqueue(&mut *tx, keyed("req-1").entity("order-7")).await;
    let Err(Error::AlreadyEnqueued { event_id, index: None }) = again else { panic!("{again:?}") };
    assert_eq!(event_id, first, "the first event's id");
    tx.commit().await.expect("the transaction is still usable");
    assert_eq!(count(pool, "SELECT count(*) FROM orders").await, 1, "the caller's own change committed");
    assert_eq!(count(pool, "SELECT count(*) FROM outbox_events").await, 1, "no second event");

    // The same key under another type is another request; an unkeyed event of the entity gets the
    // next number: the refused enqueue took none.
    let other = NewEvent::json("order.cancelled", &1).expect("json").idempotency_key("req-1");
    enqueue_committed(pool, &outbox, other).await.expect("another type");
    let next = NewEvent::json("order.placed", &2).expect("json").entity("order-7");
    enqueue_committed(pool, &outbox, next).await.expect("unkeyed");
    let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM outbox_events WHERE entity_key = 'order-7' ORDER BY seq")
        .fetch_all(pool)
        .await
        .expect("seqs");
    assert_eq!(seqs, vec![1, 2], "no gap");
    db.close().await.expect("cleanup");
}

/// Two transactions with one key at once: the second waits for the first. If the first commits,
/// the second gets its id; if it rolls back, the second writes the event. Never a unique
/// violation that would abort the caller's transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_requests_make_one_event() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool().clone();
    let outbox = Outbox::new();
    for commit_first in [true, false] {
        let key = format!("race-{commit_first}");
        let mut first = pool.begin().await.expect("begin");
        let first_id = outbox.enqueue(&mut *first, keyed(&key).entity("order-9")).await.expect("first");
        let second = tokio::spawn({
            let (pool, outbox, key) = (pool.clone(), outbox.clone(), key.clone());
            async move { enqueue_committed(&pool, &outbox, keyed(&key).entity("order-9")).await }
        });
        outbox_testkit::wait_for("the second to wait for the first's key", Duration::from_secs(30), || async {
            let waiting = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                           AND wait_event_type = 'Lock'";
            outbox_testkit::equal(count(&pool, waiting).await, 1)
        })
        .await
        .expect("waiting");
        assert!(!second.is_finished());
        if commit_first {
            first.commit().await.expect("commit");
            let outcome = second.await.expect("join");
            assert!(matches!(outcome, Err(Error::AlreadyEnqueued { event_id, .. }) if event_id == first_id));
        } else {
            first.rollback().await.expect("rollback");
            let outcome = second.await.expect("join").expect("the second writes the event");
            assert_ne!(outcome, first_id);
        }
    }
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_events").await, 2, "one event per key");
    let seqs: Vec<i64> =
        sqlx::query_scalar("SELECT seq FROM outbox_events ORDER BY seq").fetch_all(&pool).await.expect("seqs");
    assert_eq!(seqs, vec![1, 2]);
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn a_batch_with_a_taken_key_writes_nothing() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    let outbox = Outbox::new();
    let taken = enqueue_committed(pool, &outbox, keyed("b-2")).await.expect("first");
    let batch = || vec![keyed("b-1").entity("order-1"), keyed("b-2").entity("order-1"), keyed("b-3")];
    let mut tx = pool.begin().await.expect("begin");
    let refused = outbox.enqueue_many(&mut *tx, batch()).await;
    let Err(Error::AlreadyEnqueued { event_id, index: Some(1) }) = refused else { panic!("{refused:?}") };
    assert_eq!(event_id, taken);
    tx.commit().await.expect("usable");
    assert_eq!(count(pool, "SELECT count(*) FROM outbox_events").await, 1, "nothing of the batch");
    assert_eq!(count(pool, "SELECT count(*) FROM outbox_idempotency_keys").await, 1, "the batch's keys given back");

    let repeated = vec![keyed("b-4"), keyed("b-4")];
    let mut tx = pool.begin().await.expect("begin");
    let refused = outbox.enqueue_many(&mut *tx, repeated).await;
    assert!(
        matches!(refused, Err(Error::InvalidBatchEvent { index: 1, source: EventError::RepeatedIdempotencyKey })),
        "{refused:?}"
    );
    let fresh = vec![keyed("b-1").entity("order-1"), keyed("b-3").entity("order-1"), keyed("b-5")];
    assert_eq!(outbox.enqueue_many(&mut *tx, fresh).await.expect("fresh keys").len(), 3);
    tx.commit().await.expect("commit");
    let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM outbox_events WHERE entity_key = 'order-1' ORDER BY seq")
        .fetch_all(pool)
        .await
        .expect("seqs");
    assert_eq!(seqs, vec![1, 2], "the refused batch took no number");
    db.close().await.expect("cleanup");
}

/// A key provider that lost its current key: nothing can be sealed.
struct LostKey;

impl KeyProvider for LostKey {
    fn current_key_id(&self) -> &str {
        "gone"
    }

    fn key(&self, _: &str) -> Option<[u8; KEY_BYTES]> {
        None
    }
}

/// A batch whose payloads cannot be sealed fails before it takes a key: committed anyway, the
/// transaction leaves no key naming an event that was never written.
#[tokio::test]
async fn a_batch_that_cannot_be_sealed_takes_no_key() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    let outbox = Outbox::builder().cipher(PayloadCipher::new(LostKey)).build();
    let mut tx = pool.begin().await.expect("begin");
    let failed = outbox.enqueue_many(&mut *tx, vec![keyed("s-1"), keyed("s-2")]).await;
    assert!(matches!(failed, Err(Error::Encryption(_))), "{failed:?}");
    tx.commit().await.expect("usable");
    assert_eq!(count(pool, "SELECT count(*) FROM outbox_idempotency_keys").await, 0, "no key taken");
    assert_eq!(count(pool, "SELECT count(*) FROM outbox_events").await, 0, "no event");
    let retry = Outbox::new().enqueue_many(&mut *db.pool().begin().await.expect("begin"), vec![keyed("s-1")]).await;
    assert!(retry.is_ok(), "the key is free: {retry:?}");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn a_key_past_its_window_is_taken_again() {
    let db = TestDb::new().await.expect("db");
    let pool = db.pool();
    let short = Outbox::builder().idempotency_window(Duration::from_secs(2)).build();
    let first = enqueue_committed(pool, &short, keyed("w-1")).await.expect("first");
    enqueue_committed(pool, &Outbox::new(), keyed("w-live")).await.expect("a key of 24 hours");
    assert!(matches!(enqueue_committed(pool, &short, keyed("w-1")).await, Err(Error::AlreadyEnqueued { .. })));
    outbox_testkit::wait_for("the window to pass", Duration::from_secs(30), || async {
        outbox_testkit::equal(
            count(pool, "SELECT count(*) FROM outbox_idempotency_keys WHERE expires_at <= now()").await,
            1,
        )
    })
    .await
    .expect("expired");
    let second = enqueue_committed(pool, &short, keyed("w-1")).await.expect("a new event once the window passed");
    assert_ne!(second, first);
    assert_eq!(count(pool, "SELECT count(*) FROM outbox_events").await, 3);
    db.close().await.expect("cleanup");
}
