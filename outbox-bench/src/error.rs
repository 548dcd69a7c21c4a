//! The error type of the benchmarks.

use std::error::Error;

/// The error type of the benchmarks: anything, as long as it can cross tasks.
pub(crate) type BoxError = Box<dyn Error + Send + Sync>;
