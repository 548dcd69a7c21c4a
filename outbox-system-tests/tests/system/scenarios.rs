//! The ten failure scenarios of the design, each on the harness: an orders service writes its
//! changes and events, the relay publishes them, a shipping consumer applies one shipment per event
//! in its inbox. Each test checks the business outcome at the consumer (how many shipments, in what
//! order) and what can be traced afterwards (event ids, attempts, reasons).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_inbox::{HandlerError, InboxLayer, InboxRequest};
use outbox_ops::{Retention, admin};
use outbox_relayer::{CrashPoint, Error as RelayError, RelayBuilder};
use outbox_system_tests::{Load, count, sizes};
use outbox_testkit::{Fault, FaultyPublisher, Harness, HarnessBuilder, ReconciliationReport, wait_for};
use outbox_types::{
    ConfirmFuture, EventId, ExchangeKind, FailureKind, NewEvent, OutgoingMessage, PublishFailure, Publisher,
    RetryPolicy, Status,
};
use tower::Layer;
use uuid::Uuid;

const ORDERS: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, version bigint NOT NULL)";
const SHIPMENTS: &str =
    "CREATE TABLE shipments (n bigserial PRIMARY KEY, event_id uuid NOT NULL, entity text, seq bigint)";

/// The shipping consumer's handler: one shipment per event, in the inbox's transaction.
async fn ship(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let id = *req.event().id.as_uuid();
    let (entity, seq) = req.event().entity.as_ref().map(|e| (e.key.clone(), e.seq as i64)).unzip();
    sqlx::query("INSERT INTO shipments (event_id, entity, seq) VALUES ($1, $2, $3)")
        .bind(id)
        .bind(entity)
        .bind(seq)
        .execute(req.conn())
        .await?;
    Ok(req)
}

fn with_shipping() -> HarnessBuilder {
    Harness::builder().consumer(tower::service_fn(ship))
}

async fn start(builder: HarnessBuilder) -> Harness {
    let h = builder.start().await.expect("harness");
    sqlx::raw_sql(ORDERS).execute(h.pool()).await.expect("orders");
    sqlx::raw_sql(SHIPMENTS).execute(h.consumer_pool()).await.expect("shipments");
    h
}

fn order_event(order: i64) -> NewEvent {
    NewEvent::json("order.changed", &serde_json::json!({ "order_id": order }))
        .expect("json")
        .entity(format!("order-{order}"))
}

/// One business change: the order's next version and its event, in one transaction.
async fn change(h: &Harness, order: i64) -> Uuid {
    let mut tx = h.pool().begin().await.expect("begin");
    sqlx::query("INSERT INTO orders VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET version = orders.version + 1")
        .bind(order)
        .execute(&mut *tx)
        .await
        .expect("order");
    let id = h.outbox().enqueue(&mut *tx, order_event(order)).await.expect("enqueue");
    tx.commit().await.expect("commit");
    *id.as_uuid()
}

/// `versions` changes of each of orders `1..=orders`, one transaction per round of all orders;
/// returns the event ids in commit order.
async fn changes(h: &Harness, orders: i64, versions: usize) -> Vec<Uuid> {
    sqlx::query("INSERT INTO orders SELECT g, 0 FROM generate_series(1, $1) g ON CONFLICT DO NOTHING")
        .bind(orders)
        .execute(h.pool())
        .await
        .expect("orders");
    let mut ids = Vec::new();
    for _ in 0..versions {
        let mut tx = h.pool().begin().await.expect("begin");
        sqlx::query("UPDATE orders SET version = version + 1 WHERE id <= $1")
            .bind(orders)
            .execute(&mut *tx)
            .await
            .expect("update");
        let got = h.outbox().enqueue_many(&mut *tx, (1..=orders).map(order_event)).await.expect("enqueue");
        tx.commit().await.expect("commit");
        ids.extend(got.iter().map(|id| *id.as_uuid()));
    }
    ids
}

