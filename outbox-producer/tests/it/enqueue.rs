//! The write side against the real PostgreSQL: atomicity with the caller's transaction (G1),
//! gapless per-entity sequences in commit order (G4), validation before any SQL.

use std::sync::Arc;
use std::time::Duration;

use outbox_producer::{Error, Outbox};
use outbox_testkit::TestDb;
use outbox_types::{EventError, NewEvent, Payload};
use rand::Rng;
use rand::seq::SliceRandom;
use sqlx::{Connection, PgPool, Row};

const SECRET: &str = "PAYLOAD-SECRET-93c1e";

fn event(entity: Option<&str>) -> NewEvent {
    let e = NewEvent::json("order.updated", &serde_json::json!({ "note": SECRET })).expect("json");
    match entity {
        Some(k) => e.entity(k),
        None => e,
    }
}

async fn business_table(pool: &PgPool) {
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY, version bigint NOT NULL DEFAULT 0)")
        .execute(pool)
        .await
        .expect("create orders");
    sqlx::query("INSERT INTO orders (id) SELECT generate_series(1, 100)").execute(pool).await.expect("seed orders");
}

async fn stored(pool: &PgPool) -> Vec<(uuid::Uuid, Option<String>, Option<i64>)> {
    sqlx::query("SELECT id, entity_key, seq FROM outbox_events ORDER BY entity_key, seq, id")
        .fetch_all(pool)
        .await
        .expect("select")
        .into_iter()
        .map(|r| (r.get("id"), r.get("entity_key"), r.get("seq")))
        .collect()
}

async fn last_seq(pool: &PgPool, key: &str) -> Option<i64> {
    sqlx::query_scalar("SELECT max(seq) FROM outbox_events WHERE entity_key = $1")
        .bind(key)
        .fetch_one(pool)
        .await
        .expect("the entity's last sequence")
}

/// Eight transactions on one entity at once, a random subset rolling back, random pauses before
/// the outcome: the committed events carry 1..n without gap or duplicate, in commit order. Commit
/// order is measured independently by a counter row that each transaction bumps just before it
/// commits (and holds locked until then).
#[tokio::test]
async fn concurrent_transactions_get_gapless_sequences_in_commit_order() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool().clone();
    sqlx::query("CREATE TABLE commit_order (id int PRIMARY KEY, n bigint NOT NULL)")
        .execute(&pool)
        .await
        .expect("create");
    sqlx::query("CREATE TABLE commits (event_id uuid PRIMARY KEY, position bigint NOT NULL)")
        .execute(&pool)
        .await
        .expect("create");
    sqlx::query("INSERT INTO commit_order VALUES (1, 0)").execute(&pool).await.expect("seed");
    let outbox = Arc::new(Outbox::new());

    for round in 0..4 {
        let entity = format!("order-{round}");
        let mut plan: Vec<bool> = (0..8).map(|i| i % 3 != 0).collect(); // 5 commit, 3 roll back
        plan.shuffle(&mut rand::rng());
        let tasks = plan.into_iter().map(|commit| {
            let (pool, outbox, entity) = (pool.clone(), outbox.clone(), entity.clone());
            tokio::spawn(async move {
                let (pause_a, pause_b) = {
                    let mut r = rand::rng();
                    (r.random_range(0..15), r.random_range(0..15))
                };
                tokio::time::sleep(Duration::from_millis(pause_a)).await;
                let mut tx = pool.begin().await.expect("begin");
                let id = outbox.enqueue(&mut *tx, event(Some(&entity))).await.expect("enqueue");
                tokio::time::sleep(Duration::from_millis(pause_b)).await;
                let position: i64 = sqlx::query_scalar("UPDATE commit_order SET n = n + 1 WHERE id = 1 RETURNING n")
                    .fetch_one(&mut *tx)
                    .await
                    .expect("bump");
                sqlx::query("INSERT INTO commits VALUES ($1, $2)")
                    .bind(id.as_uuid())
                    .bind(position)
                    .execute(&mut *tx)
                    .await
                    .expect("record");
                if commit { tx.commit().await.expect("commit") } else { tx.rollback().await.expect("rollback") }
            })
        });
        for t in tasks.collect::<Vec<_>>() {
            t.await.expect("task");
        }

        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT e.seq, c.position FROM outbox_events e JOIN commits c ON c.event_id = e.id
             WHERE e.entity_key = $1 ORDER BY c.position",
        )
        .bind(&entity)
        .fetch_all(&pool)
        .await
        .expect("select");
        let seqs: Vec<i64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(seqs, (1..=5).collect::<Vec<i64>>(), "round {round}: sequences in commit order must be 1..5");
        let total: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE entity_key = $1")
            .bind(&entity)
            .fetch_one(&pool)
            .await
            .expect("count");
        assert_eq!(total, 5, "round {round}: only committed events exist");
        assert_eq!(last_seq(&pool, &entity).await, Some(5));
    }
    db.close().await.expect("drop db");
}

