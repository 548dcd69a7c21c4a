//! The log: `tracing` to stderr as text or JSON lines, filtered by `RUST_LOG` (default `info`),
//! and never message bodies whatever `RUST_LOG` asks for.

use std::io::IsTerminal;

use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::prelude::*;

use crate::args::LogFormat;

/// The product's redacting filter: lapin at most at INFO, its returned messages never.
fn redact() -> Targets {
    // A constant, checked by a test below; should it ever fail to parse, log nothing from lapin.
    outbox_types::REDACTING_LOG_TARGETS.parse().unwrap_or_else(|_| {
        Targets::new()
            .with_default(tracing::Level::TRACE)
            .with_target("lapin", tracing_subscriber::filter::LevelFilter::OFF)
    })
}

/// Installs the subscriber: `RUST_LOG` (or `info`), lines in `format`, and the redacting filter,
/// which only ever drops events.
pub(crate) fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Text => lines.with_ansi(std::io::stderr().is_terminal()).with_filter(redact()).boxed(),
        LogFormat::Json => lines.json().flatten_event(true).with_filter(redact()).boxed(),
    };
    tracing_subscriber::registry().with(filter).with(layer).init();
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_redacting_targets_parse() {
        outbox_types::REDACTING_LOG_TARGETS.parse::<tracing_subscriber::filter::Targets>().expect("parses");
    }
}
