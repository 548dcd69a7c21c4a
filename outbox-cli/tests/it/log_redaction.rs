//! `outbox relay` never logs message bodies, even with `RUST_LOG=trace`: an unroutable event
//! comes back from the broker (`mandatory`) and is quarantined, and neither its payload nor
//! lapin's decimal rendering of its bytes nor the AMQP password reaches stderr.

use std::time::Duration;

use outbox_producer::Outbox;
use outbox_testkit::{TestBroker, TestDb, wait_for};
use outbox_types::NewEvent;

use crate::support::{Running, outbox};

/// `bytes` as lapin's `Debug` of a byte slice renders them: `123, 34, 115, ...`.
fn decimal_list(bytes: &[u8]) -> String {
    bytes.iter().map(u8::to_string).collect::<Vec<_>>().join(", ")
}

#[tokio::test]
async fn trace_logging_shows_no_payload_and_no_password() {
    let db = TestDb::new().await.expect("db");
    let broker = TestBroker::new().await.expect("broker");
    // No queue is bound: every message comes back unroutable.
    let exchange = broker.declare_exchange("unroutable", lapin::ExchangeKind::Topic).await.expect("exchange");
    let secret = format!("p4yl0ad-{}", outbox_testkit::unique_suffix());
    let payload = serde_json::json!({ "secret": secret });
    let body = serde_json::to_vec(&payload).expect("json");
    let event = NewEvent::json("secret.kept", &payload).expect("event").entity("e-1");
    let mut tx = db.pool().begin().await.expect("begin");
    let id = Outbox::new().enqueue(&mut *tx, event).await.expect("enqueue");
    tx.commit().await.expect("commit");

    let amqp_url = outbox_testkit::amqp_url();
    let mut cmd = outbox();
    cmd.args(["relay", "--exchange", &exchange, "--no-declare-exchange"])
        .env("DATABASE_URL", db.url())
        .env("AMQP_URL", &amqp_url)
        .env("RUST_LOG", "trace");
    let relay = Running::spawn(cmd);
    let quarantined = wait_for("the unroutable event to be quarantined", Duration::from_secs(90), || async {
        let status: Option<String> = sqlx::query_scalar("SELECT status::text FROM outbox_events WHERE id = $1")
            .bind(id.as_uuid())
            .fetch_optional(db.pool())
            .await
            .ok()
            .flatten();
        outbox_testkit::equal(status.as_deref(), Some("quarantined"))
    })
    .await;
    relay.signal("-TERM");
    let (status, lines) = relay.finish(Duration::from_secs(30)).await;
    quarantined.unwrap_or_else(|e| panic!("{e}; stderr:\n{}", lines.join("\n")));
    assert!(status.success(), "clean exit expected, got {status}");
    let stderr = lines.join("\n");
    assert!(lines.len() > 10, "trace logging expected, got {} lines", lines.len());
    assert!(!stderr.contains(&secret), "the payload is in the log");
    assert!(!stderr.contains(&decimal_list(&body[..12])), "the payload's bytes are in the log");
    let credentials = amqp_url.split_once("://").and_then(|(_, rest)| rest.split_once('@')).map(|(info, _)| info);
    if let Some(credentials) = credentials {
        assert!(!stderr.contains(credentials), "the AMQP credentials are in the log");
    }
    assert!(!stderr.contains(&amqp_url), "the AMQP URL is in the log");
    broker.close().await.expect("cleanup");
    db.close().await.expect("cleanup");
}