/// Under REPEATABLE READ, a transaction whose snapshot is older than another's committed event of
/// the same entity cannot take the next number: its enqueue fails with a database error (the
/// transaction is retried as such transactions are), and no number is taken twice.
#[tokio::test]
async fn a_repeatable_read_enqueue_behind_a_newer_event_fails_instead_of_reusing_its_number() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool();
    let outbox = Outbox::new();
    let mut old = pool.begin().await.expect("begin");
    sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .execute(&mut *old)
        .await
        .expect("snapshot");
    let mut tx = pool.begin().await.expect("begin");
    outbox.enqueue(&mut *tx, NewEvent::json("order.placed", &1).expect("json").entity("e")).await.expect("enqueue");
    tx.commit().await.expect("commit");
    let late = outbox.enqueue(&mut *old, NewEvent::json("order.placed", &2).expect("json").entity("e")).await;
    assert!(matches!(late, Err(Error::Database(_))), "{late:?}");
    old.rollback().await.expect("rollback");
    assert_eq!(last_seq(pool, "e").await, Some(1));
    assert_eq!(stored(pool).await.len(), 1);
    db.close().await.expect("drop db");
}

#[tokio::test]
async fn entities_have_independent_sequences_and_unordered_events_have_none() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool();
    let outbox = Outbox::new();

    let mut tx = pool.begin().await.expect("begin");
    let a1 = outbox.enqueue(&mut *tx, event(Some("a"))).await.expect("a1");
    let b1 = outbox.enqueue(&mut *tx, event(Some("b"))).await.expect("b1");
    let a2 = outbox.enqueue(&mut *tx, event(Some("a"))).await.expect("a2");
    let u = outbox.enqueue(&mut *tx, event(None)).await.expect("unordered");
    tx.commit().await.expect("commit");

    let mut rows = stored(pool).await;
    rows.sort();
    let mut expected = vec![
        (*a1.as_uuid(), Some("a".to_owned()), Some(1)),
        (*a2.as_uuid(), Some("a".to_owned()), Some(2)),
        (*b1.as_uuid(), Some("b".to_owned()), Some(1)),
        (*u.as_uuid(), None, None),
    ];
    expected.sort();
    assert_eq!(rows, expected);
    db.close().await.expect("drop db");
}

#[tokio::test]
async fn enqueue_many_numbers_each_entity_in_order_in_one_statement() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool();
    let outbox = Outbox::new();

    let mut tx = pool.begin().await.expect("begin");
    outbox.enqueue(&mut *tx, event(Some("x"))).await.expect("x1 alone");
    let batch =
        vec![event(Some("x")), event(Some("y")), event(None), event(Some("x")), event(Some("y")), event(Some("x"))];
    let ids = outbox.enqueue_many(&mut *tx, batch).await.expect("batch");
    tx.commit().await.expect("commit");

    let seq_of = |id: &outbox_types::EventId| {
        let id = *id.as_uuid();
        async move {
            sqlx::query_as::<_, (Option<String>, Option<i64>)>(
                "SELECT entity_key, seq FROM outbox_events WHERE id = $1",
            )
            .bind(id)
            .fetch_one(pool)
            .await
            .expect("row")
        }
    };
    let got = [
        seq_of(&ids[0]).await,
        seq_of(&ids[1]).await,
        seq_of(&ids[2]).await,
        seq_of(&ids[3]).await,
        seq_of(&ids[4]).await,
        seq_of(&ids[5]).await,
    ];
    let s = |k: &str, n| (Some(k.to_owned()), Some(n));
    assert_eq!(got, [s("x", 2), s("y", 1), (None, None), s("x", 3), s("y", 2), s("x", 4)]);
    assert_eq!(last_seq(pool, "x").await, Some(4));
    assert!(
        outbox.enqueue_many(&mut *pool.acquire().await.expect("conn"), Vec::new()).await.expect("empty").is_empty()
    );

    // One invalid event rejects the whole batch before any SQL.
    let mut tx = pool.begin().await.expect("begin");
    let err =
        outbox.enqueue_many(&mut *tx, vec![event(Some("x")), event(Some("x")).version(0)]).await.expect_err("invalid");
    assert!(matches!(err, Error::InvalidBatchEvent { index: 1, source: EventError::InvalidVersion }), "{err:?}");
    tx.commit().await.expect("transaction still usable");
    assert_eq!(last_seq(pool, "x").await, Some(4));
    db.close().await.expect("drop db");
}

