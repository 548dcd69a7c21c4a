//! Whatever string a caller puts into an event, `enqueue` either stores the event or returns a
//! validation error before any SQL; it never sends PostgreSQL something it refuses (a NUL in
//! `text`, `\u0000` in `jsonb`), which would abort the caller's transaction and roll back its
//! business change at commit.

use std::cell::{Cell, RefCell};

use outbox_producer::{Error, Outbox};
use outbox_testkit::TestDb;
use outbox_types::NewEvent;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// The event's string fields, each of which reaches a `text` or `jsonb` column.
#[derive(Debug, Clone, Copy)]
enum Field {
    EventType,
    EntityKey,
    CorrelationId,
    CausationId,
    Traceparent,
    ContentType,
    HeaderName,
    HeaderValue,
}

fn event_with(field: Field, value: &str) -> NewEvent {
    let base = || NewEvent::json("order.updated", &serde_json::json!({ "n": 1 })).expect("json");
    match field {
        Field::EventType => NewEvent::json(value, &1).expect("json"),
        Field::EntityKey => base().entity(value),
        Field::CorrelationId => base().correlation_id(value),
        Field::CausationId => base().causation_id(value),
        Field::Traceparent => base().traceparent(value),
        Field::ContentType => NewEvent::new("order.updated", outbox_types::Payload::new(b"x".to_vec(), value)),
        Field::HeaderName => base().header(value, "v"),
        Field::HeaderValue => base().header("note", value),
    }
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        Just(Field::EventType),
        Just(Field::EntityKey),
        Just(Field::CorrelationId),
        Just(Field::CausationId),
        Just(Field::Traceparent),
        Just(Field::ContentType),
        Just(Field::HeaderName),
        Just(Field::HeaderValue),
    ]
}

/// Arbitrary Unicode, and short strings dense in NULs, controls and escapes.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-z0-9\\x00-\\x1f\\\\\"u ü\u{7f}\u{fffd}]{0,12}"]
}

#[test]
fn enqueue_stores_the_event_or_rejects_it_and_the_transaction_stays_usable() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let db = rt.block_on(TestDb::new()).expect("test db");
    let pool = db.pool().clone();
    let outbox = Outbox::new();
    rt.block_on(sqlx::query("CREATE TABLE business (id bigint PRIMARY KEY)").execute(&pool)).expect("table");
    let mut tx = rt.block_on(pool.begin()).expect("begin");
    rt.block_on(sqlx::query("INSERT INTO business VALUES (1)").execute(&mut *tx)).expect("business write");

    let mut runner = TestRunner::new(Config { cases: 400, failure_persistence: None, ..Config::default() });
    let (stored, rejected) = (Cell::new(0u32), Cell::new(0u32));
    let tx = RefCell::new(tx);
    let result = runner.run(&(field(), text()), |(field, value)| {
        let mut tx = tx.borrow_mut();
        match rt.block_on(outbox.enqueue(&mut **tx, event_with(field, &value))) {
            Ok(_) => stored.set(stored.get() + 1),
            Err(Error::InvalidEvent(_)) => rejected.set(rejected.get() + 1),
            Err(other) => return Err(TestCaseError::fail(format!("{field:?}: not a validation error: {other}"))),
        }
        let alive: i32 = rt
            .block_on(sqlx::query_scalar("SELECT 1").fetch_one(&mut **tx))
            .map_err(|e| TestCaseError::fail(format!("{field:?}: the transaction is no longer usable: {e}")))?;
        prop_assert_eq!(alive, 1);
        Ok(())
    });
    result.expect("every string is stored or rejected before any SQL");
    rt.block_on(tx.into_inner().commit()).expect("commit");
    let (stored, rejected) = (stored.get(), rejected.get());

    let business: i64 =
        rt.block_on(sqlx::query_scalar("SELECT count(*) FROM business").fetch_one(&pool)).expect("count business");
    let events: i64 =
        rt.block_on(sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(&pool)).expect("count events");
    assert_eq!(business, 1, "the business change committed");
    assert_eq!(events, i64::from(stored), "every accepted event committed with it");
    assert!(stored > 0 && rejected > 0, "the strings covered both outcomes ({stored} stored, {rejected} rejected)");
    rt.block_on(db.close()).expect("drop db");
}
