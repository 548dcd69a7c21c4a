//! What a test process logs, kept as text, for tests that assert on what a component logs (or
//! does not).

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::prelude::*;

/// Everything logged in this process as tracing's fmt output, without colours.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// Installs the capture as the process's global subscriber, logging what `filter` (an
    /// `EnvFilter` directive such as `"trace"` or `"lapin=warn"`) lets through, filtered after it
    /// by [`outbox_types::REDACTING_LOG_TARGETS`] as the `outbox` command and the examples are. A
    /// test that installs it runs in its own test binary.
    ///
    /// # Panics
    /// If the process has a global subscriber already.
    pub fn install(filter: &str) -> Self {
        let capture = Self::default();
        let redact: Targets = outbox_types::REDACTING_LOG_TARGETS.parse().expect("constant targets");
        let writer = capture.clone();
        let layer =
            tracing_subscriber::fmt::layer().with_ansi(false).with_writer(move || writer.clone()).with_filter(redact);
        tracing_subscriber::registry().with(EnvFilter::new(filter)).with(layer).init();
        capture
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
