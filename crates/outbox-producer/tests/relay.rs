//! The relay against the real PostgreSQL and RabbitMQ: what reaches the queue, in what order, and
//! how many times.

mod support;

use std::time::Duration;

use support::{Env, count_status, enqueue, wait_all_published};

#[tokio::test]
async fn publishes_every_committed_event_in_entity_order() {
    let env = Env::new().await;
    let ids = enqueue(env.pool(), 10, 10, 20).await;
    let handle = env.relay().build().expect("relay").spawn();

    env.recorder.wait_for_count(ids.len(), Duration::from_secs(20)).await.expect("all delivered");
    wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(10)).await;
    handle.shutdown().await.expect("graceful shutdown");

    env.recorder.all_delivered(ids.iter().copied()).expect("nothing lost");
    assert!(env.recorder.duplicates().is_empty(), "duplicates without any crash: {:?}", env.recorder.duplicates());
    env.recorder.in_entity_order().expect("per-entity order");
    assert_eq!(env.recorder.count(), 120);
    env.close().await;
}

fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("amqp://guest:guest@127.0.0.1:{port}/%2f")
}

/// Scenario 2: the commit succeeds while the broker is unreachable; the event waits with its
/// attempts, error and next attempt recorded, and goes out once the broker is reachable.
#[tokio::test]
async fn scenario_02_broker_down_event_waits_then_goes_out() {
    let env = Env::new().await;
    let ids = enqueue(env.pool(), 3, 2, 1).await;
    let down = outbox_producer::AmqpPublisher::builder(closed_port_url()).build();
    let policy =
        outbox_core::RetryPolicy::default().initial_delay(Duration::from_millis(300)).max_delay(Duration::from_secs(1));
    let handle = env.relay_with(down).retry_policy(policy).build().expect("relay").spawn();

    // The heads of the three entities and the unordered event were attempted and failed.
    outbox_testkit::wait_for("failed attempts recorded", Duration::from_secs(10), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_events WHERE attempts > 0 AND last_error_kind = 'transient'",
        )
        .fetch_one(env.pool())
        .await
        .ok()?;
        (n >= 4).then_some(())
    })
    .await
    .expect("attempts recorded");
    handle.shutdown().await.expect("shutdown");
    let (attempts, next_in_future, error): (i32, bool, String) = sqlx::query_as(
        "SELECT attempts, next_attempt_at > created_at, last_error FROM outbox_events WHERE attempts > 0 ORDER BY attempts DESC LIMIT 1",
    )
    .fetch_one(env.pool())
    .await
    .expect("row");
    assert!(attempts >= 1 && next_in_future, "attempts {attempts}");
    assert!(error.contains("cannot connect"), "{error}");
    assert!(!error.contains("guest"), "credentials leaked into the recorded error: {error}");
    assert_eq!(count_status(env.pool(), "published").await, 0);
    assert_eq!(count_status(env.pool(), "quarantined").await, 0);
    assert_eq!(env.recorder.count(), 0);

    // The broker is reachable again: everything goes out, in order.
    let handle = env.relay().retry_policy(policy).build().expect("relay").spawn();
    env.recorder.wait_for_count(ids.len(), Duration::from_secs(20)).await.expect("delivered after recovery");
    wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(10)).await;
    handle.shutdown().await.expect("shutdown");
    env.recorder.all_delivered(ids.iter().copied()).expect("nothing lost");
    env.recorder.in_entity_order().expect("order");
    assert!(env.recorder.duplicates().is_empty());
    env.close().await;
}

