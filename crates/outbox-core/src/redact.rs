//! Log filter directives that keep dependencies from printing message content.

/// `tracing` filter directives (the `EnvFilter` / `RUST_LOG` syntax) that keep lapin, the AMQP
/// client, from logging message content. Add them after the user's own directives, so they win
/// whatever `RUST_LOG` says:
///
/// - `lapin::returned_messages=off`: lapin logs every message the broker returns (an unroutable
///   event, with `mandatory`) at WARN, body bytes included. The relay records and logs the return
///   itself, without the body.
/// - `lapin=info`: at DEBUG and TRACE lapin logs whole frames, message bodies included.
///
/// The `outbox` command and every example apply them; a service that installs its own subscriber
/// should too:
///
/// ```
/// # fn filter(env: &str) -> Vec<String> {
/// let mut directives: Vec<String> = env.split(',').map(str::to_owned).collect();
/// directives.extend(outbox_core::REDACTING_LOG_DIRECTIVES.iter().map(|d| (*d).to_owned()));
/// # directives }
/// // With tracing-subscriber:
/// // let mut filter = EnvFilter::from_default_env();
/// // for d in outbox_core::REDACTING_LOG_DIRECTIVES { filter = filter.add_directive(d.parse()?); }
/// # assert_eq!(filter("trace").last().map(String::as_str), Some("lapin=info"));
/// ```
pub const REDACTING_LOG_DIRECTIVES: [&str; 2] = ["lapin::returned_messages=off", "lapin=info"];
