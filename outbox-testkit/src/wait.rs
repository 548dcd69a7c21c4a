//! Waiting on a condition with a deadline, never on a bare sleep.

use crate::{Error, Result};

/// Waits until `check` returns `Some`, polling every 20 ms, or fails after `deadline`.
///
/// # Errors
/// [`Error::Timeout`] naming `what` if the deadline passes first.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: std::time::Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= until {
            return Err(Error::Timeout { what: what.to_owned(), after: deadline });
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
