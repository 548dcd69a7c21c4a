//! The inbox middleware against the real PostgreSQL: effects applied once and in per-entity order,
//! whatever the order and number of deliveries.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use outbox_inbox::{Error, HandlerError, InboxLayer, InboxRequest, Outcome};
use outbox_testkit::TestDb;
use outbox_types::{Event, NewEvent};
use sqlx::PgPool;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

use crate::support::{apply, effects, effects_table};

fn event(entity: Option<(&str, u64)>, amount: i64) -> Event {
    let mut event = NewEvent::json("order.changed", &serde_json::json!({ "amount": amount }))
        .expect("json")
        .correlation_id("corr")
        .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    if let Some((key, _)) = entity {
        event = event.entity(key);
    }
    event.into_event(entity.map(|(_, seq)| seq), SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123))
}

/// The `apply` handler, except that while `fail` is set it refuses the events `refuse` picks, as a
/// permanent failure with `message`.
fn refusing(
    fail: &Arc<AtomicBool>,
    refuse: fn(&Event) -> bool,
    message: &'static str,
) -> impl Service<InboxRequest, Response = InboxRequest, Error = HandlerError, Future: Send> + Clone + Send + Sync + 'static
{
    let fail = fail.clone();
    tower::service_fn(move |req: InboxRequest| {
        let refused = fail.load(Ordering::SeqCst) && refuse(req.event());
        async move {
            if refused {
                return Err(HandlerError::permanent(message));
            }
            apply(req).await
        }
    })
}

