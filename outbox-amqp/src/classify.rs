//! lapin's errors as the product's failure kinds: what is the message's fault, what is the
//! broker's or the network's, and when the connection itself is gone.

use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use outbox_types::{FailureKind, PublishFailure};

/// Classifies a lapin error. Reply codes and texts come from the broker and never hold message
/// content; the URL is never part of a lapin error's text.
pub(crate) fn classify(error: &lapin::Error) -> PublishFailure {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => {
            let text = amqp.get_message().as_str();
            let kind = match amqp.kind() {
                AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => FailureKind::Auth,
                AMQPErrorKind::Soft(AMQPSoftError::CONTENTTOOLARGE) => FailureKind::Rejected,
                AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED) if text.contains("message size") => {
                    FailureKind::Rejected
                }
                AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) => FailureKind::Auth,
                _ => FailureKind::Transient,
            };
            PublishFailure::new(kind, format!("broker error {}: {text}", amqp.get_id()))
        }
        lapin::ErrorKind::AuthProviderError(_) => PublishFailure::new(FailureKind::Auth, "authentication failed"),
        // An I/O error's text names the cause (connection refused, name not resolved), never the URL.
        lapin::ErrorKind::IOError(e) => PublishFailure::new(FailureKind::Transient, format!("connection error: {e}")),
        _ => PublishFailure::new(FailureKind::Transient, format!("{error}")),
    }
}

/// A failure to open a connection: RabbitMQ closes the socket on bad credentials during the
/// handshake (ACCESS_REFUSED, 403), which is an authentication failure.
pub(crate) fn connect_failure(error: &lapin::Error) -> PublishFailure {
    let mut failure = classify(error);
    if matches!(error.kind(), lapin::ErrorKind::ProtocolError(e) if e.get_id() == 403) {
        failure.kind = FailureKind::Auth;
    }
    failure.reason = format!("cannot connect to the broker: {}", failure.reason);
    failure
}

/// Whether the error means the connection is gone (dropped, reset, heartbeat missed, the broker
/// closing every connection as it stops), as opposed to the broker refusing one operation. `None`
/// when it depends on whether the connection is still up: a channel in an invalid state.
pub(crate) fn connection_lost(error: &lapin::Error) -> Option<bool> {
    match error.kind() {
        lapin::ErrorKind::IOError(_)
        | lapin::ErrorKind::InvalidConnectionState(_)
        | lapin::ErrorKind::MissingHeartbeatError
        | lapin::ErrorKind::RuntimeShutdownError(_) => Some(true),
        lapin::ErrorKind::InvalidChannelState(..) => None,
        lapin::ErrorKind::ProtocolError(e) => {
            Some(matches!(e.kind(), AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED)))
        }
        _ => Some(false),
    }
}
