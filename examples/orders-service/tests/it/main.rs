//! The orders service as its operators run it: its process stops cleanly, its logs hold no
//! payload.

mod process;
mod redaction;
