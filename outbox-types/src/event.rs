//! An event as stored and as carried: [`Event`], its [`Payload`] and its [`Entity`].

use std::fmt;
use std::time::SystemTime;

use crate::EventId;
use crate::header::Headers;

/// Content type of payloads built by [`NewEvent::json`](crate::NewEvent::json).
pub const CONTENT_TYPE_JSON: &str = "application/json";

/// The body of an event and its content type. Its `Debug` shows the size only, never the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Payload {
    bytes: Vec<u8>,
    content_type: String,
}

impl Payload {
    /// Raw bytes with their content type.
    pub fn new(bytes: impl Into<Vec<u8>>, content_type: impl Into<String>) -> Self {
        Self { bytes: bytes.into(), content_type: content_type.into() }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Takes the bytes out.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The content type, for example `application/json`.
    pub fn content_type(&self) -> &str {
        &self.content_type
    }

    /// Parses a JSON payload into `T`.
    ///
    /// # Errors
    /// The serde error if the bytes are not valid JSON for `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.bytes)
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payload").field("len", &self.bytes.len()).field("content_type", &self.content_type).finish()
    }
}

/// The entity an ordered event belongs to, and its place in that entity's sequence.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entity {
    /// The entity key, for example `order-42`.
    pub key: String,
    /// Gapless sequence number within the entity, starting at 1, in commit order.
    pub seq: u64,
}

/// An event as stored in the outbox and as carried on the wire: what the relay publishes and what
/// a consumer's handler receives. Its `Debug` never shows the payload bytes or header values.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct Event {
    /// The event id, the same on every attempt.
    pub id: EventId,
    /// The event type (default routing key).
    pub event_type: String,
    /// The payload's schema version, at least 1.
    pub event_version: u32,
    /// The entity and sequence, for ordered events.
    pub entity: Option<Entity>,
    /// The payload and its content type.
    pub payload: Payload,
    /// The correlation id.
    pub correlation_id: Option<String>,
    /// The causation id.
    pub causation_id: Option<String>,
    /// The W3C trace context.
    pub traceparent: Option<String>,
    /// Extra headers (on the consumer side, also whatever the broker added).
    pub headers: Headers,
    /// When the event was created (the enqueuing transaction's time), millisecond precision on the wire.
    pub created_at: SystemTime,
}

impl Event {
    /// An event as read back from storage or from the wire: version 1, unordered, without
    /// correlation, causation, trace context or extra headers. Set the other public fields after
    /// (producers build events with [`NewEvent`](crate::NewEvent) instead).
    pub fn new(id: EventId, event_type: impl Into<String>, payload: Payload, created_at: SystemTime) -> Self {
        Self {
            id,
            event_type: event_type.into(),
            event_version: 1,
            entity: None,
            payload,
            correlation_id: None,
            causation_id: None,
            traceparent: None,
            headers: Headers::new(),
            created_at,
        }
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("id", &self.id)
            .field("event_type", &self.event_type)
            .field("event_version", &self.event_version)
            .field("entity", &self.entity)
            .field("payload", &self.payload)
            .field("correlation_id", &self.correlation_id)
            .field("causation_id", &self.causation_id)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("created_at", &self.created_at)
            .finish_non_exhaustive()
    }
}
