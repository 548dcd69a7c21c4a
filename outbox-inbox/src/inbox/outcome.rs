//! [`Outcome`]: what the inbox did with an event.

/// What the inbox did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler applied it; `successors` parked events of the same entity were applied after it.
    Applied {
        /// Parked successors applied right after.
        successors: usize,
    },
    /// The consumer had already seen this event id: not handed to the handler.
    Duplicate,
    /// Its sequence is not above the entity's last applied one: not handed to the handler.
    Stale,
    /// It arrived ahead of a missing predecessor: stored until the gap fills.
    Parked,
}

impl Outcome {
    /// A label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Applied { .. } => "applied",
            Self::Duplicate => "duplicate",
            Self::Stale => "stale",
            Self::Parked => "parked",
        }
    }
}
