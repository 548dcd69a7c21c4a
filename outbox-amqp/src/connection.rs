//! Opening a connection: the URL checked first, a name shown in the management UI, a bound on
//! how long the attempt may take, and a failure that names its cause without the URL.

use std::time::Duration;

use lapin::{Channel, Connection, ConnectionProperties};
use outbox_types::{FailureKind, PublishFailure};

use crate::classify::connect_failure;
use crate::{Error, check_url};

/// Opens a connection to the broker at `url`, named `name` in RabbitMQ's management UI, giving
/// up after `timeout`.
///
/// # Errors
/// [`Error::InvalidUrl`] for a URL that cannot be used; [`Error::Broker`] with the cause
/// (connection refused, name not resolved, authentication refused, timed out).
pub async fn connect(url: &str, name: &str, timeout: Duration) -> Result<Connection, Error> {
    check_url(url)?;
    let props = ConnectionProperties::default().with_connection_name(name.into());
    match tokio::time::timeout(timeout, Connection::connect(url, props)).await {
        Err(_) => {
            Err(Error::Broker(PublishFailure::new(FailureKind::Transient, "cannot connect to the broker: timed out")))
        }
        Ok(Err(e)) => Err(Error::Broker(connect_failure(&e))),
        Ok(Ok(connection)) => Ok(connection),
    }
}

/// How long [`close`] waits for the broker to answer a connection's close.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Closes `connection` and, with it, `channels` (opened on it), giving the broker `reason`.
///
/// The channels are not closed one by one first: lapin forgets a closed channel a moment after
/// its close completes, and a connection closed within that moment forgets it a second time and
/// logs a spurious "Connection error: invalid channel". Nor may a channel be dropped while still
/// open, which closes it in the background with the same race. So the connection is closed with
/// the channels held, and they are let go once lapin has marked them closed.
///
/// A broker that does not answer the close (a stalled link, a node under load) is waited for at
/// most [`CLOSE_TIMEOUT`]: a process stopping must not hang on it.
pub async fn close(connection: &Connection, channels: &[&Channel], reason: &str) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, connection.close(200, reason.into())).await;
    let settled = async {
        while channels.iter().any(|c| c.status().connected()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), settled).await;
}