/// Every invalid event returns its typed error, no SQL is sent (proved by a lock that any statement
/// on the outbox would run into), and the caller's business write still commits.
#[tokio::test]
async fn invalid_events_are_rejected_before_any_sql() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool();
    business_table(pool).await;
    let outbox = Outbox::builder().max_payload_bytes(64).build();

    type Case = (NewEvent, fn(&EventError) -> bool);
    let cases: Vec<Case> = vec![
        (NewEvent::json("", &1).expect("json"), |e| matches!(e, EventError::EmptyEventType)),
        (NewEvent::json("t".repeat(256), &1).expect("json"), |e| matches!(e, EventError::EventTypeTooLong { .. })),
        (event(Some(&"k".repeat(256))), |e| matches!(e, EventError::EntityKeyTooLong { len: 256, max: 255 })),
        (NewEvent::new("t", Payload::new(SECRET.repeat(10), "text/plain")), |e| {
            matches!(e, EventError::PayloadTooLarge { size: 200, max: 64 })
        }),
        (event(None).header("x-seq", 7), |e| matches!(e, EventError::ReservedHeader { .. })),
        (event(None).header("bad name", "v"), |e| matches!(e, EventError::InvalidHeaderName { .. })),
        (event(None).version(0), |e| matches!(e, EventError::InvalidVersion)),
        // PostgreSQL refuses a NUL in `text` and `\u0000` in `jsonb` (SQLSTATE 22P05).
        (event(None).header("k", "a\0b"), |e| matches!(e, EventError::InvalidHeaderValue { .. })),
        (event(None).correlation_id("a\0b"), |e| matches!(e, EventError::InvalidId { .. })),
    ];

    // Another session holds the outbox tables exclusively; a statement from the test transaction
    // would hit lock_timeout and fail with a database error instead of the typed one.
    let mut blocker = pool.begin().await.expect("begin blocker");
    sqlx::query("LOCK TABLE outbox_events, outbox_entity_sequences IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .expect("lock");

    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SET LOCAL lock_timeout = '200ms'").execute(&mut *tx).await.expect("timeout");
    sqlx::query("UPDATE orders SET version = 7 WHERE id = 5").execute(&mut *tx).await.expect("business write");
    for (event, expected) in cases {
        let err = outbox.enqueue(&mut *tx, event).await.expect_err("must be rejected");
        match &err {
            Error::InvalidEvent(e) => assert!(expected(e), "wrong error {e:?}"),
            other => panic!("expected a validation error, got {other:?}"),
        }
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(!text.contains(SECRET), "the payload leaked into an error: {text}");
        }
    }
    let err = outbox.enqueue_many(&mut *tx, vec![event(None), event(None).version(0)]).await.expect_err("batch");
    assert!(matches!(err, Error::InvalidBatchEvent { index: 1, .. }));
    tx.commit().await.expect("the business transaction commits after rejected events");
    blocker.rollback().await.expect("unlock");

    let version: i64 =
        sqlx::query_scalar("SELECT version FROM orders WHERE id = 5").fetch_one(pool).await.expect("read");
    assert_eq!(version, 7, "the business write committed");
    assert!(stored(pool).await.is_empty());
    db.close().await.expect("drop db");
}

/// A database error can quote the failing row, payload included; the producer's error must not.
#[tokio::test]
async fn database_errors_do_not_quote_the_payload() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool();
    // A constraint of the host's own making that the event violates at insert time.
    sqlx::query("ALTER TABLE outbox_events ADD CONSTRAINT tiny CHECK (octet_length(payload) < 10)")
        .execute(pool)
        .await
        .expect("alter");
    let outbox = Outbox::new();
    let mut conn = pool.acquire().await.expect("conn");
    let err = outbox.enqueue(&mut conn, event(Some("k"))).await.expect_err("check violation");
    assert!(matches!(err, Error::Database(_)));
    let hex: String = SECRET.bytes().map(|b| format!("{b:02x}")).collect();
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(SECRET) && !text.contains(&hex), "the payload leaked into a database error: {text}");
    }
    assert!(format!("{err:?}").contains("23514"), "the SQLSTATE stays visible: {err:?}");

    // A reused event id is a unique violation, reported without the payload either.
    sqlx::query("ALTER TABLE outbox_events DROP CONSTRAINT tiny").execute(pool).await.expect("alter");
    let e = event(None);
    outbox.enqueue(&mut conn, e.clone()).await.expect("first");
    let err = outbox.enqueue(&mut conn, e).await.expect_err("duplicate id");
    assert!(!format!("{err:?}").contains(&hex) && !err.to_string().contains(SECRET));
    drop(conn);
    db.close().await.expect("drop db");
}

/// Whether a notification came within `within`.
async fn notified(listener: &mut sqlx::postgres::PgListener, within: Duration) -> bool {
    tokio::time::timeout(within, listener.recv()).await.is_ok_and(|n| n.is_ok())
}

