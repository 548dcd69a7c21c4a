//! The log: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), and never message bodies
//! whatever `RUST_LOG` asks for.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// `RUST_LOG` (or `info`) followed by the directives that keep lapin from logging message bodies;
/// added last, they override whatever `RUST_LOG` says about lapin.
fn filter() -> EnvFilter {
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    for directive in outbox_core::REDACTING_LOG_DIRECTIVES {
        // Constants, checked by a test below: a directive that did not parse would be a bug.
        if let Ok(directive) = directive.parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// Installs the subscriber.
pub(crate) fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_redacting_directives_parse() {
        for directive in outbox_core::REDACTING_LOG_DIRECTIVES {
            assert!(directive.parse::<tracing_subscriber::filter::Directive>().is_ok(), "{directive}");
        }
    }
}