#[tokio::test]
async fn the_same_event_delivered_three_times_is_applied_once() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(tower::service_fn(apply));
    let e = event(Some(("order-1", 1)), 10);
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        outcomes.push(svc.ready().await.expect("ready").call(e.clone()).await.expect("handled"));
    }
    assert_eq!(outcomes, [Outcome::Applied { successors: 0 }, Outcome::Duplicate, Outcome::Duplicate]);
    let unordered = event(None, 5);
    assert_eq!(svc.call(unordered.clone()).await.expect("handled"), Outcome::Applied { successors: 0 });
    assert_eq!(svc.call(unordered).await.expect("handled"), Outcome::Duplicate);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM effects").fetch_one(db.pool()).await.expect("count");
    assert_eq!(n, 2, "one effect per event");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn deliveries_3_1_2_are_applied_as_1_2_3_and_the_parked_one_needs_no_redelivery() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(tower::service_fn(apply));
    let (e1, e2, e3) = (event(Some(("o", 1)), 1), event(Some(("o", 2)), 2), event(Some(("o", 3)), 3));
    assert_eq!(svc.call(e3.clone()).await.expect("3"), Outcome::Parked);
    assert_eq!(svc.call(e1).await.expect("1"), Outcome::Applied { successors: 0 });
    assert_eq!(svc.call(e2).await.expect("2"), Outcome::Applied { successors: 1 }, "3 follows 2 at once");
    assert_eq!(effects(db.pool(), "o").await, [1, 2, 3]);
    // A late redelivery of 3 is a duplicate; a stale event (seq 2 with a new id) is dropped.
    assert_eq!(svc.call(e3).await.expect("3 again"), Outcome::Duplicate);
    assert_eq!(svc.call(event(Some(("o", 2)), 99)).await.expect("stale"), Outcome::Stale);
    assert_eq!(effects(db.pool(), "o").await, [1, 2, 3]);
    // The parked payload is not kept once applied.
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_events WHERE payload IS NOT NULL")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(kept, 0);
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn a_chain_of_parked_events_is_applied_up_to_its_first_hole() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(tower::service_fn(apply));
    for seq in [6, 3, 5, 2] {
        assert_eq!(svc.call(event(Some(("c", seq)), 0)).await.expect("parks"), Outcome::Parked, "{seq} parks");
    }
    assert_eq!(
        svc.call(event(Some(("c", 1)), 0)).await.expect("1"),
        Outcome::Applied { successors: 2 },
        "2, 3; 4 is missing"
    );
    assert_eq!(effects(db.pool(), "c").await, [1, 2, 3]);
    assert_eq!(svc.call(event(Some(("c", 4)), 0)).await.expect("4"), Outcome::Applied { successors: 2 }, "5, 6");
    assert_eq!(effects(db.pool(), "c").await, [1, 2, 3, 4, 5, 6]);
    assert_eq!(svc.call(event(Some(("c", 7)), 0)).await.expect("7"), Outcome::Applied { successors: 0 });
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn consumers_are_scoped_by_name_in_one_database() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let mut a = InboxLayer::new(db.pool().clone(), "a").layer(tower::service_fn(apply));
    let mut b = InboxLayer::new(db.pool().clone(), "b").layer(tower::service_fn(apply));
    let e = event(Some(("x", 1)), 1);
    assert_eq!(a.call(e.clone()).await.expect("a"), Outcome::Applied { successors: 0 });
    assert_eq!(b.call(e.clone()).await.expect("b"), Outcome::Applied { successors: 0 }, "b has not seen it");
    assert_eq!(a.call(e).await.expect("a again"), Outcome::Duplicate);
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn many_deliveries_of_one_entity_at_once_apply_in_order() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let svc = InboxLayer::new(db.pool().clone(), "shipping").layer(tower::service_fn(apply));
    let mut events: Vec<Event> = (1..=30).map(|s| event(Some(("hot", s)), s as i64)).collect();
    // Every event twice, in a shuffled order, eight at a time.
    events.extend(events.clone());
    use rand::seq::SliceRandom;
    events.shuffle(&mut rand::rng());
    let results = futures::future::join_all(events.into_iter().map(|e| {
        let mut svc = svc.clone();
        async move { svc.call(e).await }
    }))
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(effects(db.pool(), "hot").await, (1..=30).collect::<Vec<_>>());
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn a_permanent_failure_holds_back_the_entity_until_an_operator_retries() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let fail = Arc::new(AtomicBool::new(true));
    let handler =
        refusing(&fail, |e| e.entity.as_ref().is_some_and(|e| e.seq == 2), "order 2 is not valid for shipping");
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(handler);
    let e2 = event(Some(("p", 2)), 2);
    assert!(matches!(svc.call(event(Some(("p", 1)), 1)).await, Ok(Outcome::Applied { .. })));
    let err = svc.call(e2.clone()).await.expect_err("permanent failure");
    assert!(matches!(&err, Error::Handler(h) if h.message().contains("not valid")) && !err.is_retryable());
    assert_eq!(svc.call(event(Some(("p", 3)), 3)).await.expect("3"), Outcome::Parked, "3 parks behind the failed 2");
    assert_eq!(
        svc.call(e2.clone()).await.expect("redelivery"),
        Outcome::Duplicate,
        "dead-lettered, not retried by redelivery"
    );
    assert_eq!(effects(db.pool(), "p").await, [1]);

    let again = svc.retry_failed(e2.id).await.expect_err("the handler still refuses it");
    assert!(matches!(&again, Error::Handler(h) if h.message().contains("not valid")));
    assert_eq!(effects(db.pool(), "p").await, [1], "neither 2 nor 3 applied");

    fail.store(false, Ordering::SeqCst);
    assert_eq!(svc.retry_failed(e2.id).await.expect("retry"), Some(Outcome::Applied { successors: 1 }));
    assert_eq!(effects(db.pool(), "p").await, [1, 2, 3]);
    assert_eq!(svc.retry_failed(e2.id).await.expect("retry of an applied event"), None, "only failed events");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn an_unordered_event_that_fails_again_on_retry_stays_failed_until_it_applies() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let fail = Arc::new(AtomicBool::new(true));
    let handler = refusing(&fail, |_| true, "refused");
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(handler);
    let e = event(None, 7);
    svc.call(e.clone()).await.expect_err("permanent failure");
    svc.retry_failed(e.id).await.expect_err("fails again");
    let status: String = sqlx::query_scalar("SELECT status FROM inbox_events WHERE event_id = $1")
        .bind(e.id.as_uuid())
        .fetch_one(db.pool())
        .await
        .expect("status");
    assert_eq!(status, "failed", "still visible to operators and retryable");

    fail.store(false, Ordering::SeqCst);
    assert_eq!(svc.retry_failed(e.id).await.expect("retry"), Some(Outcome::Applied { successors: 0 }));
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM effects WHERE event_id = $1")
        .bind(e.id.as_uuid())
        .fetch_one(db.pool())
        .await
        .expect("effects");
    assert_eq!(applied, 1);
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn a_panicking_handler_is_a_transient_failure_and_the_service_survives() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let handler = tower::service_fn(move |req: InboxRequest| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                panic!("handler bug");
            }
            apply(req).await
        }
    });
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(handler);
    let e = event(Some(("z", 1)), 1);
    let err = svc.call(e.clone()).await.expect_err("panicked");
    assert!(matches!(err, Error::Panicked) && err.is_retryable());
    assert_eq!(
        svc.call(e).await.expect("second delivery"),
        Outcome::Applied { successors: 0 },
        "rolled back, so not a duplicate"
    );
    assert_eq!(effects(db.pool(), "z").await, [1]);
    db.close().await.expect("cleanup");
}

