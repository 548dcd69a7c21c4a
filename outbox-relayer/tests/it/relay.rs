//! The relay against the real PostgreSQL and RabbitMQ: what reaches the queue, in what order, and
//! how many times.

use std::time::Duration;

use outbox_system_tests::Load;
use outbox_system_tests::sizes::RELAY_BACKLOG;

use crate::support;
use crate::support::{enqueue, relay, wait_all_published};

#[tokio::test]
async fn publishes_every_committed_event_in_entity_order() {
    let env = support::env().await;
    let ids = enqueue(env.pool(), 10, 10, 20).await;
    drains_once_each_in_entity_order(&env, &ids, Duration::from_secs(20)).await;
    assert_eq!(env.recorder().count(), 120);
    env.close().await.expect("cleanup");
}

/// Runs a relay until every one of `ids` reached the queue (within `deadline`) and is recorded
/// published, stops it gracefully, and checks that each arrived exactly once, in entity order.
async fn drains_once_each_in_entity_order(env: &outbox_testkit::Harness, ids: &[uuid::Uuid], deadline: Duration) {
    let handle = relay(env).build().expect("relay").spawn();
    env.recorder().wait_for_count(ids.len(), deadline).await.expect("all delivered");
    wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(30)).await;
    handle.shutdown().await.expect("graceful shutdown");

    env.recorder().all_delivered(ids.iter().copied()).expect("nothing lost");
    assert!(env.recorder().duplicates().is_empty(), "duplicates without any crash: {:?}", env.recorder().duplicates());
    env.recorder().in_entity_order().expect("per-entity order");
}

/// A backlog over many entities (2,000 events over 200 entities and 100 unordered; 50,000 over
/// 1,000 and 500 in the long tier) written while no relay runs: one relay, started afterwards,
/// publishes every one exactly once, each entity's in sequence order.
#[tokio::test]
async fn a_backlog_written_while_no_relay_runs_is_published_in_entity_order() {
    backlog_is_published_in_entity_order(RELAY_BACKLOG.fast).await;
}

#[tokio::test]
#[ignore = "long tier"]
async fn a_backlog_written_while_no_relay_runs_is_published_in_entity_order_long_tier() {
    backlog_is_published_in_entity_order(RELAY_BACKLOG.long).await;
}

async fn backlog_is_published_in_entity_order(load: Load) {
    let env = support::env().await;
    let ids = enqueue(env.pool(), load.entities, load.per_entity, load.entities / 2).await;
    assert_eq!(ids.len(), load.events() + load.entities / 2);
    drains_once_each_in_entity_order(&env, &ids, Duration::from_secs(300)).await;
    assert_eq!(env.recorder().count(), ids.len());
    env.close().await.expect("cleanup");
}

/// A transaction that enqueued first but commits last is still published (rows are selected by
/// state, not behind a high-water mark of ids).
#[tokio::test]
async fn transaction_that_commits_late_is_published() {
    let env = support::env().await;
    let outbox = outbox_producer::Outbox::new();
    let mut late = env.pool().begin().await.expect("begin");
    let late_id = outbox.enqueue(&mut *late, support::event(None)).await.expect("enqueue early");

    let handle = relay(&env).build().expect("relay").spawn();
    let later = enqueue(env.pool(), 0, 1, 20).await;
    env.recorder().wait_for_count(20, Duration::from_secs(10)).await.expect("later events published first");
    late.commit().await.expect("late commit");
    env.recorder().wait_for_count(21, Duration::from_secs(10)).await.expect("the late event is published too");
    handle.shutdown().await.expect("shutdown");
    env.recorder().all_delivered(later.into_iter().chain([*late_id.as_uuid()])).expect("nothing lost");
    env.close().await.expect("cleanup");
}

/// A notification wakes an idle relay at once: no event waits for the polling interval.
#[tokio::test]
async fn notification_wakes_an_idle_relay_without_waiting_for_the_poll() {
    let env = support::env().await;
    let handle = relay(&env).poll_interval(Duration::from_secs(60)).build().expect("relay").spawn();
    let outbox = outbox_producer::Outbox::new();
    for i in 1..=5 {
        let started = std::time::Instant::now();
        let mut tx = env.pool().begin().await.expect("begin");
        outbox.enqueue(&mut *tx, support::event(Some("k"))).await.expect("enqueue");
        tx.commit().await.expect("commit");
        env.recorder().wait_for_count(i, Duration::from_secs(10)).await.expect("delivered");
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(5),
            "event {i} waited {waited:?}: the poll (60 s), not the notification, woke the relay"
        );
    }
    handle.shutdown().await.expect("shutdown");
    env.close().await.expect("cleanup");
}