/// Commits one event.
async fn commit_one(pool: &sqlx::PgPool) {
    let mut tx = pool.begin().await.expect("begin");
    Outbox::new().enqueue(&mut *tx, event(None)).await.expect("enqueue");
    tx.commit().await.expect("commit");
}

/// A relay of this version waits under an advisory lock its own session holds: commits notify
/// while the lock is held, not once it is released or the session has ended. The relay's row,
/// written once, is deleted by the next relay to be present once its session is gone.
#[tokio::test]
async fn commits_notify_only_while_a_relay_session_holds_its_waiting_lock() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool();
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await.expect("listener");
    listener.listen(outbox_producer::NOTIFY_CHANNEL).await.expect("listen");
    let quiet = Duration::from_millis(300);
    let mut relay = sqlx::PgConnection::connect_with(db.connect_options()).await.expect("relay session");
    let call = |sql: &'static str| sqlx::query_scalar::<_, bool>(sql);

    assert!(call("SELECT outbox_relay_present('r#1')").fetch_one(&mut relay).await.expect("present"));
    commit_one(pool).await;
    assert!(!notified(&mut listener, quiet).await, "notified although the relay did not wait");

    assert!(call("SELECT outbox_relay_wait('r#1', 60000)").fetch_one(&mut relay).await.expect("wait"));
    commit_one(pool).await;
    assert!(notified(&mut listener, Duration::from_secs(5)).await, "not notified while the relay waits");

    assert!(call("SELECT outbox_relay_busy('r#1')").fetch_one(&mut relay).await.expect("busy"));
    commit_one(pool).await;
    assert!(!notified(&mut listener, quiet).await, "notified although the relay was busy");

    assert!(call("SELECT outbox_relay_wait('r#1', 60000)").fetch_one(&mut relay).await.expect("wait again"));
    relay.close().await.expect("the relay's session ends");
    outbox_testkit::wait_for("the ended session's locks released", Duration::from_secs(10), || async {
        let n: i64 = sqlx::query_scalar("SELECT outbox_relays_waiting()").fetch_one(pool).await.expect("waiting");
        outbox_testkit::equal(n, 0)
    })
    .await
    .expect("no relay waits");
    commit_one(pool).await;
    assert!(!notified(&mut listener, quiet).await, "notified for a relay whose session ended");

    let mut next = sqlx::PgConnection::connect_with(db.connect_options()).await.expect("next relay session");
    assert!(call("SELECT outbox_relay_present('r#2')").fetch_one(&mut next).await.expect("present"));
    let rows: Vec<String> =
        sqlx::query_scalar("SELECT relay_id FROM outbox_relay_listeners").fetch_all(pool).await.expect("listeners");
    assert_eq!(rows, ["r#2"], "the ended relay's row is deleted by the next one");
    next.close().await.expect("close");
    drop(listener);
    db.close().await.expect("drop db");
}

/// An idle relay is woken by a notification that arrives only when the enqueuing transaction
/// commits; while no relay waits for one, commits do not notify (a notifying commit takes a
/// server-wide lock).
#[tokio::test]
async fn notification_fires_only_at_commit_and_only_for_a_waiting_relay() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool();
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await.expect("listener");
    listener.listen(outbox_producer::NOTIFY_CHANNEL).await.expect("listen");
    let outbox = Outbox::new();

    let mut tx = pool.begin().await.expect("begin");
    outbox.enqueue(&mut *tx, event(None)).await.expect("enqueue");
    tx.commit().await.expect("commit");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.recv()).await.is_err(),
        "notified although no relay was waiting"
    );

    // A relay waits, as `Relay` does after lingering: its session holds the waiting lock.
    let mut relay = sqlx::PgConnection::connect_with(db.connect_options()).await.expect("relay session");
    let waits: bool =
        sqlx::query_scalar("SELECT outbox_relay_present('test-relay') AND outbox_relay_wait('test-relay', 60000)")
            .fetch_one(&mut relay)
            .await
            .expect("wait");
    assert!(waits, "the relay waits");

    let mut tx = pool.begin().await.expect("begin");
    outbox.enqueue(&mut *tx, event(Some("n"))).await.expect("enqueue");
    assert!(tokio::time::timeout(Duration::from_millis(300), listener.recv()).await.is_err(), "notified before commit");
    tx.rollback().await.expect("rollback");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.recv()).await.is_err(),
        "notified for a rolled-back transaction"
    );

    let mut tx = pool.begin().await.expect("begin");
    outbox.enqueue_many(&mut *tx, (0..10).map(|_| event(None))).await.expect("enqueue");
    tx.commit().await.expect("commit");
    let n = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("notified after commit")
        .expect("recv");
    assert_eq!(n.channel(), outbox_producer::NOTIFY_CHANNEL);
    relay.close().await.expect("close");
    drop(listener);
    db.close().await.expect("drop db");
}
