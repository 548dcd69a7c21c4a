//! Payload encryption at rest, end to end on the real servers: the producer seals payloads (the
//! table holds none of their bytes), keys rotate (rows under the old and the new key both go out),
//! the relay publishes them in plain, and a tampered row or one under an unknown key is
//! quarantined with nothing of it published, its entity's later events held behind it.

use std::time::Duration;

use crate::support::{count_status, env, relay};
use outbox_producer::Outbox;
use outbox_system_tests::count;
use outbox_types::{KEY_BYTES, Keyring, NewEvent, PayloadCipher};
use sqlx::PgPool;

const SECRET: &str = "CARD-4111-SECRET";

fn event(entity: &str, n: usize) -> NewEvent {
    NewEvent::json("card.charged", &serde_json::json!({ "card": SECRET, "n": n })).expect("json").entity(entity)
}

async fn enqueue(pool: &PgPool, outbox: &Outbox, entity: &str, range: std::ops::Range<usize>) {
    let mut tx = pool.begin().await.expect("begin");
    outbox.enqueue_many(&mut *tx, range.map(|n| event(entity, n)).collect::<Vec<_>>()).await.expect("enqueue");
    tx.commit().await.expect("commit");
}

#[tokio::test]
async fn sealed_payloads_rotate_go_out_in_plain_and_a_tampered_row_is_quarantined() {
    let h = env().await;
    let pool = h.pool();
    let old = Keyring::new("k1", [1; KEY_BYTES]).expect("k1");
    let rotated = Keyring::new("k2", [2; KEY_BYTES]).and_then(|r| r.with_key("k1", [1; KEY_BYTES])).expect("keys");
    let before = Outbox::builder().cipher(PayloadCipher::new(old)).build();
    let after = Outbox::builder().cipher(PayloadCipher::new(rotated.clone())).build();
    enqueue(pool, &before, "card-a", 0..3).await;
    enqueue(pool, &after, "card-a", 3..6).await;
    enqueue(pool, &after, "card-b", 0..2).await;
    enqueue(pool, &after, "card-tampered", 0..2).await;
    enqueue(pool, &after, "card-unknown", 0..2).await;

    let plain = count(
        pool,
        "SELECT count(*) FROM outbox_events WHERE position(convert_to('CARD-4111', 'UTF8') in payload) > 0",
    )
    .await;
    assert_eq!(plain, 0, "the table holds none of the payloads' bytes");
    let keys: Vec<(String, i64)> =
        sqlx::query_as("SELECT payload_key_id, count(*) FROM outbox_events GROUP BY 1 ORDER BY 1")
            .fetch_all(pool)
            .await
            .expect("keys");
    assert_eq!(keys, vec![("k1".to_owned(), 3), ("k2".to_owned(), 9)]);
    sqlx::query(
        "UPDATE outbox_events SET payload = overlay(payload placing '\\xff'::bytea from 30 for 1)
         WHERE entity_key = 'card-tampered' AND seq = 1",
    )
    .execute(pool)
    .await
    .expect("tamper");
    sqlx::query("UPDATE outbox_events SET payload_key_id = 'k9' WHERE entity_key = 'card-unknown' AND seq = 1")
        .execute(pool)
        .await
        .expect("unknown key");

    let relay = relay(&h).cipher(PayloadCipher::new(rotated)).build().expect("relay").spawn();
    outbox_testkit::wait_for("the good events out, the bad two quarantined", Duration::from_secs(60), || async {
        let done = h.recorder().count() >= 8 && count_status(pool, "quarantined").await == 2;
        done.then_some(())
    })
    .await
    .expect("settled");
    relay.shutdown().await.expect("shutdown");

    let records = h.recorder().records();
    let mut sent: Vec<(String, i64)> =
        records.iter().map(|r| (r.entity.clone().unwrap_or_default(), r.seq.unwrap_or(0))).collect();
    sent.sort();
    let expected: Vec<(String, i64)> = [("card-a", 1..=6), ("card-b", 1..=2)]
        .into_iter()
        .flat_map(|(e, r)| r.map(move |s| (e.to_owned(), s)))
        .collect();
    assert_eq!(sent, expected, "nothing of the tampered or unknown-key rows, nor their successors, went out");
    for r in &records {
        let body: serde_json::Value = serde_json::from_slice(&r.payload).expect("plain JSON on the wire");
        assert_eq!(body["card"], SECRET);
    }
    let reasons: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT entity_key, last_error_kind, last_error FROM outbox_events WHERE status = 'quarantined' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("reasons");
    assert_eq!(reasons.len(), 2);
    assert_eq!((reasons[0].0.as_str(), reasons[0].1.as_str()), ("card-tampered", "contract"));
    assert!(reasons[0].2.contains("failed authentication"), "{}", reasons[0].2);
    assert_eq!((reasons[1].0.as_str(), reasons[1].1.as_str()), ("card-unknown", "contract"));
    assert!(reasons[1].2.contains("key id"), "{}", reasons[1].2);
    assert!(!reasons.iter().any(|r| r.2.contains("k9") || r.2.contains(SECRET)), "no key id or payload in reasons");
    h.close().await.expect("cleanup");
}
