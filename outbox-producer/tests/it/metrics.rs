//! The producer counts the events it writes (`outbox_events_created_total`), described, so that a
//! dashboard can compare the rate of events created with the rate published.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use outbox_types::NewEvent;

fn event(i: usize) -> NewEvent {
    NewEvent::json("order.placed", &serde_json::json!({ "i": i })).expect("json").entity(format!("o-{i}"))
}

/// Enqueues one event and a batch of three in a transaction, on this thread (so that the local
/// recorder sees them).
async fn write_four() {
    let db = TestDb::new().await.expect("db");
    let outbox = Outbox::new();
    let mut tx = db.pool().begin().await.expect("begin");
    outbox.enqueue(&mut *tx, event(0)).await.expect("enqueue");
    outbox.enqueue_many(&mut *tx, (1..4).map(event)).await.expect("enqueue_many");
    tx.commit().await.expect("commit");
    db.close().await.expect("cleanup");
}

#[test]
fn every_event_written_is_counted_once_and_the_counter_is_described() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    metrics::with_local_recorder(&recorder, || runtime.block_on(write_four()));
    let created: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "outbox_events_created_total")
        .collect();
    assert_eq!(created.len(), 1, "one counter, no labels");
    let (_, _, description, value) = &created[0];
    assert_eq!(value, &DebugValue::Counter(4));
    assert!(description.is_some(), "described");
}