/// Waits until the consumer has shipped `n` times.
async fn wait_shipped(h: &Harness, n: i64, deadline: Duration) {
    wait_for(&format!("{n} shipments"), deadline, || async {
        outbox_testkit::at_least(count(h.consumer_pool(), "SELECT count(*) FROM shipments").await, n)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Per entity, the sequences shipped, in the order the consumer applied them.
async fn shipped(h: &Harness) -> HashMap<String, Vec<i64>> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT entity, seq FROM shipments WHERE entity IS NOT NULL ORDER BY n")
            .fetch_all(h.consumer_pool())
            .await
            .expect("shipments");
    let mut map: HashMap<String, Vec<i64>> = HashMap::new();
    for (entity, seq) in rows {
        map.entry(entity).or_default().push(seq);
    }
    map
}

/// Every order `1..=orders` shipped exactly `1..=versions`, in that order.
async fn assert_shipped_once_in_order(h: &Harness, orders: i64, versions: i64) {
    let shipped = shipped(h).await;
    assert_eq!(shipped.len() as i64, orders, "orders shipped");
    let expected: Vec<i64> = (1..=versions).collect();
    for (entity, seqs) in shipped {
        assert_eq!(seqs, expected, "{entity}: shipments once each, in order");
    }
}

/// Reconciles orders, outbox, broker and shipments, once the recorder has caught up. The recorder
/// reads its queue apart from the consumer under test and, in a debug build on a busy host, can
/// trail a 50,000-event backlog by a minute or more.
async fn reconcile(h: &Harness) -> ReconciliationReport {
    h.wait_delivered(Duration::from_secs(180)).await.expect("the recorder caught up");
    h.reconcile()
        .entity_versions("SELECT 'order-' || id, version FROM orders")
        .effects("SELECT event_id FROM shipments")
        .run()
        .await
        .expect("reconcile")
}

async fn attempts(h: &Harness, id: Uuid) -> (String, i32, Option<String>, Option<String>) {
    sqlx::query_as("SELECT status, attempts, last_error_kind, last_error FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(h.pool())
        .await
        .expect("row")
}

fn stats(h: &Harness) -> outbox_inbox::RunnerStats {
    h.consumer_handle().map(|c| c.stats()).unwrap_or_default()
}

#[tokio::test]
async fn scenario_01_rollback_leaves_no_event() {
    let h = start(with_shipping()).await;
    let mut tx = h.pool().begin().await.expect("begin");
    sqlx::query("INSERT INTO orders VALUES (1, 1)").execute(&mut *tx).await.expect("order");
    h.outbox().enqueue(&mut *tx, order_event(1)).await.expect("enqueue");
    h.outbox().enqueue(&mut *tx, NewEvent::json("audit.noted", &1).expect("json")).await.expect("unordered");
    tx.rollback().await.expect("rollback");
    assert_eq!(count(h.pool(), "SELECT count(*) FROM outbox_events").await, 0, "no row after a rollback");

    // The next committed changes ship; the rolled-back one never does, and numbering starts at 1.
    let two = change(&h, 2).await;
    let one = change(&h, 1).await;
    wait_shipped(&h, 2, Duration::from_secs(20)).await;
    h.wait_until_no_pending(Duration::from_secs(10)).await.expect("published");
    let mut got: Vec<(Uuid, String, i64)> =
        sqlx::query_as("SELECT event_id, entity, seq FROM shipments").fetch_all(h.pool()).await.expect("shipments");
    got.sort();
    let mut expected = vec![(one, "order-1".to_owned(), 1), (two, "order-2".to_owned(), 1)];
    expected.sort();
    assert_eq!(got, expected, "one shipment per committed change, traced by event id");
    let report = reconcile(&h).await;
    assert!(report.is_clean() && report.business_changes == 2, "{report}");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn scenario_02_broker_down_event_waits_then_goes_out() {
    let h = start(with_shipping().relay_through_proxy()).await;
    let proxy = h.relay_proxy().expect("proxy");
    proxy.refuse();
    proxy.cut(); // the broker is unreachable for the relay
    let ids = changes(&h, 3, 2).await;

    // The relay keeps trying to reach the broker; the events wait, charged with nothing: an outage
    // is not the events' failure (no attempts, no backoff of their own, no quarantine).
    let tried = proxy.connections();
    wait_for("the relay to try the broker again", Duration::from_secs(30), || async {
        outbox_testkit::at_least(proxy.connections(), tried + 3)
    })
    .await
    .expect("reconnect attempts");
    assert_eq!(
        count(h.pool(), "SELECT count(*) FROM outbox_events WHERE attempts > 0 OR last_error IS NOT NULL").await,
        0
    );
    assert_eq!(h.count_status(Status::Published).await.expect("count"), 0);
    assert_eq!(h.count_status(Status::Quarantined).await.expect("count"), 0, "an outage does not quarantine");
    assert_eq!(h.recorder().count(), 0);
    assert_eq!(count(h.pool(), "SELECT count(*) FROM shipments").await, 0, "nothing shipped during the outage");

    // The broker is back: everything ships once, in order, with the same ids.
    proxy.heal();
    wait_shipped(&h, 6, Duration::from_secs(40)).await;
    h.wait_until_no_pending(Duration::from_secs(10)).await.expect("published");
    assert_shipped_once_in_order(&h, 3, 2).await;
    h.recorder().wait_all_delivered(ids.iter().copied(), Duration::from_secs(30)).await.expect("nothing lost");
    let (_, tries, _, _) = attempts(&h, ids[0]).await;
    assert_eq!(tries, 1, "the head of order 1 is charged only with the attempt that reached the broker");
    let report = reconcile(&h).await;
    assert!(report.is_clean(), "{report}");
    assert!(report.broker.as_ref().is_some_and(|b| b.duplicates.is_empty()));
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn scenario_03_relay_dies_before_publishing() {
    let mut h = start(with_shipping().defer_relay()).await;
    // 50 orders with 12 versions each: the dead relay holds the heads (and, its batch of 55 not
    // full with them, the second version of five orders: runs of an entity); 545 successors wait
    // behind them, more than the restarted relay scans per claim.
    changes(&h, 50, 12).await;
    h.start_relay_with(|b| b.batch_size(55).confirm_window(55).crash_at(CrashPoint::AfterClaim)).await.expect("relay");
    assert!(matches!(h.join_relay().await, Some(Err(RelayError::Crashed))), "stopped at the crash point");
    let held: Vec<(Uuid, i64)> =
        sqlx::query_as("SELECT id, seq FROM outbox_events WHERE lease_owner IS NOT NULL ORDER BY position")
            .fetch_all(h.pool())
            .await
            .expect("claims");
    assert_eq!(held.len(), 55, "the dead relay held a full batch");
    assert_eq!(held.iter().filter(|(_, seq)| *seq == 1).count(), 50, "the dead relay held the heads of the 50 orders");
    let held: Vec<Uuid> = held.into_iter().map(|(id, _)| id).collect();

    // Generous timings for the successor, so that a slow machine cannot add attempts of its own.
    let patient = |b: RelayBuilder<_>| {
        b.batch_size(50).confirm_window(100).lease(Duration::from_secs(30)).confirm_timeout(Duration::from_secs(20))
    };
    h.start_relay_with(patient).await.expect("relay");
    wait_shipped(&h, 600, Duration::from_secs(120)).await;
    h.wait_until_no_pending(Duration::from_secs(10)).await.expect("published");
    assert_shipped_once_in_order(&h, 50, 12).await;
    for id in held {
        let (status, tries, _, _) = attempts(&h, id).await;
        assert_eq!((status.as_str(), tries), ("published", 2), "claimed by the dead relay, then taken over");
    }
    let report = reconcile(&h).await;
    assert!(report.is_clean(), "{report}");
    assert!(report.broker.as_ref().is_some_and(|b| b.duplicates.is_empty()), "nothing was sent before the crash");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn scenario_04_relay_dies_after_publish_before_mark() {
    let mut h = start(with_shipping().defer_relay()).await;
    let ids = changes(&h, 6, 2).await;
    h.start_relay_with(|b| b.batch_size(6).confirm_window(6).crash_at(CrashPoint::AfterConfirmBeforeMark))
        .await
        .expect("relay");
    assert!(matches!(h.join_relay().await, Some(Err(RelayError::Crashed))));
    h.recorder().wait_for_count(6, Duration::from_secs(10)).await.expect("the first batch reached the broker");
    let first = h.recorder().ids();
    assert_eq!(h.count_status(Status::Published).await.expect("count"), 0, "nothing was marked");

    h.start_relay().await.expect("relay");
    wait_shipped(&h, 12, Duration::from_secs(30)).await;
    wait_for("the six copies dropped by the inbox", Duration::from_secs(20), || async {
        outbox_testkit::equal(stats(&h).duplicates, 6)
    })
    .await
    .expect("duplicates dropped");
    h.wait_until_no_pending(Duration::from_secs(10)).await.expect("published");
    assert_shipped_once_in_order(&h, 6, 2).await;
    // The recorder's queue is read apart from the shipping consumer and may trail it.
    h.recorder().wait_for_count(18, Duration::from_secs(30)).await.expect("both publishes of the batch recorded");
    let dups = h.recorder().duplicates();
    assert_eq!(dups.keys().copied().collect::<HashSet<_>>(), first, "exactly the unmarked batch went out again");
    assert!(dups.values().all(|n| *n == 2), "{dups:?}");
    for id in &first {
        assert_eq!(attempts(&h, *id).await.1, 2, "republished with the same id on the second attempt");
    }
    h.recorder().wait_all_delivered(ids, Duration::from_secs(30)).await.expect("nothing lost");
    let report = reconcile(&h).await;
    assert!(report.is_clean(), "broker copies are allowed, double shipments are not: {report}");
    h.close().await.expect("cleanup");
}

/// Counts, across relays, how many times each event is in flight (sent, confirm not settled).
#[derive(Debug, Default)]
struct Flights {
    in_flight: HashMap<Uuid, usize>,
    max_concurrent: usize,
    sends: HashMap<Uuid, i32>,
    per_relay: HashMap<usize, usize>,
}

/// A publisher that records every send into shared [`Flights`] (one per relay, one shared record).
struct Probe<P> {
    relay: usize,
    inner: P,
    flights: Arc<Mutex<Flights>>,
}

/// Takes an event off the in-flight count when its confirm settles or is given up.
struct Landing(Arc<Mutex<Flights>>, Uuid);

impl Drop for Landing {
    fn drop(&mut self) {
        if let Ok(mut f) = self.0.lock()
            && let Some(n) = f.in_flight.get_mut(&self.1)
        {
            *n -= 1;
        }
    }
}

impl<P: Publisher> Publisher for Probe<P> {
    async fn publish(&self, batch: Vec<OutgoingMessage>) -> Vec<ConfirmFuture> {
        let ids: Vec<Uuid> = batch.iter().map(|m| *m.event_id.as_uuid()).collect();
        if let Ok(mut f) = self.flights.lock() {
            *f.per_relay.entry(self.relay).or_default() += ids.len();
            for id in &ids {
                *f.sends.entry(*id).or_default() += 1;
                let n = f.in_flight.entry(*id).or_default();
                *n += 1;
                let n = *n;
                f.max_concurrent = f.max_concurrent.max(n);
            }
        }
        let confirms = self.inner.publish(batch).await;
        confirms
            .into_iter()
            .zip(ids)
            .map(|(confirm, id)| {
                let landing = Landing(self.flights.clone(), id);
                Box::pin(async move {
                    let outcome = confirm.await;
                    drop(landing);
                    outcome
                }) as ConfirmFuture
            })
            .collect()
    }

    async fn declare_exchange(&self, exchange: &str, kind: ExchangeKind) -> Result<(), PublishFailure> {
        self.inner.declare_exchange(exchange, kind).await
    }
    async fn connect(&self) -> Result<(), PublishFailure> {
        self.inner.connect().await
    }
}

#[tokio::test]
async fn scenario_05_two_relays_never_publish_a_row_concurrently() {
    let h = start(with_shipping().defer_relay()).await;
    // More orders with a ready event than one relay's confirm window holds (40), so that every
    // relay finds work at once whatever the timing: the first cannot take it all.
    changes(&h, 100, 5).await;
    let flights = Arc::new(Mutex::new(Flights::default()));
    let mut relays = Vec::new();
    for relay in 0..3 {
        let faulty = FaultyPublisher::new(h.new_publisher());
        if relay == 0 {
            // Confirms later than the relay's timeout: those rows are retried (same id), never
            // while the first attempt is still in flight (the lease outlasts the timeout by far).
            faulty.inject(5, Fault::DelayConfirm(Duration::from_millis(1500)));
        }
        let probe = Probe { relay, inner: faulty, flights: flights.clone() };
        let builder = h
            .relay_builder_with(probe)
            .relay_id(format!("relay-{relay}"))
            .batch_size(20)
            .confirm_window(40)
            .confirm_timeout(Duration::from_secs(1))
            .lease(Duration::from_secs(10));
        relays.push(builder.build().expect("relay").spawn());
    }
    wait_shipped(&h, 500, Duration::from_secs(120)).await;
    h.wait_until_no_pending(Duration::from_secs(20)).await.expect("published");
    for relay in relays {
        relay.shutdown().await.expect("shutdown");
    }
    assert_shipped_once_in_order(&h, 100, 5).await;
    let rows: Vec<(Uuid, i32)> =
        sqlx::query_as("SELECT id, attempts FROM outbox_events").fetch_all(h.pool()).await.expect("rows");
    let flights = std::mem::take(&mut *flights.lock().expect("flights"));
    assert_eq!(flights.max_concurrent, 1, "an event was in flight on two relays at once");
    assert!(flights.per_relay.len() >= 2, "the relays shared the work: {:?}", flights.per_relay);
    for (id, tries) in &rows {
        assert_eq!(flights.sends.get(id), Some(tries), "sent once per recorded attempt");
    }
    assert!(rows.iter().filter(|(_, n)| *n == 2).count() >= 5, "the late confirms were retried");
    let report = reconcile(&h).await;
    assert!(report.is_clean(), "{report}");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn scenario_06_entity_events_arrive_in_order() {
    let h = start(with_shipping()).await;
    // Ten publishes are nacked: each is retried, and its successors wait for it.
    h.faults().inject(10, Fault::Nack);
    let ids = changes(&h, 5, 40).await;
    wait_shipped(&h, 200, Duration::from_secs(120)).await;
    h.wait_until_no_pending(Duration::from_secs(10)).await.expect("published");
    assert_shipped_once_in_order(&h, 5, 40).await;
    h.recorder().wait_all_delivered(ids, Duration::from_secs(30)).await.expect("nothing lost");
    h.recorder().in_entity_order().expect("the broker received every order's events in order");
    let extra_attempts = count(
        h.pool(),
        "SELECT coalesce(sum(attempts - 1), 0)::bigint FROM outbox_events
         WHERE status = 'published' AND (attempts = 1 OR last_error_kind = 'transient')",
    )
    .await;
    assert_eq!(extra_attempts, 10, "one recorded, transient, extra attempt per nack");
    assert_eq!(count(h.consumer_pool(), "SELECT count(*) FROM inbox_events WHERE status <> 'processed'").await, 0);
    let report = reconcile(&h).await;
    assert!(report.is_clean(), "{report}");
    h.close().await.expect("cleanup");
}

async fn enqueue_one(h: &Harness, event_type: &str, entity: &str, pad: usize) -> Uuid {
    let event = NewEvent::json(event_type, &serde_json::json!({ "pad": "x".repeat(pad) })).expect("json");
    let mut tx = h.pool().begin().await.expect("begin");
    let id = h.outbox().enqueue(&mut *tx, event.entity(entity)).await.expect("enqueue");
    tx.commit().await.expect("commit");
    *id.as_uuid()
}

#[tokio::test]
async fn scenario_07_rejected_payload_is_quarantined_others_flow() {
    // The broker takes at most 4 KiB here, and only `order.*` is routed anywhere.
    let mut h =
        start(with_shipping().defer_relay().publisher(|b| b.max_message_bytes(4 * 1024)).bindings(&["order.*"])).await;
    let too_big = enqueue_one(&h, "order.changed", "A", 8 * 1024).await;
    let a_later = [enqueue_one(&h, "order.changed", "A", 10).await, enqueue_one(&h, "order.changed", "A", 10).await];
    let unroutable = enqueue_one(&h, "audit.recorded", "B", 10).await;
    let b_later = enqueue_one(&h, "order.changed", "B", 10).await;
    for _ in 0..5 {
        enqueue_one(&h, "order.changed", "C", 10).await;
    }
    h.start_relay().await.expect("relay");

    wait_shipped(&h, 5, Duration::from_secs(20)).await;
    wait_for("two quarantined events", Duration::from_secs(10), || async {
        (admin::list_quarantined(h.pool(), 10).await.ok()?.len() == 2).then_some(())
    })
    .await
    .expect("quarantined");
    let shipped_now = shipped(&h).await;
    assert_eq!(shipped_now.get("C"), Some(&vec![1, 2, 3, 4, 5]), "the other entity flows");
    assert!(!shipped_now.contains_key("A") && !shipped_now.contains_key("B"), "their entities wait");
    let (status, tries, kind, reason) = attempts(&h, too_big).await;
    assert_eq!((status.as_str(), tries, kind.as_deref()), ("quarantined", 1, Some("rejected")));
    assert!(reason.as_deref().is_some_and(|r| r.contains("bytes")), "{reason:?}");
    let (status, tries, kind, reason) = attempts(&h, unroutable).await;
    assert_eq!((status.as_str(), tries, kind.as_deref()), ("quarantined", 1, Some("rejected")));
    assert!(reason.as_deref().is_some_and(|r| r.contains("312")), "NO_ROUTE expected: {reason:?}");
    let listed = admin::list_quarantined(h.pool(), 10).await.expect("list");
    assert!(listed.iter().all(|q| q.last_error_kind == Some(FailureKind::Rejected)));
    for id in a_later.iter().chain([&b_later]) {
        assert_eq!(attempts(&h, *id).await.0, "pending");
    }

    // The operator skips the oversized event and fixes the routing of the other, then retries it.
    assert!(admin::skip(h.pool(), EventId::from_uuid(too_big)).await.expect("skip"));
    for queue in [h.queue(), h.recorder_queue()] {
        h.broker().bind(queue, h.exchange(), "audit.*").await.expect("bind");
    }
    assert!(admin::retry(h.pool(), EventId::from_uuid(unroutable)).await.expect("retry"));
    assert!(!admin::retry(h.pool(), EventId::from_uuid(unroutable)).await.expect("again"), "no longer quarantined");
    wait_shipped(&h, 7, Duration::from_secs(20)).await;
    // A's first event never comes: its later ones wait at the consumer as a visible gap, which the
    // consumer's operator skips.
    wait_for("A's gap visible at the consumer", Duration::from_secs(10), || async {
        let gaps = outbox_inbox::admin::list_gaps(h.consumer_pool(), h.consumer_name()).await.ok()?;
        gaps.iter().any(|g| g.entity_key == "A" && g.parked == 2 && g.first_parked_seq == 2).then_some(())
    })
    .await
    .expect("gap");
    let inbox = InboxLayer::new(h.consumer_pool().clone(), h.consumer_name()).layer(tower::service_fn(ship));
    // The skip applies the two parked events, unless the running consumer's sweep of parked
    // events, which may run right after the skip's commit, applies some of them first: either
    // way both are applied, once and in order, when the skip returns.
    let applied = inbox.skip_gap("A").await.expect("skip gap");
    assert!(applied <= 2, "{applied} applied by the skip");

    let shipped = shipped(&h).await;
    assert_eq!(shipped.get("A"), Some(&vec![2, 3]), "A continues after the skipped 1");
    assert_eq!(shipped.get("B"), Some(&vec![1, 2]), "B's retried event keeps its place");
    assert!(!h.recorder().ids().contains(&too_big), "the rejected event never reached a queue");
    let (status, _, _, reason) = attempts(&h, too_big).await;
    assert_eq!(status, "skipped");
    assert!(reason.as_deref().is_some_and(|r| r.contains("skipped by an operator")), "{reason:?}");
    h.wait_until_no_pending(Duration::from_secs(10)).await.expect("marked");
    h.wait_delivered(Duration::from_secs(60)).await.expect("the recorder caught up");
    let report = h.reconcile().effects("SELECT event_id FROM shipments").run().await.expect("reconcile");
    assert_eq!(report.skipped.iter().map(|e| e.id).collect::<Vec<_>>(), [too_big], "{report}");
    let broker = report.broker.as_ref().expect("broker");
    let inbox = report.inbox.as_ref().expect("inbox");
    assert!(report.unpublished.is_empty() && broker.not_delivered.is_empty() && broker.duplicates.is_empty());
    assert!(inbox.not_applied.is_empty() && inbox.applied_twice.is_empty(), "{report}");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn scenario_08_backlog_drains_in_order() {
    backlog_drains_in_order(sizes::SCENARIO_BACKLOG.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn scenario_08_backlog_drains_in_order_long_tier() {
    backlog_drains_in_order(sizes::SCENARIO_BACKLOG.long).await;
}

/// The backlog: `load.per_entity` versions of each of `load.entities` orders, written while no
/// relay runs. Every event is applied by the consumer in its own transaction, which bounds the
/// speed of a debug build.
async fn backlog_drains_in_order(load: Load) {
    let mut h = start(with_shipping().defer_relay()).await;
    let ids = changes(&h, load.entities as i64, load.per_entity).await;
    let total = ids.len() as i64;
    let started = std::time::Instant::now();
    h.start_relay().await.expect("relay");
    wait_shipped(&h, total, Duration::from_secs(240)).await;
    let drained = started.elapsed();
    h.wait_until_no_pending(Duration::from_secs(20)).await.expect("published");
    println!("backlog of {total} events published and shipped in {drained:?}");

    let out_of_order = count(
        h.consumer_pool(),
        "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY entity ORDER BY n) AS prev FROM shipments) s
         WHERE seq <> coalesce(prev, 0) + 1",
    )
    .await;
    assert_eq!(out_of_order, 0, "every order shipped 1, 2, 3... in order");
    assert_eq!(count(h.consumer_pool(), "SELECT count(DISTINCT event_id) FROM shipments").await, total);
    assert_eq!(count(h.consumer_pool(), "SELECT count(*) FROM shipments").await, total, "once each");
    h.recorder().in_entity_order().expect("order at the broker");
    let report = reconcile(&h).await;
    assert!(report.is_clean() && report.published == ids.len(), "{report}");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn scenario_09_cleanup_never_deletes_pending() {
    // A failed publish waits an hour for its retry.
    let hour = Duration::from_secs(3600);
    let mut h = start(
        with_shipping().relay(move |b| b.retry_policy(RetryPolicy::default().initial_delay(hour).max_delay(hour))),
    )
    .await;
    // Published (then old enough to go).
    change(&h, 1).await;
    change(&h, 1).await;
    wait_shipped(&h, 2, Duration::from_secs(20)).await;
    // Quarantined, with a successor held behind it.
    h.faults().inject(1, Fault::Unroutable);
    let quarantined = change(&h, 2).await;
    wait_for("quarantined", Duration::from_secs(10), || async {
        outbox_testkit::equal(attempts(&h, quarantined).await.0, "quarantined")
    })
    .await
    .expect("quarantined");
    let held = change(&h, 2).await;
    // Skipped by an operator (an unordered event).
    h.faults().inject(1, Fault::Unroutable);
    let mut tx = h.pool().begin().await.expect("begin");
    let skipped =
        h.outbox().enqueue(&mut *tx, NewEvent::json("audit.noted", &1).expect("json")).await.expect("enqueue");
    tx.commit().await.expect("commit");
    wait_for("skippable", Duration::from_secs(10), || async {
        admin::skip(h.pool(), skipped).await.ok()?.then_some(())
    })
    .await
    .expect("skipped");
    // Waiting for its retry.
    h.faults().inject(1, Fault::Fail(FailureKind::Transient));
    let retrying = change(&h, 3).await;
    wait_for("failed once", Duration::from_secs(10), || async {
        (attempts(&h, retrying).await.1 == 1 && h.faults().pending() == 0).then_some(())
    })
    .await
    .expect("retry scheduled");
    // In flight: claimed by a relay that died before publishing.
    h.start_relay_with(|b| b.crash_at(CrashPoint::AfterClaim)).await.expect("relay");
    let in_flight = change(&h, 4).await;
    assert!(matches!(h.join_relay().await, Some(Err(RelayError::Crashed))));
    // Never attempted.
    let fresh = change(&h, 5).await;
    // Everything is two days old.
    sqlx::query(
        "UPDATE outbox_events SET created_at = created_at - interval '2 days',
             published_at = published_at - interval '2 days', quarantined_at = quarantined_at - interval '2 days'",
    )
    .execute(h.pool())
    .await
    .expect("age");

    let retention = Retention::builder(Duration::from_secs(86_400)).batch_size(1).include_skipped(true).build();
    let deleted = retention.expect("retention").run(h.pool()).await.expect("cleanup");
    assert_eq!(deleted, 3, "the two published rows and the skipped one, one per batch");
    let mut left: Vec<(Uuid, String, bool)> =
        sqlx::query_as("SELECT id, status, lease_owner IS NOT NULL FROM outbox_events")
            .fetch_all(h.pool())
            .await
            .expect("rows");
    left.sort();
    let mut expected = vec![
        (quarantined, "quarantined".to_owned(), false),
        (held, "pending".to_owned(), false),
        (retrying, "pending".to_owned(), false),
        (in_flight, "pending".to_owned(), true),
        (fresh, "pending".to_owned(), false),
    ];
    expected.sort();
    assert_eq!(left, expected, "every pending, in-flight, retrying and quarantined row is still there");

    // Numbers are not reused, and everything left still ships in order once released.
    change(&h, 1).await;
    assert_eq!(count(h.pool(), "SELECT max(seq) FROM outbox_events WHERE entity_key = 'order-1'").await, 3);
    h.start_relay().await.expect("relay");
    assert!(admin::retry(h.pool(), EventId::from_uuid(quarantined)).await.expect("retry"));
    wait_shipped(&h, 7, Duration::from_secs(30)).await;
    let shipped = shipped(&h).await;
    for (order, seqs) in
        [("order-1", vec![1, 2, 3]), ("order-2", vec![1, 2]), ("order-4", vec![1]), ("order-5", vec![1])]
    {
        assert_eq!(shipped.get(order), Some(&seqs), "{order}");
    }
    assert!(!shipped.contains_key("order-3"), "the retry is an hour away");
    // The consumer may apply an event before the relay has marked it published.
    wait_for("only the retrying row pending", Duration::from_secs(10), || async {
        (h.count_status(Status::Pending).await.ok()? == 1).then_some(())
    })
    .await
    .expect("marked");
    let report = reconcile(&h).await;
    assert_eq!(report.pruned, 2, "{report}");
    assert_eq!(report.unpublished.iter().map(|u| u.event.id).collect::<Vec<_>>(), [retrying], "{report}");
    assert!(report.changes_without_event.is_empty() && report.skipped.is_empty(), "{report}");
    let inbox = report.inbox.as_ref().expect("inbox");
    assert!(inbox.unknown_applied.is_empty() && inbox.applied_twice.is_empty(), "{report}");
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn scenario_10_reconciliation_proves_every_change_has_its_event() {
    let h = start(with_shipping().separate_consumer_database()).await;
    changes(&h, 20, 5).await;
    wait_shipped(&h, 100, Duration::from_secs(30)).await;
    h.wait_until_no_pending(Duration::from_secs(10)).await.expect("published");
    let report = reconcile(&h).await;
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.business_changes, report.published), (100, 100));
    let inbox = report.inbox.as_ref().expect("inbox");
    assert_eq!((inbox.applied, inbox.effects), (100, Some(100)), "one shipment per change, in the consumer's database");

    // A code path that writes the business change but forgets its event is caught.
    sqlx::query("UPDATE orders SET version = version + 1 WHERE id = 7").execute(h.pool()).await.expect("update");
    let report = reconcile(&h).await;
    assert!(!report.is_clean());
    assert_eq!(report.changes_without_event, [outbox_testkit::Change::Entity { key: "order-7".into(), version: 6 }]);
    assert!(report.to_string().contains("order-7 version 6"), "{report}");
    h.close().await.expect("cleanup");
}
