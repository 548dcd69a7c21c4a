use std::fmt;
use std::str::FromStr;

/// Why a publish (or a handler) failed. Every failure the product sees is classified into one of
/// these, and the class alone decides what happens next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum FailureKind {
    /// The outcome is unknown or the cause is passing: connection refused or dropped, timeout,
    /// channel closed, a `Nack`, a confirm that never came. Retried with backoff and the same
    /// event id, up to the policy's attempts and age.
    Transient,
    /// The event breaks the wire contract or its content cannot be sent as it is (for example a
    /// header the broker cannot carry). Retrying cannot help: quarantined at once.
    Contract,
    /// The broker or database refused our credentials or permissions (expired password, revoked
    /// access). Operational, not the event's fault: retried with backoff while an operator fixes
    /// the credentials.
    Auth,
    /// The broker refused this message for good: too large, unroutable (returned by `mandatory`),
    /// or rejected by a queue policy. Quarantined at once.
    Rejected,
    /// The broker could not be reached: no connection (refused, name not resolved, credentials
    /// refused at connect), or the connection was lost before the message's confirm came. Not the
    /// event's failure: the relay gives the row back without charging an attempt and pauses its
    /// claims until the broker answers again. Never recorded against an event.
    Unavailable,
}

impl FailureKind {
    /// Every kind, for exhaustive listings (metrics, docs).
    pub const ALL: [Self; 5] = [Self::Transient, Self::Contract, Self::Auth, Self::Rejected, Self::Unavailable];

    /// The name stored in the database and used in metrics labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Contract => "contract",
            Self::Auth => "auth",
            Self::Rejected => "rejected",
            Self::Unavailable => "unavailable",
        }
    }

    /// Whether retrying the same event can ever succeed without a change to the event itself.
    pub const fn is_permanent(self) -> bool {
        match self {
            Self::Contract | Self::Rejected => true,
            Self::Transient | Self::Auth | Self::Unavailable => false,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FailureKind {
    type Err = crate::ParseStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| crate::ParseStatusError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_permanence() {
        for k in FailureKind::ALL {
            assert_eq!(k.as_str().parse::<FailureKind>(), Ok(k));
        }
        let permanent: Vec<_> = FailureKind::ALL.into_iter().filter(|k| k.is_permanent()).collect();
        assert_eq!(permanent, [FailureKind::Contract, FailureKind::Rejected]);
    }
}
