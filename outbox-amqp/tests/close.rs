//! Closing a connection with its channel logs nothing at ERROR: lapin forgets a closed channel a
//! moment after its close completes, and closing the channel and then the connection made it
//! forget the channel twice now and then, with an ERROR "Connection error: invalid channel".
//!
//! Its own test binary: the capture is the process's global subscriber.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing_subscriber::prelude::*;

/// Everything lapin logs at WARN and above in this process, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn amqp_url() -> String {
    std::env::var("OUTBOX_TEST_AMQP_URL")
        .or_else(|_| std::env::var("AMQP_URL"))
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_connection_with_its_channel_logs_no_error() {
    let capture = Capture::default();
    let writer = capture.clone();
    let layer = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(move || writer.clone());
    tracing_subscriber::registry().with(tracing_subscriber::filter::EnvFilter::new("lapin=warn")).with(layer).init();

    let url = amqp_url();
    for round in 0..100 {
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
    let logged = String::from_utf8_lossy(&capture.0.lock().expect("capture")).into_owned();
    assert!(logged.is_empty(), "lapin logged:\n{logged}");
}