/// Scenario 3: the relay dies right after claiming, before publishing; another relay takes the
/// rows over when the lease expires (even though their successors crowd the front of the queue)
/// and publishes everything exactly once.
#[tokio::test]
async fn scenario_03_relay_dies_before_publishing() {
    let env = Env::new().await;
    // The dead relay holds the heads of 50 entities; their 39 successors each were committed
    // earlier than the heads' lease expiry, so they crowd the front of the due index.
    let ids = enqueue(env.pool(), 50, 40, 5).await;
    let crashed = env
        .relay()
        .batch_size(55)
        .confirm_window(55)
        .crash_at(outbox_producer::CrashPoint::AfterClaim)
        .build()
        .expect("relay")
        .spawn();
    let err = crashed.join().await.expect_err("stopped at the crash point");
    assert!(matches!(err, outbox_producer::Error::Crashed));
    let leased: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE lease_owner IS NOT NULL")
        .fetch_one(env.pool())
        .await
        .expect("count");
    assert!(leased > 0, "the dead relay held claims");

    let handle = env.relay().build().expect("relay").spawn();
    env.recorder.wait_for_count(ids.len(), Duration::from_secs(30)).await.expect("all delivered");
    wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(10)).await;
    handle.shutdown().await.expect("shutdown");
    env.recorder.all_delivered(ids.iter().copied()).expect("nothing lost");
    assert!(env.recorder.duplicates().is_empty(), "nothing was published before the crash");
    env.recorder.in_entity_order().expect("order");
    env.close().await;
}

/// Scenario 4: the relay dies after the broker confirmed, before marking; the rows are published
/// again with the SAME event ids, and nothing is lost.
#[tokio::test]
async fn scenario_04_relay_dies_after_confirm_before_mark() {
    let env = Env::new().await;
    let ids = enqueue(env.pool(), 4, 3, 2).await;
    let crashed = env
        .relay()
        .batch_size(6)
        .confirm_window(6)
        .crash_at(outbox_producer::CrashPoint::AfterConfirmBeforeMark)
        .build()
        .expect("relay")
        .spawn();
    assert!(matches!(crashed.join().await, Err(outbox_producer::Error::Crashed)));
    env.recorder.wait_for_count(6, Duration::from_secs(10)).await.expect("first batch reached the broker");
    let first: std::collections::HashSet<_> = env.recorder.ids();
    assert_eq!(count_status(env.pool(), "published").await, 0, "nothing was marked");

    let handle = env.relay().build().expect("relay").spawn();
    env.recorder.wait_for_count(ids.len() + first.len(), Duration::from_secs(30)).await.expect("all delivered");
    wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(10)).await;
    handle.shutdown().await.expect("shutdown");

    env.recorder.all_delivered(ids.iter().copied()).expect("nothing lost");
    let dups = env.recorder.duplicates();
    assert_eq!(
        dups.keys().copied().collect::<std::collections::HashSet<_>>(),
        first,
        "exactly the unmarked batch is republished"
    );
    assert!(dups.values().all(|n| *n == 2), "{dups:?}");
    env.recorder.in_entity_order().expect("order");
    env.close().await;
}

/// A transaction that enqueued first but commits last is still published (rows are selected by
/// state, not behind a high-water mark of ids).
#[tokio::test]
async fn transaction_that_commits_late_is_published() {
    let env = Env::new().await;
    let outbox = outbox_producer::Outbox::new();
    let mut late = env.pool().begin().await.expect("begin");
    let late_id = outbox.enqueue(&mut *late, support::event(None)).await.expect("enqueue early");

    let handle = env.relay().build().expect("relay").spawn();
    let later = enqueue(env.pool(), 0, 1, 20).await;
    env.recorder.wait_for_count(20, Duration::from_secs(10)).await.expect("later events published first");
    late.commit().await.expect("late commit");
    env.recorder.wait_for_count(21, Duration::from_secs(10)).await.expect("the late event is published too");
    handle.shutdown().await.expect("shutdown");
    env.recorder.all_delivered(later.into_iter().chain([*late_id.as_uuid()])).expect("nothing lost");
    env.close().await;
}

