//! Replay through the whole system: a consumer that joins a running system late is bootstrapped by
//! a replay to its queue while live traffic continues (its live events parked until the replayed
//! ones before them arrive), and a replay to every consumer is dropped as duplicates by the ones
//! that applied the events.

use std::time::Duration;

use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner, RunnerHandle, Topology};
use outbox_ops::replay::{self, JobState, NewReplayJob, ReplaySelection, ReplayTarget};
use outbox_relayer::replay::Replayer;
use outbox_relayer::{AmqpPublisher, Relay, RelayHandle};
use outbox_system_tests::sizes::{REPLAY_BOOTSTRAP, REPLAY_DUPLICATES};
use outbox_system_tests::{Load, fill};
use outbox_testkit::{TestBroker, TestDb, at_least, equal, wait_for};
use tower::Layer;

const DEADLINE: Duration = Duration::from_secs(120);

/// Records the event as applied by `consumer`, and whether it came from a replay.
async fn applied(consumer: String, mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let event = req.event();
    let (entity, seq) = event.entity.as_ref().map(|e| (e.key.clone(), e.seq as i64)).unzip();
    let replayed = event.headers.contains_key(outbox_types::wire::HEADER_REPLAY);
    sqlx::query("INSERT INTO applied (consumer, entity, seq, replayed) VALUES ($1, $2, $3, $4)")
        .bind(consumer)
        .bind(entity)
        .bind(seq)
        .bind(replayed)
        .execute(req.conn())
        .await?;
    Ok(req)
}

fn consumer(db: &TestDb, name: &str, topology: &Topology) -> RunnerHandle {
    let named = name.to_owned();
    let handler = tower::service_fn(move |req| applied(named.clone(), req));
    let service = InboxLayer::new(db.pool().clone(), name).layer(handler);
    InboxRunner::builder(outbox_testkit::amqp_url(), service).topology(topology).build().expect("runner").spawn()
}

fn publisher() -> AmqpPublisher {
    AmqpPublisher::builder(outbox_testkit::amqp_url()).build().expect("publisher")
}

fn relay(db: &TestDb, topology: &Topology) -> RelayHandle {
    Relay::builder(db.pool(), publisher()).topology(topology).build().expect("relay").spawn()
}

async fn setup() -> (TestDb, TestBroker) {
    let db = TestDb::new().await.expect("database");
    sqlx::raw_sql(
        "CREATE TABLE applied (id bigserial PRIMARY KEY, consumer text NOT NULL, entity text NOT NULL, \
         seq bigint NOT NULL, replayed boolean NOT NULL)",
    )
    .execute(db.pool())
    .await
    .expect("applied table");
    (db, TestBroker::new().await.expect("broker"))
}

async fn count(db: &TestDb, sql: &'static str, consumer: &str) -> i64 {
    sqlx::query_scalar(sql).bind(consumer).fetch_one(db.pool()).await.expect("count")
}

async fn published(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
        .fetch_one(db.pool())
        .await
        .expect("published")
}

/// Waits until `consumer` applied `events`, then checks: each event once, each entity's in
/// sequence order.
async fn applied_once_in_order(db: &TestDb, consumer: &str, events: usize) {
    wait_for(&format!("{consumer} applied every event"), DEADLINE, || async {
        equal(count(db, "SELECT count(*) FROM applied WHERE consumer = $1", consumer).await, events as i64)
    })
    .await
    .expect("applied");
    let out_of_order = count(
        db,
        "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY entity ORDER BY id) AS n \
         FROM applied WHERE consumer = $1) a WHERE seq <> n",
        consumer,
    )
    .await;
    assert_eq!(out_of_order, 0, "{consumer}: each entity's events applied once, in sequence order");
}

