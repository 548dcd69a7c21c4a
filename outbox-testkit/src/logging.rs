//! The log of the testkit's processes and the bench, through the product's redacting filter.

/// Installs the log of the testkit's processes and the bench: stderr, `RUST_LOG` (or `default`),
/// and [`outbox_types::REDACTING_LOG_TARGETS`], so that no payload reaches a log line.
pub fn init_logging(default: &str) {
    use tracing_subscriber::filter::{EnvFilter, Targets};
    use tracing_subscriber::prelude::*;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let redact: Targets = outbox_types::REDACTING_LOG_TARGETS.parse().unwrap_or_default();
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(redact);
    tracing_subscriber::registry().with(filter).with(layer).init();
}
