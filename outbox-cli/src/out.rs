//! Where a command's report goes: standard output as it is written, or a buffer, when the command
//! runs on many databases and each one's JSON is gathered under its name.

use std::fmt::{Display, Write as _};

/// A command's standard output.
#[derive(Debug)]
pub(crate) enum Out {
    /// Printed as it is written.
    Stdout,
    /// Kept, to be printed once the command is done.
    Buffer(String),
}

impl Out {
    /// Writes `text` and a line break.
    pub(crate) fn line(&mut self, text: impl Display) {
        match self {
            Self::Stdout => println!("{text}"),
            Self::Buffer(kept) => {
                let _ = writeln!(kept, "{text}");
            }
        }
    }

    /// Writes `text` as it is (a table ends with its own line break).
    pub(crate) fn text(&mut self, text: impl Display) {
        match self {
            Self::Stdout => print!("{text}"),
            Self::Buffer(kept) => {
                let _ = write!(kept, "{text}");
            }
        }
    }
}