/// The inbox composes with tower's own layers: a retry around it re-runs the whole transaction on
/// a transient failure, a timeout and a concurrency limit wrap it like any service.
#[tokio::test]
async fn composes_with_tower_timeout_concurrency_limit_and_retry() {
    #[derive(Clone)]
    struct RetryTransient(usize);
    impl tower::retry::Policy<Event, Outcome, tower::BoxError> for RetryTransient {
        type Future = std::future::Ready<()>;
        fn retry(&mut self, _req: &mut Event, result: &mut Result<Outcome, tower::BoxError>) -> Option<Self::Future> {
            match result {
                Err(e) if e.downcast_ref::<Error>().is_some_and(Error::is_retryable) && self.0 > 0 => {
                    self.0 -= 1;
                    Some(std::future::ready(()))
                }
                _ => None,
            }
        }
        fn clone_request(&mut self, req: &Event) -> Option<Event> {
            Some(req.clone())
        }
    }

    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let flaky = tower::service_fn(move |req: InboxRequest| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            if n < 2 {
                return Err(HandlerError::transient("deadlock detected, try again"));
            }
            apply(req).await
        }
    });
    let mut svc = ServiceBuilder::new()
        .retry(RetryTransient(3))
        .concurrency_limit(4)
        .timeout(Duration::from_secs(5))
        .layer(InboxLayer::new(db.pool().clone(), "shipping"))
        .service(flaky);
    let outcome =
        svc.ready().await.expect("ready").call(event(Some(("r", 1)), 1)).await.expect("applied after retries");
    assert_eq!(outcome, Outcome::Applied { successors: 0 });
    assert_eq!(calls.load(Ordering::SeqCst), 3, "two transient failures, then success");
    assert_eq!(effects(db.pool(), "r").await, [1], "the failed attempts rolled back");

    // A timeout inside the handler stack is a transient failure that rolls back.
    let slow = tower::service_fn(|req: InboxRequest| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok::<_, HandlerError>(req)
    });
    let mut svc = InboxLayer::new(db.pool().clone(), "slow")
        .layer(ServiceBuilder::new().timeout(Duration::from_millis(100)).service(slow));
    let err = svc.call(event(Some(("s", 1)), 1)).await.expect_err("timed out");
    assert!(matches!(err, Error::Layer(_)) && err.is_retryable(), "{err:?}");
    let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_events WHERE consumer = 'slow'")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(seen, 0, "a timed-out attempt leaves no inbox record");
    db.close().await.expect("cleanup");
}

