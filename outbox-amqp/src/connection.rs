//! Opening a connection: the URL checked first, a name shown in the management UI, a bound on
//! how long the attempt may take, and a failure that names its cause without the URL.

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};
use outbox_core::{FailureKind, PublishFailure};

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
