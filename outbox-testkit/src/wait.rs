//! Waiting on a condition with a deadline, never on a bare sleep; a wait that gives up says what
//! it waited for and what it saw.

use std::fmt::{Debug, Display};

use crate::{Error, Result};

/// What a [`wait_for`] check returns: `Some(value)` or `Ok(value)` once the condition holds;
/// `None`, or `Err(seen)` saying what the check saw instead, while it does not. The timeout
/// repeats the last `seen`.
pub trait Check {
    /// The value the wait returns.
    type Output;

    /// The value, or what was seen instead (`None` when the check cannot say).
    fn into_result(self) -> std::result::Result<Self::Output, Option<String>>;
}

impl<T> Check for Option<T> {
    type Output = T;

    fn into_result(self) -> std::result::Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Check for std::result::Result<T, E> {
    type Output = T;

    fn into_result(self) -> std::result::Result<T, Option<String>> {
        self.map_err(|seen| Some(seen.to_string()))
    }
}

/// A check for [`wait_for`]: holds once `seen` reached `wanted`; until then it says
/// "`seen` of `wanted`".
///
/// ```
/// # async fn f(recorder: &outbox_testkit::Recorder) -> outbox_testkit::Result<()> {
/// use std::time::Duration;
/// outbox_testkit::wait_for("every event delivered", Duration::from_secs(30), || async {
///     outbox_testkit::at_least(recorder.count(), 1_000)
/// })
/// .await?; // on timeout: "... waiting for every event delivered; saw 998 of 1000"
/// # Ok(()) }
/// ```
///
/// # Errors
/// What was seen, while `seen < wanted`.
pub fn at_least<N: PartialOrd + Display>(seen: N, wanted: N) -> std::result::Result<(), String> {
    if seen >= wanted { Ok(()) } else { Err(format!("{seen} of {wanted}")) }
}

/// A check for [`wait_for`]: holds once `seen` equals `wanted`; until then it says what `seen` is.
///
/// # Errors
/// What was seen, while it differs from `wanted`.
pub fn equal<A: PartialEq<B> + Debug, B: Debug>(seen: A, wanted: B) -> std::result::Result<(), String> {
    if seen == wanted { Ok(()) } else { Err(format!("{seen:?}, not {wanted:?}")) }
}

/// Waits until `check` returns `Some`/`Ok` (see [`Check`]), polling every 20 ms, or fails after
/// `deadline`.
///
/// # Errors
/// [`Error::Timeout`] naming `what` and, when the check said it (`Err(seen)`), what it saw last.
pub async fn wait_for<C, F, Fut>(what: &str, deadline: std::time::Duration, mut check: F) -> Result<C::Output>
where
    C: Check,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = C>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let seen = match check().await.into_result() {
            Ok(v) => return Ok(v),
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= until {
            let seen = seen.unwrap_or_else(|| "the condition still false".to_owned());
            return Err(Error::Timeout { what: what.to_owned(), after: deadline, seen });
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
