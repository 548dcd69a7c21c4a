//! [`StartPolicy`]: where an entity's numbering starts for a consumer that first sees it.

/// Where an entity's numbering starts for this consumer when it first sees the entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StartPolicy {
    /// Expect sequence 1: a consumer that joins late parks every event of an entity whose first
    /// events it never saw, until an operator skips the gap. Safe and strict. The default.
    #[default]
    FromFirst,
    /// Accept whatever sequence arrives first for an entity the consumer has never seen, and be
    /// strict from there on. For consumers that join a running system (for example a new read
    /// model fed only with new events). Out-of-order first deliveries can then drop an earlier event
    /// as stale.
    FromFirstSeen,
}
