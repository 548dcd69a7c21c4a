//! A multi-tenant inbox on the real servers: three tenant databases, one of them unreachable for
//! a while, and events of tenants nobody lists.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use lapin::options::BasicConsumeOptions;
use lapin::types::{AMQPValue, FieldTable};
use outbox_inbox::{InboxLayer, InboxRunner, Tenants};
use outbox_testkit::{ChaosProxy, Harness, TestDb, wait_for};
use outbox_types::{Event, HeaderValue, NewEvent, RetryPolicy};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tower::Layer;

use crate::support::{apply, count_effects, effects, effects_table};

const TENANTS: [&str; 3] = ["acme", "globex", "initech"];
/// The same entity keys in every tenant: each tenant's database keeps its own sequences.
const ENTITIES: [&str; 2] = ["order-1", "order-2"];
const PER_ENTITY: u64 = 15;

fn event(tenant: Option<&str>, entity: &str, seq: u64) -> Event {
    let mut event = NewEvent::json("order.changed", &serde_json::json!({ "amount": seq }))
        .expect("json")
        .entity(entity)
        .into_event(Some(seq), SystemTime::now());
    if let Some(tenant) = tenant {
        event.headers.insert("tenant".to_owned(), HeaderValue::String(tenant.to_owned()));
    }
    event
}

/// Every tenant's events: `order-1` in order, `order-2` last first (it parks until its gap fills).
fn tenant_events() -> Vec<Event> {
    let mut events = Vec::new();
    for tenant in TENANTS {
        events.extend((1..=PER_ENTITY).map(|seq| event(Some(tenant), ENTITIES[0], seq)));
        events.extend((1..=PER_ENTITY).rev().map(|seq| event(Some(tenant), ENTITIES[1], seq)));
    }
    events
}

/// The dead letters' reason and detail headers, `n` of them.
async fn dead_letters(h: &Harness, n: usize) -> Vec<(String, String)> {
    let text = |d: &lapin::message::Delivery, name: &str| match d
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(name).cloned())
    {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => format!("{other:?}"),
    };
    let dead = h
        .broker()
        .channel()
        .basic_consume(
            h.topology().dead_letter_queue.as_str().into(),
            "".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("consume the dead letters");
    let read = dead.take(n).map(|d| {
        let d = d.expect("dead letter");
        (text(&d, outbox_inbox::HEADER_DEAD_LETTER_REASON), text(&d, outbox_inbox::HEADER_DEAD_LETTER_DETAIL))
    });
    let mut got: Vec<(String, String)> =
        tokio::time::timeout(Duration::from_secs(30), read.collect()).await.expect("the dead letters");
    got.sort();
    got
}

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect("count")
}

/// Acme, globex and initech each have a database; initech's is behind a proxy that refuses
/// connections at first. Every event is published twice, `order-2`'s last first, with two events
/// of no listed tenant. Acme and globex apply everything while initech is down; initech catches up
/// once it is back; each tenant's database holds exactly its own effects and inbox records, in
/// per-entity order, once each; the two others are dead-lettered as `unknown_tenant`.
#[tokio::test]
async fn each_tenants_events_are_applied_once_in_order_in_its_database_and_unknown_tenants_are_dead_lettered() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let mut dbs = Vec::new();
    for _ in TENANTS {
        let db = TestDb::empty().await.expect("a tenant database");
        effects_table(db.pool()).await;
        dbs.push(db);
    }
    let proxy = ChaosProxy::start("127.0.0.1:5432".parse().expect("addr")).await.expect("proxy");
    let behind_proxy = dbs[2].connect_options().clone().host("127.0.0.1").port(proxy.addr().port());
    let initech =
        PgPoolOptions::new().max_connections(4).acquire_timeout(Duration::from_secs(2)).connect_lazy_with(behind_proxy);
    let tenants = Tenants::by_header("tenant")
        .tenant(TENANTS[0], dbs[0].pool().clone())
        .tenant(TENANTS[1], dbs[1].pool().clone())
        .tenant(TENANTS[2], initech.clone());
    tenants.migrate().await.expect("the inbox's tables in every tenant's database");
    proxy.refuse();
    proxy.cut(); // the migration's connections go; new ones are refused

    let service = InboxLayer::for_tenants(tenants, "shipping").layer(tower::service_fn(apply));
    let retry = RetryPolicy::default()
        .initial_delay(Duration::from_millis(200))
        .max_delay(Duration::from_secs(1))
        .max_attempts(1_000);
    let runner = InboxRunner::builder(outbox_testkit::amqp_url(), service)
        .topology(h.topology())
        .retry_policy(retry)
        .sweep_interval(Duration::from_millis(500))
        .build()
        .expect("runner")
        .spawn();
    let events = tenant_events();
    let copies: Vec<Event> = events.iter().chain(&events).cloned().collect();
    let strangers = [event(Some("umbrella"), ENTITIES[0], 1), event(None, ENTITIES[0], 1)];
    h.broker().publish_events(h.exchange(), "order.changed", &copies).await.expect("publish");
    h.broker().publish_events(h.exchange(), "order.changed", &strangers).await.expect("publish");

    let per_tenant = 2 * PER_ENTITY as i64;
    wait_for("acme's and globex's events applied while initech is down", Duration::from_secs(60), || async {
        outbox_testkit::equal(count_effects(dbs[0].pool()).await + count_effects(dbs[1].pool()).await, 2 * per_tenant)
    })
    .await
    .expect("the reachable tenants are not held up");
    wait_for("initech's events retried", Duration::from_secs(30), || async {
        (runner.stats().retried > 0).then_some(())
    })
    .await
    .expect("retried");
    assert_eq!(count_effects(dbs[2].pool()).await, 0, "initech is unreachable");
    let dead = dead_letters(&h, strangers.len()).await;
    proxy.heal();
    wait_for("initech's events applied once it is back", Duration::from_secs(60), || async {
        outbox_testkit::equal(count_effects(dbs[2].pool()).await, per_tenant)
    })
    .await
    .expect("initech catches up");
    // Every second copy handled (dropped): nothing is still in flight.
    wait_for("the second copies dropped", Duration::from_secs(30), || async {
        (runner.stats().duplicates >= copies.len() as u64 / 2).then_some(())
    })
    .await
    .expect("duplicates dropped");

    let expected: Vec<i64> = (1..=PER_ENTITY as i64).collect();
    for db in &dbs {
        for entity in ENTITIES {
            assert_eq!(effects(db.pool(), entity).await, expected, "{entity} in {}: once each, in order", db.name());
        }
        let processed =
            count(db.pool(), "SELECT count(*) FROM inbox_events WHERE consumer = 'shipping' AND status = 'processed'")
                .await;
        assert_eq!(processed, per_tenant, "the tenant's dedup records are in its own database");
        let last: Vec<i64> = sqlx::query_scalar(
            "SELECT max(seq) FROM inbox_events WHERE consumer = 'shipping' GROUP BY entity_key ORDER BY entity_key",
        )
        .fetch_all(db.pool())
        .await
        .expect("entities");
        assert_eq!(last, [PER_ENTITY as i64; 2], "the tenant's sequences are in its own database");
    }
    assert_eq!(count(h.pool(), "SELECT count(*) FROM inbox_events").await, 0, "no tenant's records elsewhere");

    let reasons: Vec<&str> = dead.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(reasons, ["unknown_tenant", "unknown_tenant"]);
    let details: Vec<&str> = dead.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(details, ["unknown tenant: no header `tenant`", "unknown tenant: tenant `umbrella` is not listed"]);
    runner.shutdown().await.expect("shutdown");
    initech.close().await;
    for db in dbs {
        db.close().await.expect("drop a tenant database");
    }
    h.close().await.expect("cleanup");
}