/// Scenario 8: a backlog of 50,000 events written while no relay ran drains fully, in order.
#[tokio::test]
async fn scenario_08_backlog_of_50000_drains_in_order() {
    let env = Env::new().await;
    let ids = enqueue(env.pool(), 1000, 50, 0).await;
    let handle = env.relay().build().expect("relay").spawn();
    env.recorder.wait_for_count(ids.len(), Duration::from_secs(240)).await.expect("backlog drained");
    wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(20)).await;
    handle.shutdown().await.expect("shutdown");
    env.recorder.all_delivered(ids.iter().copied()).expect("nothing lost");
    assert!(env.recorder.duplicates().is_empty());
    env.recorder.in_entity_order().expect("order");
    env.close().await;
}

/// A notification wakes an idle relay at once: no event waits for the polling interval.
#[tokio::test]
async fn notification_wakes_an_idle_relay_without_waiting_for_the_poll() {
    let env = Env::new().await;
    let handle = env.relay().poll_interval(Duration::from_secs(60)).build().expect("relay").spawn();
    let outbox = outbox_producer::Outbox::new();
    for i in 1..=5 {
        let started = std::time::Instant::now();
        let mut tx = env.pool().begin().await.expect("begin");
        outbox.enqueue(&mut *tx, support::event(Some("k"))).await.expect("enqueue");
        tx.commit().await.expect("commit");
        env.recorder.wait_for_count(i, Duration::from_secs(10)).await.expect("delivered");
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(5),
            "event {i} waited {waited:?}: the poll (60 s), not the notification, woke the relay"
        );
    }
    handle.shutdown().await.expect("shutdown");
    env.close().await;
}

/// The broker drops the relay's connection mid-stream: the publisher reconnects, unconfirmed
/// messages are sent again with the same ids, nothing is lost and order holds.
#[tokio::test]
async fn relay_reconnects_after_the_broker_drops_its_connection() {
    let env = Env::new().await;
    let name = format!("relay-test-{}", outbox_testkit::unique_suffix());
    let publisher = outbox_producer::AmqpPublisher::builder(outbox_testkit::amqp_url()).connection_name(&name).build();
    let policy =
        outbox_core::RetryPolicy::default().initial_delay(Duration::from_millis(100)).max_delay(Duration::from_secs(1));
    let handle = env.relay_with(publisher).retry_policy(policy).build().expect("relay").spawn();
    let first = enqueue(env.pool(), 20, 5, 0).await;
    env.recorder.wait_for_count(first.len(), Duration::from_secs(20)).await.expect("first wave");

    assert_eq!(outbox_testkit::close_connections_named(&name).await.expect("rabbitmqctl"), 1);
    let second = enqueue(env.pool(), 20, 5, 0).await;
    let all: Vec<_> = first.iter().chain(&second).copied().collect();
    outbox_testkit::wait_for("second wave delivered", Duration::from_secs(30), || async {
        env.recorder.all_delivered(all.iter().copied()).ok()
    })
    .await
    .expect("delivered after reconnecting");
    wait_all_published(env.pool(), all.len() as i64, Duration::from_secs(10)).await;
    handle.shutdown().await.expect("shutdown");
    env.recorder.in_entity_order().expect("order");
    env.close().await;
}

/// A row held behind a quarantined predecessor that is no longer quarantined (an operator's retry
/// racing with a claim) is released by the relay's periodic re-check: nothing stays behind forever.
#[tokio::test]
async fn rows_held_behind_a_formerly_quarantined_event_are_released() {
    let env = Env::new().await;
    let ids = enqueue(env.pool(), 1, 3, 0).await;
    // The outcome of the race: the successors were deferred as if their predecessor were still
    // quarantined, but it is pending again and nobody will wake them.
    sqlx::query("UPDATE outbox_events SET next_attempt_at = 'infinity' WHERE seq > 1")
        .execute(env.pool())
        .await
        .expect("hold");
    let handle = env.relay().build().expect("relay").spawn();
    env.recorder.wait_for_count(3, Duration::from_secs(20)).await.expect("released by the re-check (every 30 polls)");
    handle.shutdown().await.expect("shutdown");
    env.recorder.all_delivered(ids.iter().copied()).expect("nothing left behind");
    env.recorder.in_entity_order().expect("order");
    env.close().await;
}
