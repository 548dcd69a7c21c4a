use outbox_types::{FailureKind, PublishFailure};

/// Errors of the AMQP side: a URL that cannot be used, or the broker's failure, classified.
///
/// Messages carry reply codes and reasons from the broker, never message content or credentials:
/// the URL is never quoted (it may hold a password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The AMQP URL cannot be used; the reason never quotes the URL.
    #[error("invalid AMQP URL: {0}")]
    InvalidUrl(String),
    /// The broker refused or failed an operation, or could not be reached.
    #[error("{}", .0.reason)]
    Broker(PublishFailure),
    /// The broker did not confirm a message it was given (a nack, or it came back unroutable).
    #[error("the broker did not confirm the message: {0}")]
    NotConfirmed(String),
}

impl Error {
    /// The class of failure: whether trying again can help.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::InvalidUrl(_) => FailureKind::Contract,
            Self::Broker(failure) => failure.kind,
            Self::NotConfirmed(_) => FailureKind::Transient,
        }
    }
}

impl From<&lapin::Error> for Error {
    fn from(error: &lapin::Error) -> Self {
        Self::Broker(crate::classify::classify(error))
    }
}

impl From<lapin::Error> for Error {
    fn from(error: lapin::Error) -> Self {
        Self::from(&error)
    }
}
