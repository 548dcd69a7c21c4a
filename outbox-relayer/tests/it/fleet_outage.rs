//! A fleet relaying several databases through a broker outage (a `ChaosProxy` in front of the
//! broker refuses every connection for a while): every database pauses, no event of any is charged
//! with an attempt or quarantined, and all of them resume once the broker answers, each event
//! published once, in per-entity order.

use std::time::Duration;

use outbox_producer::Outbox;
use outbox_relayer::AmqpPublisher;
use outbox_relayer::fleet::{Fleet, FleetDatabase};
use outbox_system_tests::count;
use outbox_system_tests::sizes::BROKER_OUTAGE;
use outbox_testkit::{ChaosProxy, TestDb, wait_for};
use outbox_types::RetryPolicy;
use uuid::Uuid;

use crate::support;

const DATABASES: usize = 5;
const ENTITIES: usize = 50;
const PER_ENTITY: usize = 40;
/// Events each database must still have to send when the broker goes: the outage is mid-drain
/// for every one of them.
const LEFT_AT_THE_CUT: i64 = 200;

/// Commits `PER_ENTITY` events for each of `ENTITIES` entities of database `d` (keys of its own).
async fn fill(db: &TestDb, d: usize) -> Vec<Uuid> {
    let mut tx = db.pool().begin().await.expect("begin");
    let events =
        (0..PER_ENTITY).flat_map(|_| (0..ENTITIES).map(|e| support::event(Some(&format!("db{d}-entity-{e}")))));
    let ids = Outbox::new().enqueue_many(&mut *tx, events).await.expect("enqueue");
    tx.commit().await.expect("commit");
    ids.into_iter().map(|id| *id.as_uuid()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_pauses_every_database_of_a_fleet_and_charges_no_event() {
    let h = support::env().await;
    let recorder = h.recorder();
    let mut dbs = Vec::new();
    let mut ids = Vec::new();
    for d in 0..DATABASES {
        let db = TestDb::new().await.expect("db");
        ids.extend(fill(&db, d).await);
        dbs.push(db);
    }
    let proxy = ChaosProxy::start("127.0.0.1:5672".parse().expect("addr")).await.expect("proxy");
    let url = format!("amqp://guest:guest@{}/%2f", proxy.addr());
    let publisher = AmqpPublisher::builder(url).connect_timeout(Duration::from_secs(2)).build_unchecked();
    let list =
        dbs.iter().enumerate().map(|(d, db)| FleetDatabase::new(format!("tenant-{d}"), db.connect_options().clone()));
    let databases = list.collect::<Result<Vec<_>, _>>().expect("names");
    // An outage charged to the events would exceed this policy's age and attempts many times over.
    let policy = RetryPolicy::default()
        .initial_delay(Duration::from_millis(200))
        .max_attempts(3)
        .max_age(Duration::from_secs(2));
    let exchange = h.exchange().to_owned();
    let fleet = Fleet::builder(publisher)
        .databases(databases)
        .look_every(Duration::from_millis(200))
        .relay(move |relay| {
            relay.exchange(exchange.clone()).declare_exchange(false).batch_size(50).retry_policy(policy)
        })
        .build()
        .expect("fleet")
        .spawn();
    wait_for("every database's drain under way", Duration::from_secs(60), || async {
        outbox_testkit::at_least(recorder.count(), 200)
    })
    .await
    .expect("under way");

    proxy.refuse();
    proxy.cut();
    let tried = proxy.connections();
    for db in &dbs {
        let left = count(db.pool(), "SELECT count(*) FROM outbox_events WHERE status <> 'published'").await;
        assert!(
            left >= LEFT_AT_THE_CUT,
            "{}: {left} events left at the cut; a backlog too small for this host",
            db.name()
        );
    }
    tokio::time::sleep(BROKER_OUTAGE.fast).await; // the outage itself
    for db in &dbs {
        let charged =
            count(db.pool(), "SELECT count(*) FROM outbox_events WHERE attempts > 1 OR last_error IS NOT NULL").await;
        assert_eq!(charged, 0, "the outage was charged to {charged} events of {}", db.name());
    }
    assert!(proxy.connections() >= tried + 2, "the fleet kept trying to reconnect during the outage");
    proxy.heal();

    wait_for("every database's events delivered", Duration::from_secs(120), || async {
        recorder.all_delivered(ids.iter().copied()).map_err(|missing| format!("{} missing", missing.len()))
    })
    .await
    .expect("nothing lost");
    recorder.in_entity_order().expect("per-entity order");
    for db in &dbs {
        wait_for("every row marked published", Duration::from_secs(30), || async {
            let published = count(db.pool(), "SELECT count(*) FROM outbox_events WHERE status = 'published'").await;
            outbox_testkit::equal(published, (ENTITIES * PER_ENTITY) as i64)
        })
        .await
        .expect("all marked");
        let (max_attempts, quarantined): (i32, i64) =
            sqlx::query_as("SELECT max(attempts), count(*) FILTER (WHERE status = 'quarantined') FROM outbox_events")
                .fetch_one(db.pool())
                .await
                .expect("attempts");
        assert_eq!((max_attempts, quarantined), (1, 0), "{}: only the attempt that reached the broker", db.name());
    }
    fleet.shutdown().await.expect("shutdown");
    for db in dbs {
        db.close().await.expect("drop");
    }
    h.close().await.expect("cleanup");
}
