//! The test cluster itself: three nodes of their own, clustered, beside the shared server; a quorum
//! queue declared through one node is seen through every other; everything is gone after the drop.
//! A serial test binary of its own: the nodes load the host.

use std::time::Duration;

use outbox_testkit::TestCluster;

#[tokio::test]
async fn three_nodes_start_join_and_are_removed_after_the_test() {
    if let Some(why) = TestCluster::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let started = std::time::Instant::now();
    let cluster = TestCluster::start(Duration::from_secs(180)).expect("cluster");
    println!("cluster of 3 nodes up in {} ms", started.elapsed().as_millis());
    let urls = cluster.urls();
    assert!(urls.iter().all(|u| !u.contains(":5672/")), "the shared server's port is not used: {urls:?}");
    let first = lapin::Connection::connect(&urls[0], lapin::ConnectionProperties::default()).await.expect("node 1");
    let channel = first.create_channel().await.expect("channel");
    let topology = outbox_consumer::declare_queue_as(
        &channel,
        outbox_consumer::QueueType::Quorum,
        "amq.topic",
        "cluster-check",
        &["#"],
    )
    .await
    .expect("quorum queue");
    for url in &urls[1..] {
        let other = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await.expect("node");
        let ch = other.create_channel().await.expect("channel");
        let passive = lapin::options::QueueDeclareOptions { passive: true, ..Default::default() };
        ch.queue_declare(topology.queues[0].as_str().into(), passive, Default::default()).await.expect("seen");
    }
    let root = cluster.nodes()[0].dir().to_owned();
    drop(cluster);
    assert!(!root.exists(), "the node's folder is removed");
}
