//! `outbox_amqp::close`: closing a connection with its channel logs nothing at ERROR. lapin
//! forgets a closed channel a moment after its close completes, and closing the channel and then
//! the connection made it forget the channel twice now and then, with an ERROR "Connection
//! error: invalid channel".
//!
//! Its own test binary: the capture is the process's global subscriber.

use std::sync::OnceLock;
use std::time::Duration;

use outbox_system_tests::sizes::CLOSES;
use outbox_testkit::{LogCapture, amqp_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_connection_with_its_channel_logs_no_error() {
    closes_log_no_error(CLOSES.fast).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long tier"]
async fn closing_a_connection_with_its_channel_logs_no_error_long_tier() {
    closes_log_no_error(CLOSES.long).await;
}

/// The process's capture of lapin's WARN and ERROR lines, installed by the first test that runs.
fn capture() -> &'static LogCapture {
    static CAPTURE: OnceLock<LogCapture> = OnceLock::new();
    CAPTURE.get_or_init(|| LogCapture::install("lapin=warn"))
}

async fn closes_log_no_error(rounds: usize) {
    let capture = capture();

    let url = amqp_url();
    for round in 0..rounds {
        let connection =
            outbox_amqp::connect(&url, "outbox-close-test", Duration::from_secs(10)).await.expect("connect");
        let channel = connection.create_channel().await.expect("channel");
        channel
            .exchange_declare(
                "amq.topic".into(),
                lapin::ExchangeKind::Topic,
                lapin::options::ExchangeDeclareOptions { passive: true, ..Default::default() },
                lapin::types::FieldTable::default(),
            )
            .await
            .expect("a call on the channel");
        outbox_amqp::close(&connection, &[&channel], "test done").await;
        assert!(!channel.status().connected(), "round {round}: the channel is closed with its connection");
    }
    let logged = capture.text();
    assert!(logged.is_empty(), "lapin logged:\n{logged}");
}