/// The broker drops the relay's connection mid-stream: the publisher reconnects, unconfirmed
/// messages are sent again with the same ids, nothing is lost and order holds.
#[tokio::test]
async fn relay_reconnects_after_the_broker_drops_its_connection() {
    let env = support::env().await;
    let name = format!("relay-test-{}", outbox_testkit::unique_suffix());
    let publisher =
        outbox_relayer::AmqpPublisher::builder(outbox_testkit::amqp_url()).connection_name(&name).build_unchecked();
    let policy = outbox_types::RetryPolicy::default()
        .initial_delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(1));
    let handle = env.relay_builder_with(publisher).retry_policy(policy).build().expect("relay").spawn();
    let first = enqueue(env.pool(), 20, 5, 0).await;
    env.recorder().wait_for_count(first.len(), Duration::from_secs(20)).await.expect("first wave");

    assert_eq!(outbox_testkit::close_connections_named(&name).await.expect("rabbitmqctl"), 1);
    let second = enqueue(env.pool(), 20, 5, 0).await;
    let all: Vec<_> = first.iter().chain(&second).copied().collect();
    outbox_testkit::wait_for("second wave delivered", Duration::from_secs(30), || async {
        env.recorder().all_delivered(all.iter().copied()).ok()
    })
    .await
    .expect("delivered after reconnecting");
    wait_all_published(env.pool(), all.len() as i64, Duration::from_secs(10)).await;
    handle.shutdown().await.expect("shutdown");
    env.recorder().in_entity_order().expect("order");
    env.close().await.expect("cleanup");
}

/// A row held behind a quarantined predecessor that is no longer quarantined (an operator's retry
/// racing with a claim) is released by the relay's periodic re-check: nothing stays behind forever.
#[tokio::test]
async fn rows_held_behind_a_formerly_quarantined_event_are_released() {
    let env = support::env().await;
    let ids = enqueue(env.pool(), 1, 3, 0).await;
    // The outcome of the race: the successors were deferred as if their predecessor were still
    // quarantined, but it is pending again and nobody will wake them.
    sqlx::query("UPDATE outbox_events SET next_attempt_at = 'infinity' WHERE seq > 1")
        .execute(env.pool())
        .await
        .expect("hold");
    let handle = relay(&env).build().expect("relay").spawn();
    env.recorder().wait_for_count(3, Duration::from_secs(20)).await.expect("released by the re-check (every 30 polls)");
    handle.shutdown().await.expect("shutdown");
    env.recorder().all_delivered(ids.iter().copied()).expect("nothing left behind");
    env.recorder().in_entity_order().expect("order");
    env.close().await.expect("cleanup");
}

async fn vacuums_of_the_outbox_table(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'outbox_events'")
        .fetch_one(pool)
        .await
        .expect("table statistics")
}

async fn dead_row_versions(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_events'")
        .fetch_one(pool)
        .await
        .expect("table statistics")
}

/// The relay vacuums its table after every `vacuum_after` published rows, so the dead entries
/// published rows leave in the queue index do not pile up in front of every claim: 1,000 rows at
/// `vacuum_after = 300` make at least one of its vacuums (autovacuum is off on the table, so none
/// is skipped for autovacuum's; how many more depends on when its background task runs). With the
/// setting off it never vacuums. Either way every event arrives once, in order.
#[tokio::test]
async fn relay_vacuums_its_table_after_the_configured_number_of_published_rows() {
    for vacuum_after in [Some(300), None] {
        let env = support::env().await;
        sqlx::query("ALTER TABLE outbox_events SET (autovacuum_enabled = off)")
            .execute(env.pool())
            .await
            .expect("autovacuum off");
        let ids = enqueue(env.pool(), 20, 50, 0).await;
        let handle = relay(&env).batch_size(100).vacuum_after(vacuum_after).build().expect("relay").spawn();
        env.recorder().wait_for_count(ids.len(), Duration::from_secs(30)).await.expect("all delivered");
        wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(10)).await;
        if let Some(every) = vacuum_after {
            // The relay vacuums in the background once `every` rows were published since its
            // last vacuum began (`vacuum_count` counts manual vacuums: the relay's). What a vacuum
            // could remove depends on the claims it overlapped: the dead row versions are printed.
            let expected = 1;
            let vacuumed =
                outbox_testkit::wait_for("the relay's vacuums of its table", Duration::from_secs(60), || async {
                    outbox_testkit::at_least(vacuums_of_the_outbox_table(env.pool()).await, expected)
                })
                .await;
            let (vacuums, dead) = (vacuums_of_the_outbox_table(env.pool()).await, dead_row_versions(env.pool()).await);
            println!("vacuum_after {every}: {vacuums} vacuums, {dead} dead row versions left");
            if let Err(e) = vacuumed {
                panic!("{e}: saw {vacuums} of {expected} vacuums, {dead} dead row versions");
            }
        }
        handle.shutdown().await.expect("graceful shutdown");
        if vacuum_after.is_none() {
            assert_eq!(vacuums_of_the_outbox_table(env.pool()).await, 0, "vacuumed although the setting is off");
        }
        env.recorder().all_delivered(ids.iter().copied()).expect("nothing lost");
        assert!(env.recorder().duplicates().is_empty(), "{:?}", env.recorder().duplicates());
        env.recorder().in_entity_order().expect("per-entity order");
        env.close().await.expect("cleanup");
    }
}

