use std::fmt;
use std::str::FromStr;

/// Lifecycle of an outbox row.
///
/// ```text
/// pending ──confirm──► published
///    │ ▲
///    │ └── operator retry (same row, same event id)
///    ▼ │
/// quarantined ──operator skip──► skipped
/// ```
///
/// A pending row is claimed by one relay at a time (a lease with a fencing token, not a status of
/// its own); a transient failure leaves it pending with a later `next_attempt_at`. Published and
/// skipped are final: retention may delete them, and neither holds back its entity's later events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// Committed and waiting to be published (or being published under a claim).
    Pending,
    /// Confirmed by the broker.
    Published,
    /// Could not be published; waits for an operator. Holds back its entity's later events.
    Quarantined,
    /// An operator gave up on it; its entity's later events flow again.
    Skipped,
}

impl Status {
    /// The name stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Published => "published",
            Self::Quarantined => "quarantined",
            Self::Skipped => "skipped",
        }
    }

    /// Whether the row is done: it will never be published (again) by the relay.
    pub const fn is_final(self) -> bool {
        match self {
            Self::Published | Self::Skipped => true,
            Self::Pending | Self::Quarantined => false,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`Status`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown outbox status {0:?}")]
pub struct ParseStatusError(pub String);

impl FromStr for Status {
    type Err = ParseStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pending" => Ok(Self::Pending),
            "published" => Ok(Self::Published),
            "quarantined" => Ok(Self::Quarantined),
            "skipped" => Ok(Self::Skipped),
            other => Err(ParseStatusError(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [Status::Pending, Status::Published, Status::Quarantined, Status::Skipped] {
            assert_eq!(s.as_str().parse::<Status>(), Ok(s));
        }
        assert!("sent".parse::<Status>().is_err());
        assert!(Status::Published.is_final() && !Status::Quarantined.is_final());
    }
}