/// A gap that never fills is visible with its age, and an operator can skip it: the parked events
/// behind it are applied in order.
#[tokio::test]
async fn a_gap_is_visible_and_an_operator_can_skip_it() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(tower::service_fn(apply));
    assert!(matches!(svc.call(event(Some(("g", 1)), 1)).await, Ok(Outcome::Applied { .. })));
    assert_eq!(svc.call(event(Some(("g", 4)), 4)).await.expect("4"), Outcome::Parked);
    assert_eq!(svc.call(event(Some(("g", 5)), 5)).await.expect("5"), Outcome::Parked);

    let gaps = outbox_inbox::admin::list_gaps(db.pool(), "shipping").await.expect("gaps");
    assert_eq!(gaps.len(), 1);
    let gap = &gaps[0];
    assert_eq!((gap.entity_key.as_str(), gap.last_seq, gap.first_parked_seq, gap.parked), ("g", 1, 4, 2));
    assert!(gap.age_seconds >= 0.0 && gap.age_seconds < 60.0, "{gap:?}");
    let backlog = outbox_inbox::admin::backlog(db.pool(), "shipping").await.expect("backlog");
    assert_eq!((backlog.entities_with_gap, backlog.parked, backlog.failed), (1, 2, 0), "{backlog:?}");
    assert!(backlog.oldest_parked_age_seconds < 60.0, "{backlog:?}");
    let other = outbox_inbox::admin::backlog(db.pool(), "billing").await.expect("another consumer");
    assert_eq!((other.entities_with_gap, other.parked), (0, 0), "scoped by consumer");

    assert_eq!(svc.skip_gap("g").await.expect("skip"), 2, "4 and 5 applied after skipping 2 and 3");
    assert_eq!(effects(db.pool(), "g").await, [1, 4, 5]);
    assert!(outbox_inbox::admin::list_gaps(db.pool(), "shipping").await.expect("gaps").is_empty());
    let backlog = outbox_inbox::admin::backlog(db.pool(), "shipping").await.expect("backlog");
    assert_eq!((backlog.entities_with_gap, backlog.parked, backlog.oldest_parked_age_seconds), (0, 0, 0.0));
    assert_eq!(
        svc.call(event(Some(("g", 3)), 3)).await.expect("late 3"),
        Outcome::Stale,
        "a skipped number arriving late is stale"
    );
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn an_operator_can_skip_a_failed_event_and_its_entity_flows_again() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let handler = tower::service_fn(|req: InboxRequest| async move {
        if req.event().entity.as_ref().is_some_and(|e| e.seq == 2) {
            return Err(HandlerError::permanent("cannot ship to this address"));
        }
        apply(req).await
    });
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(handler);
    let e2 = event(Some(("s", 2)), 2);
    svc.call(event(Some(("s", 1)), 1)).await.expect("1");
    assert!(svc.call(e2.clone()).await.is_err());
    assert_eq!(svc.call(event(Some(("s", 3)), 3)).await.expect("3"), Outcome::Parked);
    let failed = outbox_inbox::admin::list_failed(db.pool(), "shipping").await.expect("failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].event_id, *e2.id.as_uuid());
    assert!(failed[0].last_error.as_deref().is_some_and(|e| e.contains("cannot ship")));
    let backlog = outbox_inbox::admin::backlog(db.pool(), "shipping").await.expect("backlog");
    assert_eq!((backlog.failed, backlog.parked, backlog.entities_with_gap), (1, 1, 1), "{backlog:?}");

    assert_eq!(svc.skip_failed(e2.id).await.expect("skip"), Some(1), "3 is applied once 2 is skipped");
    assert_eq!(effects(db.pool(), "s").await, [1, 3]);
    assert!(outbox_inbox::admin::list_failed(db.pool(), "shipping").await.expect("failed").is_empty());
    db.close().await.expect("cleanup");
}

/// Where a consumer that joins late starts an entity is a policy: strict from 1 (the default), or
/// from the first sequence it sees.
#[tokio::test]
async fn start_policy_decides_where_a_late_consumer_starts() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let mut strict = InboxLayer::new(db.pool().clone(), "strict").layer(tower::service_fn(apply));
    assert_eq!(strict.call(event(Some(("late", 7)), 7)).await.expect("7"), Outcome::Parked, "waits for 1..6");

    let mut joining = InboxLayer::new(db.pool().clone(), "joining")
        .start_policy(outbox_inbox::StartPolicy::FromFirstSeen)
        .layer(tower::service_fn(apply));
    assert_eq!(joining.call(event(Some(("late", 7)), 7)).await.expect("7"), Outcome::Applied { successors: 0 });
    assert_eq!(joining.call(event(Some(("late", 8)), 8)).await.expect("8"), Outcome::Applied { successors: 0 });
    assert_eq!(joining.call(event(Some(("late", 6)), 6)).await.expect("6"), Outcome::Stale);
    assert_eq!(effects(db.pool(), "late").await, [7, 8]);
    db.close().await.expect("cleanup");
}

async fn inbox_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM inbox_events").fetch_one(pool).await.expect("count")
}

