//! The log filter that keeps dependencies from printing message content.

/// A `tracing` targets filter (the syntax of `tracing_subscriber::filter::Targets`) that keeps
/// lapin, the AMQP client, from logging message content, and lets everything else through:
///
/// - `lapin::returned_messages=off`: lapin logs every message the broker returns (an unroutable
///   event, with `mandatory`) at WARN, body bytes included. The relay records and logs the return
///   itself, without the body.
/// - `lapin=info`: at DEBUG and TRACE lapin logs whole frames, message bodies included.
///
/// Put it on your output layer, behind your own filter: it only ever drops events, so it never
/// shows what your filter hides (`RUST_LOG=warn` stays quiet) and hides message content whatever
/// your filter shows (`RUST_LOG=trace` included). The `outbox` command and every example do so:
///
/// ```
/// use tracing_subscriber::filter::{EnvFilter, Targets};
/// use tracing_subscriber::prelude::*;
///
/// let yours = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
/// let redact: Targets = outbox_types::REDACTING_LOG_TARGETS.parse().expect("a constant that parses");
/// let subscriber = tracing_subscriber::registry()
///     .with(yours)
///     .with(tracing_subscriber::fmt::layer().with_filter(redact));
/// # drop(subscriber);
/// // subscriber.init();
/// ```
pub const REDACTING_LOG_TARGETS: &str = "trace,lapin=info,lapin::returned_messages=off";
