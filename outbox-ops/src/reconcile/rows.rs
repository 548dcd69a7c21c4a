//! What the reconciliation reads and names: a business change, an event (by id, entity and
//! sequence), an outbox row, an inbox row, each with its readable `Display` (ids, entities,
//! sequences, statuses; never payloads).

use std::fmt;

use uuid::Uuid;

/// One business change, as the user's query reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Change {
    /// The entity went through versions `1..=version`; version `v` needs the event of sequence `v`.
    Entity {
        /// The entity key, as the events carry it.
        key: String,
        /// The entity's version.
        version: i64,
    },
    /// A change that recorded the id of its event.
    Event(Uuid),
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Entity { key, version } => write!(f, "{key} version {version}"),
            Self::Event(id) => write!(f, "change with event {id}"),
        }
    }
}

/// An event named by its id and, for ordered events, its entity and sequence.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventRef {
    /// The event id.
    pub id: Uuid,
    /// The entity key, for ordered events.
    pub entity: Option<String>,
    /// The entity sequence, for ordered events.
    pub seq: Option<i64>,
}

impl fmt::Display for EventRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.entity, self.seq) {
            (Some(e), Some(s)) => write!(f, "{} ({e}#{s})", self.id),
            _ => write!(f, "{}", self.id),
        }
    }
}

/// An outbox row as the reconciliation reads it (no payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// The event.
    pub event: EventRef,
    /// `pending`, `published`, `quarantined` or `skipped`.
    pub status: String,
    /// Publish attempts started.
    pub attempts: i32,
    /// The classified reason of the last failure.
    pub last_error_kind: Option<String>,
}

impl fmt::Display for OutboxRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}, {} attempts", self.event, self.status, self.attempts)?;
        if let Some(kind) = &self.last_error_kind {
            write!(f, ", last error {kind}")?;
        }
        Ok(())
    }
}

/// An inbox row as the reconciliation reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRow {
    /// The event.
    pub event: EventRef,
    /// `processed`, `parked`, `failed` or `skipped`.
    pub status: String,
}