/// Four events whose confirms the broker holds back for 8 s fill neither the relay nor its
/// confirm window: events committed meanwhile, of other entities, go out at once, and each of the
/// slow ones is recorded published once its confirm arrives.
#[tokio::test]
async fn slow_confirms_do_not_hold_back_events_committed_meanwhile() {
    let env = support::env().await;
    let faulty = outbox_testkit::FaultyPublisher::new(support::publisher());
    faulty.inject(4, outbox_testkit::Fault::DelayConfirm(Duration::from_secs(8)));
    let handle = env
        .relay_builder_with(faulty.clone())
        .batch_size(10)
        .confirm_window(20)
        .lease(Duration::from_secs(30))
        .confirm_timeout(Duration::from_secs(15))
        .shutdown_deadline(Duration::from_secs(20))
        .build()
        .expect("relay")
        .spawn();
    let outbox = outbox_producer::Outbox::new();
    let mut ids = Vec::new();
    for i in 1..=6 {
        let started = std::time::Instant::now();
        let mut tx = env.pool().begin().await.expect("begin");
        let id = outbox.enqueue(&mut *tx, support::event(Some(&format!("entity-{i}")))).await.expect("enqueue");
        tx.commit().await.expect("commit");
        ids.push(*id.as_uuid());
        env.recorder().wait_for_count(i, Duration::from_secs(4)).await.unwrap_or_else(|e| {
            panic!("event {i} did not reach the queue within 4 s while earlier confirms were slow: {e}")
        });
        assert!(started.elapsed() < Duration::from_secs(4));
    }
    assert_eq!(faulty.pending(), 0, "every delayed confirm was applied");
    wait_all_published(env.pool(), 6, Duration::from_secs(20)).await;
    handle.shutdown().await.expect("shutdown");
    env.recorder().all_delivered(ids.iter().copied()).expect("nothing lost");
    assert!(env.recorder().duplicates().is_empty(), "published twice: {:?}", env.recorder().duplicates());
    env.close().await.expect("cleanup");
}

/// A claim takes up to four events of an entity; they go out one after the other, each only once
/// the broker confirmed the one before. When the broker nacks one of them (the first, or one in
/// the middle), the rest of the run is not sent: it is given back with its claim's attempt taken
/// back, the nacked event is retried, and every event still reaches the queue once, in sequence
/// order.
#[tokio::test]
async fn a_nack_within_an_entitys_run_holds_back_the_rest_of_the_run() {
    for confirmed_before_the_nack in [0, 1] {
        let env = support::env().await;
        let ids = enqueue(env.pool(), 1, 8, 0).await;
        let faulty = outbox_testkit::FaultyPublisher::new(support::publisher());
        if confirmed_before_the_nack > 0 {
            faulty.inject(confirmed_before_the_nack, outbox_testkit::Fault::DelayConfirm(Duration::ZERO));
        }
        faulty.inject(1, outbox_testkit::Fault::Nack);
        let handle = env.relay_builder_with(faulty.clone()).events_per_entity(4).build().expect("relay").spawn();
        env.recorder().wait_for_count(ids.len(), Duration::from_secs(20)).await.expect("all delivered");
        wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(10)).await;
        handle.shutdown().await.expect("shutdown");

        assert_eq!(faulty.pending(), 0, "the nack was applied");
        env.recorder().all_delivered(ids.iter().copied()).expect("nothing lost");
        assert!(env.recorder().duplicates().is_empty(), "published twice: {:?}", env.recorder().duplicates());
        env.recorder().in_entity_order().expect("per-entity order");
        // Only the nacked event was attempted twice: the rest of its run was never sent.
        let attempts: Vec<i32> = sqlx::query_scalar("SELECT attempts FROM outbox_events ORDER BY seq")
            .fetch_all(env.pool())
            .await
            .expect("attempts");
        let mut expected = vec![1; ids.len()];
        expected[confirmed_before_the_nack] = 2;
        assert_eq!(attempts, expected);
        env.close().await.expect("cleanup");
    }
}
