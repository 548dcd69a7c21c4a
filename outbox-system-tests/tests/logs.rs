//! What the product's components log, captured at TRACE for every target with the product's log
//! filter (`outbox_types::REDACTING_LOG_TARGETS`, as the `outbox` command and the examples apply
//! it): never a payload. lapin logs a message the broker returns (unroutable, `mandatory`)
//! at WARN with its body, and whole frames (deliveries' bodies included) at TRACE.
//!
//! Its own test binary: the capture is the process's global subscriber.

use std::time::Duration;

use outbox_inbox::{HandlerError, InboxRequest};
use outbox_ops::admin;
use outbox_testkit::{Harness, LogCapture, wait_for};
use outbox_types::NewEvent;

/// Applies every event but `order.poison`, which it refuses for good (dead-lettered).
async fn handle(req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    if req.event().event_type == "order.poison" {
        return Err(HandlerError::permanent("this consumer refuses poison"));
    }
    Ok(req)
}

async fn enqueue(h: &Harness, event_type: &str, entity: &str, secret: &str) -> uuid::Uuid {
    let event = NewEvent::json(event_type, &serde_json::json!({ "secret": secret }))
        .expect("json")
        .entity(entity)
        .correlation_id(format!("corr-{entity}"));
    let mut tx = h.pool().begin().await.expect("begin");
    let id = h.outbox().enqueue(&mut *tx, event).await.expect("enqueue");
    tx.commit().await.expect("commit");
    *id.as_uuid()
}

/// The forms in which a payload would show in a log line: as text, and as lapin's `Debug` of the
/// body bytes (a list of decimals).
fn forms(secret: &str) -> Vec<String> {
    let body = serde_json::to_vec(&serde_json::json!({ "secret": secret })).expect("json");
    let decimals = |bytes: &[u8]| bytes.iter().map(u8::to_string).collect::<Vec<_>>().join(", ");
    vec![secret.to_owned(), decimals(&body[..16]), decimals(secret.as_bytes())]
}

/// The relay's own lines of a capture (its info and warn lines, not lapin's or sqlx's traces), to
/// tell why an event was not quarantined in time.
fn relay_lines(text: &str) -> String {
    let relay = |l: &&str| l.contains("outbox_relayer") && (l.contains(" INFO ") || l.contains(" WARN "));
    text.lines().filter(relay).take(200).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn no_payload_reaches_the_logs_at_trace() {
    let capture = LogCapture::install("trace");
    let secret = format!("p4yl0ad-{}", outbox_testkit::unique_suffix());
    // Only `order.*` is routed anywhere: `audit.recorded` comes back to the relay as unroutable.
    let h =
        Harness::builder().consumer(tower::service_fn(handle)).bindings(&["order.*"]).start().await.expect("harness");
    let applied = enqueue(&h, "order.placed", "order-1", &secret).await;
    let poison = enqueue(&h, "order.poison", "order-2", &secret).await;
    let returned = enqueue(&h, "audit.recorded", "audit-1", &secret).await;

    let quarantined = wait_for("the unroutable event quarantined", Duration::from_secs(90), || async {
        let listed = admin::list_quarantined(h.pool(), 10).await.ok()?;
        listed.iter().any(|q| *q.id.as_uuid() == returned).then_some(())
    })
    .await;
    if let Err(e) = quarantined {
        panic!("{e}; the relay's log lines:\n{}", relay_lines(&capture.text()));
    }
    let runner = h.consumer_handle().expect("consumer");
    wait_for("one applied, one dead-lettered", Duration::from_secs(90), || async {
        let stats = runner.stats();
        (stats.applied >= 1 && stats.dead_lettered >= 1).then_some(())
    })
    .await
    .expect("consumed");
    h.recorder().wait_all_delivered([applied, poison], Duration::from_secs(30)).await.expect("both delivered");
    h.close().await.expect("cleanup");

    let logs = capture.text();
    assert!(logs.contains("outbox.quarantine") && logs.contains("inbox.dead_lettered"), "the capture works");
    assert!(logs.lines().any(|l| l.contains("DEBUG") || l.contains("TRACE")), "the capture runs below INFO");
    // Every line about an event names its correlation id: the enqueue, the quarantine, the
    // handling, the dead letter.
    let about = |needle: &str, corr: &str| logs.lines().any(|l| l.contains(needle) && l.contains(corr));
    assert!(about("outbox.enqueue", "correlation_id=\"corr-order-1\""), "enqueue span:\n{logs}");
    assert!(about("outbox.quarantine", "corr-audit-1"), "quarantine line");
    assert!(about("inbox.handle", "correlation_id=\"corr-order-1\""), "handling span");
    assert!(about("inbox.dead_lettered", "corr-order-2"), "dead letter line");
    for form in forms(&secret) {
        let leaked: Vec<&str> = logs.lines().filter(|l| l.contains(&form)).take(3).collect();
        assert!(leaked.is_empty(), "payload ({form}) in the logs: {leaked:#?}");
    }
}