/// A tenant whose database is down holds none of the others' entities while its events wait out
/// their back-off (20 s here): not an entity of the same key in another tenant, nor one that came
/// in its batch and was applied. Acme's events published after initech's failed are applied at
/// once; initech's when it is back.
#[tokio::test]
async fn a_tenant_waiting_out_its_back_off_holds_up_none_of_the_other_tenants_entities() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let (acme, down) = (TestDb::empty().await.expect("db"), TestDb::empty().await.expect("db"));
    effects_table(acme.pool()).await;
    effects_table(down.pool()).await;
    let proxy = ChaosProxy::start("127.0.0.1:5432".parse().expect("addr")).await.expect("proxy");
    let behind_proxy = down.connect_options().clone().host("127.0.0.1").port(proxy.addr().port());
    let initech = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy_with(behind_proxy);
    let tenants = Tenants::by_header("tenant").tenant("acme", acme.pool().clone()).tenant("initech", initech.clone());
    tenants.migrate().await.expect("the inbox's tables");
    proxy.refuse();
    proxy.cut();
    let back_off = Duration::from_secs(20);
    let retry = RetryPolicy::default().initial_delay(back_off).max_delay(back_off).max_attempts(1_000);
    let service = InboxLayer::for_tenants(tenants, "shipping").layer(tower::service_fn(apply));
    let publish = |events: Vec<Event>| {
        let h = &h;
        async move { h.broker().publish_events(h.exchange(), "order.changed", &events).await.expect("publish") }
    };

    // One batch at a time: while initech's order-5 fails (its connection refused within 500 ms),
    // initech's order-1 and acme's order-2 arrive and are taken together in the next batch. Both
    // of initech's wait 20 s; acme's order-2 applies.
    let runner = InboxRunner::builder(outbox_testkit::amqp_url(), service)
        .topology(h.topology())
        .retry_policy(retry)
        .concurrency(1)
        .build()
        .expect("runner")
        .spawn();
    publish(vec![event(Some("initech"), "order-5", 1)]).await;
    publish(vec![event(Some("initech"), "order-1", 1), event(Some("acme"), "order-2", 1)]).await;
    wait_for("initech's events failed and wait", Duration::from_secs(30), || async {
        (runner.stats().retried >= 2).then_some(())
    })
    .await
    .expect("retried");
    // Acme's order-1 (the key initech's waiting event has) and order-2 go on while it waits.
    let mut more: Vec<Event> = (1..=10).map(|seq| event(Some("acme"), "order-1", seq)).collect();
    more.extend((2..=10).map(|seq| event(Some("acme"), "order-2", seq)));
    publish(more).await;
    let all: Vec<i64> = (1..=10).collect();
    wait_for("acme's events applied during initech's back-off", back_off / 2, || async {
        let both = (effects(acme.pool(), "order-1").await, effects(acme.pool(), "order-2").await);
        outbox_testkit::equal(both, (all.clone(), all.clone()))
    })
    .await
    .expect("acme is not held up by initech's back-off");
    assert_eq!(count_effects(down.pool()).await, 0, "initech is unreachable");

    proxy.heal();
    wait_for("initech's events applied once it is back", Duration::from_secs(60), || async {
        outbox_testkit::equal(
            (effects(down.pool(), "order-1").await, effects(down.pool(), "order-5").await),
            (vec![1], vec![1]),
        )
    })
    .await
    .expect("initech catches up");
    runner.shutdown().await.expect("shutdown");
    initech.close().await;
    acme.close().await.expect("drop");
    down.close().await.expect("drop");
    h.close().await.expect("cleanup");
}
