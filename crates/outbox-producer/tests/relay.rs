//! The relay against the real PostgreSQL and RabbitMQ: what reaches the queue, in what order, and
//! how many times.

mod support;

use std::time::Duration;

use support::{Env, enqueue, wait_all_published};

#[tokio::test]
async fn publishes_every_committed_event_in_entity_order() {
    let env = Env::new().await;
    let ids = enqueue(env.pool(), 10, 10, 20).await;
    let handle = env.relay().build().expect("relay").spawn();

    env.recorder
        .wait_for_count(ids.len(), Duration::from_secs(20))
        .await
        .expect("all delivered");
    wait_all_published(env.pool(), ids.len() as i64, Duration::from_secs(10)).await;
    handle.shutdown().await.expect("graceful shutdown");

    env.recorder
        .all_delivered(ids.iter().copied())
        .expect("nothing lost");
    assert!(
        env.recorder.duplicates().is_empty(),
        "duplicates without any crash: {:?}",
        env.recorder.duplicates()
    );
    env.recorder.in_entity_order().expect("per-entity order");
    assert_eq!(env.recorder.count(), 120);
    env.close().await;
}