#[tokio::test]
async fn a_batch_gives_each_event_the_outcome_of_a_single_delivery_in_one_commit() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(tower::service_fn(apply));
    let unordered = event(None, 1);
    assert_eq!(svc.call(unordered.clone()).await.expect("u"), Outcome::Applied { successors: 0 });
    assert_eq!(svc.call(event(Some(("a", 1)), 1)).await.expect("a1"), Outcome::Applied { successors: 0 });
    assert_eq!(svc.call(event(Some(("s", 1)), 1)).await.expect("s1"), Outcome::Applied { successors: 0 });
    assert_eq!(svc.call(event(Some(("s", 2)), 2)).await.expect("s2"), Outcome::Applied { successors: 0 });
    // c waits for its 1: its 2 and 3 are parked.
    assert_eq!(svc.call(event(Some(("c", 3)), 3)).await.expect("c3"), Outcome::Parked);
    assert_eq!(svc.call(event(Some(("c", 2)), 2)).await.expect("c2"), Outcome::Parked);

    let batch = vec![
        event(Some(("a", 2)), 2),  // next: applied
        unordered,                 // seen: duplicate
        event(Some(("b", 1)), 1),  // new entity: applied
        event(Some(("p", 3)), 3),  // ahead of 1 and 2: parked
        event(Some(("s", 2)), 22), // a new id for an applied sequence: stale
        event(None, 2),            // unordered, new: applied
        event(Some(("c", 1)), 1),  // next, and frees the parked 2 and 3
    ];
    let outcomes = svc.call_batch(batch).await.expect("batch");
    assert_eq!(
        outcomes,
        [
            Outcome::Applied { successors: 0 },
            Outcome::Duplicate,
            Outcome::Applied { successors: 0 },
            Outcome::Parked,
            Outcome::Stale,
            Outcome::Applied { successors: 0 },
            Outcome::Applied { successors: 2 },
        ]
    );
    assert_eq!(effects(db.pool(), "a").await, [1, 2]);
    assert_eq!(effects(db.pool(), "b").await, [1]);
    assert_eq!(effects(db.pool(), "s").await, [1, 2], "the stale one is not applied");
    assert_eq!(effects(db.pool(), "c").await, [1, 2, 3]);
    assert!(effects(db.pool(), "p").await.is_empty());
    let unordered: i64 =
        sqlx::query_scalar("SELECT count(*) FROM effects WHERE entity IS NULL").fetch_one(db.pool()).await.expect("u");
    assert_eq!(unordered, 2, "each unordered event once");
    // The event the batch parked waits like any parked event: its predecessors, arriving one at a
    // time, apply it.
    assert_eq!(svc.call(event(Some(("p", 1)), 1)).await.expect("p1"), Outcome::Applied { successors: 0 });
    assert_eq!(svc.call(event(Some(("p", 2)), 2)).await.expect("p2"), Outcome::Applied { successors: 1 });
    assert_eq!(effects(db.pool(), "p").await, [1, 2, 3]);
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn a_failing_handler_rolls_back_the_whole_batch_and_each_event_can_then_go_alone() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let fail = Arc::new(AtomicBool::new(true));
    let handler = refusing(&fail, |e| e.entity.as_ref().is_some_and(|e| e.key == "bad"), "not for shipping");
    let mut svc = InboxLayer::new(db.pool().clone(), "shipping").layer(handler);
    let batch = vec![event(Some(("x", 1)), 1), event(Some(("bad", 1)), 1), event(Some(("y", 1)), 1)];
    let err = svc.call_batch(batch.clone()).await.expect_err("the handler refuses one");
    assert!(matches!(&err, Error::Handler(h) if h.message().contains("not for shipping")), "{err}");
    assert!(effects(db.pool(), "x").await.is_empty(), "nothing of the batch committed");
    assert_eq!(inbox_rows(db.pool()).await, 0, "no event recorded as seen");
    let mut alone = Vec::new();
    for e in batch {
        alone.push(svc.call(e).await.map_err(|e| e.is_retryable()));
    }
    assert_eq!(alone, [Ok(Outcome::Applied { successors: 0 }), Err(false), Ok(Outcome::Applied { successors: 0 })]);
    assert_eq!(effects(db.pool(), "x").await, [1]);
    assert_eq!(effects(db.pool(), "y").await, [1]);
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn a_batch_with_a_repeated_id_or_entity_is_refused_before_any_write() {
    let db = TestDb::new().await.expect("db");
    effects_table(db.pool()).await;
    let svc = InboxLayer::new(db.pool().clone(), "shipping").layer(tower::service_fn(apply));
    let same_entity = vec![event(Some(("e", 1)), 1), event(Some(("e", 2)), 2)];
    assert!(matches!(svc.call_batch(same_entity).await, Err(Error::InvalidBatch("entity"))));
    let u = event(None, 1);
    assert!(matches!(svc.call_batch(vec![u.clone(), u]).await, Err(Error::InvalidBatch("event id"))));
    assert_eq!(inbox_rows(db.pool()).await, 0);
    assert!(effects(db.pool(), "e").await.is_empty());
    db.close().await.expect("cleanup");
}
