//! Sealed payloads seen by an operator: `outbox events show` says a payload is sealed and with
//! which key, `--payload` opens it with `OUTBOX_PAYLOAD_KEYS` (and refuses in one line without
//! it), and a key list that does not read is refused by the relay naming the entry, never a key.

use std::process::Output;

use crate::support::outbox;
use base64::Engine;
use outbox_producer::Outbox;
use outbox_testkit::TestDb;
use outbox_types::{KEY_BYTES, Keyring, NewEvent, PayloadCipher};

const SECRET: &str = "IBAN-DE89-SECRET";

async fn run(url: &str, keys: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = outbox();
    cmd.args(args).env("DATABASE_URL", url).env("AMQP_URL", outbox_testkit::amqp_url());
    if let Some(keys) = keys {
        cmd.env("OUTBOX_PAYLOAD_KEYS", keys);
    }
    tokio::task::spawn_blocking(move || cmd.output().expect("run outbox")).await.expect("join")
}

#[tokio::test]
async fn show_opens_a_sealed_payload_only_with_the_keys() {
    let db = TestDb::new().await.expect("db");
    let key = [7; KEY_BYTES];
    let outbox = Outbox::builder().cipher(PayloadCipher::new(Keyring::new("k7", key).expect("key"))).build();
    let mut tx = db.pool().begin().await.expect("begin");
    let event = NewEvent::json("payment.made", &serde_json::json!({ "iban": SECRET })).expect("json");
    let id = outbox.enqueue(&mut *tx, event).await.expect("enqueue").to_string();
    tx.commit().await.expect("commit");
    let url = db.url();
    let keys = format!("k7:{}", base64::engine::general_purpose::STANDARD.encode(key));

    let shown = run(&url, None, &["events", "show", &id]).await;
    let out = String::from_utf8_lossy(&shown.stdout);
    assert!(out.lines().any(|l| l.starts_with("payload") && l.contains("sealed with key k7")), "{out}");
    let refused = run(&url, None, &["events", "show", &id, "--payload"]).await;
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.lines().count() == 1 && err.contains("OUTBOX_PAYLOAD_KEYS"), "{err}");
    let opened = run(&url, Some(&keys), &["events", "show", &id, "--payload"]).await;
    let out = String::from_utf8_lossy(&opened.stdout);
    assert!(opened.status.success(), "{}", String::from_utf8_lossy(&opened.stderr));
    assert!(out.contains(SECRET), "the payload opened with the keys: {out}");

    let short = base64::engine::general_purpose::STANDARD.encode([1; 16]);
    let bad = format!("{keys},old:{short}");
    let relay = run(&url, Some(&bad), &["relay", "--exchange", "amq.topic", "--no-declare-exchange"]).await;
    let err = String::from_utf8_lossy(&relay.stderr);
    assert_eq!(relay.status.code(), Some(1), "{err}");
    let line = err.lines().find(|l| l.starts_with("outbox: error: ")).unwrap_or_default();
    assert!(line.contains("key 2: not 32 bytes"), "{err}");
    assert!(!err.contains(&short) && !err.contains(&keys[3..]), "no key in the output: {err}");
    db.close().await.expect("cleanup");
}
