//! The benchmarks' payload key: the producer and relay benchmarks measure encryption at rest with
//! one fixed key (a benchmark's key, not a secret).

use outbox_types::{Keyring, PayloadCipher};

/// The cipher every sealed variant uses.
pub(crate) fn cipher() -> PayloadCipher {
    PayloadCipher::new(Keyring::new("bench-1", [0x42; outbox_types::KEY_BYTES]).expect("a valid key id"))
}