async fn bootstrap_by_replay(load: Load) {
    let (db, broker) = setup().await;
    let first = broker.topology("orders", "first");
    let relay = relay(&db, &first);
    let early = consumer(&db, "first", &first);
    let half = Load { per_entity: load.per_entity / 2, ..load };
    fill(db.pool(), half).await;
    wait_for("the first half published", DEADLINE, || async { equal(published(&db).await, half.events() as i64) })
        .await
        .expect("published");

    // A new consumer joins with the default StartPolicy::FromFirst; its queue is bound before the
    // replay is recorded, so every later event reaches it live.
    let late_topology = Topology::queue(first.exchange.clone(), broker.name("late"));
    broker.remember_topology(&late_topology);
    let late = consumer(&db, "late", &late_topology);
    wait_for("the late consumer consuming", DEADLINE, || async { late.health().is_ready().then_some(()) })
        .await
        .expect("consuming");
    let pool = db.pool().clone();
    let live =
        tokio::spawn(async move { fill(&pool, Load { per_entity: load.per_entity - half.per_entity, ..load }).await });
    // Live events of entities it never saw from the start are parked, not applied.
    wait_for("live events parked by the late consumer", DEADLINE, || async { at_least(late.stats().parked, 1) })
        .await
        .expect("parked");

    let target = ReplayTarget::queue(late_topology.queues[0].clone());
    let (job, survey) =
        replay::create(db.pool(), NewReplayJob::new(ReplaySelection::all(), target)).await.expect("job");
    assert!(!survey.is_incomplete(), "nothing deleted or scrubbed: {survey:?}");
    let report =
        Replayer::builder(db.pool(), publisher()).build().expect("replayer").run(job.id).await.expect("replay");
    assert_eq!(report.state, JobState::Done);
    // At least what the job counted when it was created (a relay's mark that committed just after
    // it, of an event published just before, is sent too).
    assert!(report.sent >= job.total, "every selected event sent: {} of {}", report.sent, job.total);
    assert!(job.total >= half.events() as u64, "the first half at least: {}", job.total);
    live.await.expect("live writer");

    applied_once_in_order(&db, "late", load.events()).await;
    applied_once_in_order(&db, "first", load.events()).await;
    let gaps = outbox_inbox::admin::list_gaps(db.pool(), "late").await.expect("gaps");
    assert!(gaps.is_empty(), "no gap left for an operator to skip: {gaps:?}");
    let replayed_to_first = count(&db, "SELECT count(*) FROM applied WHERE consumer = $1 AND replayed", "first").await;
    assert_eq!(replayed_to_first, 0, "the replay went to the late consumer's queue only");
    let replayed = count(&db, "SELECT count(*) FROM applied WHERE consumer = $1 AND replayed", "late").await;
    assert!(replayed >= half.events() as i64, "the late consumer applied the first half from the replay: {replayed}");
    early.shutdown().await.expect("first consumer");
    late.shutdown().await.expect("late consumer");
    relay.shutdown().await.expect("relay");
    broker.close().await.expect("broker cleanup");
    db.close().await.expect("database cleanup");
}

#[tokio::test]
async fn a_late_consumer_is_bootstrapped_by_a_replay_under_live_traffic() {
    bootstrap_by_replay(REPLAY_BOOTSTRAP.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn a_late_consumer_is_bootstrapped_by_a_replay_under_live_traffic_long_tier() {
    bootstrap_by_replay(REPLAY_BOOTSTRAP.long).await;
}

#[tokio::test]
async fn a_replay_to_every_consumer_is_dropped_as_duplicates_by_those_that_applied_it() {
    let load = REPLAY_DUPLICATES;
    let (db, broker) = setup().await;
    let topology = broker.topology("orders", "applied");
    let relay = relay(&db, &topology);
    let consumer = consumer(&db, "applied", &topology);
    fill(db.pool(), load).await;
    applied_once_in_order(&db, "applied", load.events()).await;

    // Where the relay sent them: its exchange, routed by event type, to every bound queue.
    let target = ReplayTarget::exchange(topology.exchange.clone());
    let (job, _) = replay::create(db.pool(), NewReplayJob::new(ReplaySelection::all(), target)).await.expect("job");
    let report =
        Replayer::builder(db.pool(), publisher()).build().expect("replayer").run(job.id).await.expect("replay");
    assert_eq!((report.state, report.sent), (JobState::Done, load.events() as u64));
    wait_for("every replayed event dropped as a duplicate", DEADLINE, || async {
        equal(consumer.stats().duplicates, load.events() as u64)
    })
    .await
    .expect("duplicates");
    let applied = count(&db, "SELECT count(*) FROM applied WHERE consumer = $1", "applied").await;
    assert_eq!(applied, load.events() as i64, "nothing applied twice");
    let recorded = replay::job(db.pool(), job.id).await.expect("job").expect("recorded");
    assert_eq!((recorded.state, recorded.sent), (JobState::Done, load.events() as u64));
    consumer.shutdown().await.expect("consumer");
    relay.shutdown().await.expect("relay");
    broker.close().await.expect("broker cleanup");
    db.close().await.expect("database cleanup");
}
