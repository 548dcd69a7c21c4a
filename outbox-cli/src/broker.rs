//! Reaching RabbitMQ: the URL checked before anything else, then one connection opened before
//! the relay starts, retried with a log line per attempt until the broker answers.

use outbox_relayer::AmqpPublisher;
use outbox_types::{FailureKind, Publisher};

use crate::error::CliError;
use crate::retry::{Failure, Patience, until_ready};
use crate::signal::Shutdown;

/// The publisher for the broker's nodes `urls` (blank ones ignored), refused at once if a URL is
/// malformed (the error never quotes it).
///
/// # Errors
/// [`CliError::Broker`] holding `InvalidUrl`.
pub(crate) fn publisher(urls: &[String]) -> Result<AmqpPublisher, CliError> {
    let mut urls = urls.iter().map(|u| u.trim()).filter(|u| !u.is_empty());
    let first = urls.next().unwrap_or_default();
    Ok(AmqpPublisher::builder(first).nodes(urls).build()?)
}

/// Connects `publisher`, retrying until the broker answers: `Ok(true)`; `Ok(false)` if a signal
/// came first.
///
/// # Errors
/// [`CliError::BrokerRefused`] at once when the broker refuses the credentials.
pub(crate) async fn connect_patiently(publisher: &AmqpPublisher, shutdown: &Shutdown) -> Result<bool, CliError> {
    let connected = until_ready("the broker", Patience::UntilSignalled(shutdown), || async {
        publisher.connect().await.map_err(|failure| match failure.kind {
            FailureKind::Auth => Failure::Fatal(CliError::BrokerRefused(failure.reason)),
            _ => Failure::Retry(failure.reason),
        })
    })
    .await?;
    Ok(connected.is_some())
}
