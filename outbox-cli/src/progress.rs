//! Progress on stderr for the commands that work through many rows (`cleanup`, `replay`): a bar
//! on a terminal, otherwise a line every 10 % (for a log).

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use indicatif::{ProgressBar, ProgressStyle};

/// Progress toward `expected` rows. Clones share it.
#[derive(Clone)]
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    /// The lines' verb and noun: `deleted 500 of 5000 rows`.
    done_verb: &'static str,
    what: String,
    expected: u64,
    done: Arc<AtomicU64>,
}

impl Progress {
    /// A bar headed `doing` on a terminal, else lines `<done_verb> N of <expected> <what>`.
    pub(crate) fn new(doing: &str, done_verb: &'static str, what: &str, expected: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(expected);
            let style = ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} ({per_sec}, {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_message(doing.to_owned());
            bar
        });
        Self { bar, done_verb, what: what.to_owned(), expected, done: Arc::default() }
    }

    /// `n` more rows done.
    pub(crate) fn advance(&self, n: u64) {
        let before = self.done.fetch_add(n, Ordering::Relaxed);
        let after = before + n;
        match &self.bar {
            Some(bar) => bar.inc(n),
            None if self.expected > 0 && after * 10 / self.expected > before * 10 / self.expected => {
                eprintln!("{} {after} of {} {}", self.done_verb, self.expected, self.what);
            }
            None => {}
        }
    }

    /// Clears the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
