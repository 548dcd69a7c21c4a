//! An event to be written, as a producer builds it: [`NewEvent`], and the [`Limits`] its
//! validation applies.

use std::fmt;
use std::time::SystemTime;

use crate::event::{CONTENT_TYPE_JSON, Entity, Event, Payload};
use crate::header::{HeaderValue, Headers};
use crate::validate::{validate_entity_key, validate_event_type, validate_headers, validate_id, validate_traceparent};
use crate::{EventError, EventId, Result};

/// Size limits applied by [`NewEvent::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_payload_bytes: usize,
    max_header_bytes: usize,
}

impl Limits {
    /// Default maximum payload: 1 MiB.
    pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
    /// Default maximum size of the extra headers: 16 KiB.
    pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;

    /// Sets the maximum payload size in bytes. Defaults to 1 MiB.
    #[must_use]
    pub const fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// Sets the maximum size of the extra headers (names plus values) in bytes. Defaults to 16 KiB.
    #[must_use]
    pub const fn max_header_bytes(mut self, bytes: usize) -> Self {
        self.max_header_bytes = bytes;
        self
    }

    /// The maximum payload size in bytes.
    pub const fn payload_limit(&self) -> usize {
        self.max_payload_bytes
    }

    /// The maximum size of the extra headers in bytes.
    pub const fn header_limit(&self) -> usize {
        self.max_header_bytes
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_payload_bytes: Self::DEFAULT_MAX_PAYLOAD_BYTES, max_header_bytes: Self::DEFAULT_MAX_HEADER_BYTES }
    }
}

/// An event to be written to the outbox, built by the producer.
///
/// Nothing is checked while building; [`NewEvent::validate`] (called by the producer's `enqueue`
/// before any SQL) checks everything and returns a typed [`EventError`].
///
/// Each setter has a getter of the same name with `event_` in front: `id` / `event_id`,
/// `version` / `event_version`, `entity` / `event_entity`, `correlation_id` /
/// `event_correlation_id`, `causation_id` / `event_causation_id`, `traceparent` /
/// `event_traceparent`, `header` / `event_headers`, `idempotency_key` / `event_idempotency_key`; and `event_type`, `event_payload`.
///
/// ```
/// use outbox_types::{NewEvent, Payload};
///
/// let json = NewEvent::json("order.shipped", &serde_json::json!({ "order": 42 }))?
///     .version(2)
///     .entity("order-42")
///     .causation_id("cmd-1")
///     .header("tenant", "acme");
/// let raw = NewEvent::new("image.resized", Payload::new(vec![1, 2, 3], "application/octet-stream"));
/// assert_eq!(json.event_version(), 2);
/// assert!(raw.event_entity().is_none());
/// # Ok::<(), outbox_types::EventError>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct NewEvent {
    id: EventId,
    event_type: String,
    event_version: u32,
    entity_key: Option<String>,
    payload: Payload,
    correlation_id: Option<String>,
    causation_id: Option<String>,
    traceparent: Option<String>,
    headers: Headers,
    idempotency_key: Option<String>,
}

impl NewEvent {
    /// An event with a raw payload. The id is minted now; the version defaults to 1.
    pub fn new(event_type: impl Into<String>, payload: Payload) -> Self {
        Self {
            id: EventId::new(),
            event_type: event_type.into(),
            event_version: 1,
            entity_key: None,
            payload,
            correlation_id: None,
            causation_id: None,
            traceparent: None,
            headers: Headers::new(),
            idempotency_key: None,
        }
    }

    /// An event whose payload is `value` serialized as JSON (`application/json`).
    ///
    /// # Errors
    /// [`EventError::PayloadSerialization`] if `value` cannot be serialized.
    pub fn json<T: serde::Serialize + ?Sized>(event_type: impl Into<String>, value: &T) -> Result<Self> {
        let bytes = serde_json::to_vec(value).map_err(|e| EventError::PayloadSerialization {
            category: match e.classify() {
                serde_json::error::Category::Io => "io",
                serde_json::error::Category::Syntax => "syntax",
                serde_json::error::Category::Data => "data",
                serde_json::error::Category::Eof => "eof",
            },
        })?;
        Ok(Self::new(event_type, Payload::new(bytes, CONTENT_TYPE_JSON)))
    }

    /// Sets the event id, for a caller that must know or choose it up front. Defaults to a new
    /// UUID v7.
    #[must_use]
    pub fn id(mut self, id: EventId) -> Self {
        self.id = id;
        self
    }

    /// Sets the schema version of the payload (at least 1). Defaults to 1.
    #[must_use]
    pub fn version(mut self, version: u32) -> Self {
        self.event_version = version;
        self
    }

    /// Makes the event ordered within `key`: it gets the entity's next sequence number at enqueue
    /// time, and is published only after its predecessor is confirmed. Defaults to none (unordered).
    #[must_use]
    pub fn entity(mut self, key: impl Into<String>) -> Self {
        self.entity_key = Some(key.into());
        self
    }

    /// Sets the correlation id (AMQP `correlation_id`). Defaults to none.
    #[must_use]
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }

    /// Sets the causation id (header `x-causation-id`). Defaults to none.
    #[must_use]
    pub fn causation_id(mut self, id: impl Into<String>) -> Self {
        self.causation_id = Some(id.into());
        self
    }

    /// Sets the W3C trace context (header `traceparent`). Defaults to none.
    #[must_use]
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// Adds an extra header (string, integer or boolean). Defaults to none.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<HeaderValue>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Makes the enqueue idempotent: a second event of the same type with the same `key`, enqueued
    /// while the first one's key is kept (24 hours by default, `OutboxBuilder::idempotency_window`),
    /// is not written; the enqueue answers with the first event's id instead. Use the request's own
    /// id (an `Idempotency-Key` HTTP header, a command id), so that a retried request makes no
    /// second event. Keys are scoped by event type. At most 255 bytes, no control characters.
    /// Defaults to none (every enqueue writes an event).
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The event id.
    pub fn event_id(&self) -> EventId {
        self.id
    }
    /// The event type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }
    /// The schema version.
    pub fn event_version(&self) -> u32 {
        self.event_version
    }
    /// The entity key, if the event is ordered.
    pub fn event_entity(&self) -> Option<&str> {
        self.entity_key.as_deref()
    }
    /// The payload.
    pub fn event_payload(&self) -> &Payload {
        &self.payload
    }
    /// The correlation id.
    pub fn event_correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }
    /// The causation id.
    pub fn event_causation_id(&self) -> Option<&str> {
        self.causation_id.as_deref()
    }
    /// The trace context.
    pub fn event_traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }
    /// The extra headers.
    pub fn event_headers(&self) -> &Headers {
        &self.headers
    }
    /// The idempotency key, if the enqueue is idempotent.
    pub fn event_idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// Checks every field against the wire contract and `limits`.
    ///
    /// # Errors
    /// The first [`EventError`] found.
    pub fn validate(&self, limits: &Limits) -> Result<()> {
        validate_event_type(&self.event_type)?;
        if self.event_version == 0 {
            return Err(EventError::InvalidVersion);
        }
        if let Some(key) = &self.entity_key {
            validate_entity_key(key)?;
        }
        let size = self.payload.bytes().len();
        if size > limits.max_payload_bytes {
            return Err(EventError::PayloadTooLarge { size, max: limits.max_payload_bytes });
        }
        let ct = self.payload.content_type();
        if ct.is_empty() || ct.len() > 255 || !ct.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(EventError::InvalidContentType);
        }
        validate_id("correlation_id", self.correlation_id.as_deref())?;
        validate_id("causation_id", self.causation_id.as_deref())?;
        validate_id("idempotency_key", self.idempotency_key.as_deref())?;
        if let Some(tp) = &self.traceparent {
            validate_traceparent(tp)?;
        }
        validate_headers(&self.headers, limits.max_header_bytes)
    }

    /// Turns the event into the stored form, as the relay will read it back.
    pub fn into_event(self, seq: Option<u64>, created_at: SystemTime) -> Event {
        Event {
            id: self.id,
            event_type: self.event_type,
            event_version: self.event_version,
            entity: match (self.entity_key, seq) {
                (Some(key), Some(seq)) => Some(Entity { key, seq }),
                _ => None,
            },
            payload: self.payload,
            correlation_id: self.correlation_id,
            causation_id: self.causation_id,
            traceparent: self.traceparent,
            headers: self.headers,
            created_at,
        }
    }
}

impl fmt::Debug for NewEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewEvent")
            .field("id", &self.id)
            .field("event_type", &self.event_type)
            .field("event_version", &self.event_version)
            .field("entity_key", &self.entity_key)
            .field("payload", &self.payload)
            .field("correlation_id", &self.correlation_id)
            .field("causation_id", &self.causation_id)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("idempotency_key", &self.idempotency_key)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "SECRET-PAYLOAD-4f1c";

    fn ok_event() -> NewEvent {
        NewEvent::json("order.placed", &serde_json::json!({ "secret": SECRET })).expect("serializable")
    }

    type Case = (NewEvent, fn(&EventError) -> bool);

    fn invalid_events() -> Vec<Case> {
        vec![
            (ok_event().version(0), |e| matches!(e, EventError::InvalidVersion)),
            (NewEvent::json("", &1).expect("json"), |e| matches!(e, EventError::EmptyEventType)),
            (NewEvent::json("t".repeat(256), &1).expect("json"), |e| {
                matches!(e, EventError::EventTypeTooLong { len: 256, max: 255 })
            }),
            (NewEvent::json("a b", &1).expect("json"), |e| matches!(e, EventError::InvalidEventType)),
            (ok_event().entity(""), |e| matches!(e, EventError::EmptyEntityKey)),
            (ok_event().entity("k".repeat(256)), |e| matches!(e, EventError::EntityKeyTooLong { len: 256, max: 255 })),
            (ok_event().entity("a\nb"), |e| matches!(e, EventError::InvalidEntityKey)),
            (NewEvent::new("t", Payload::new(vec![], "")), |e| matches!(e, EventError::InvalidContentType)),
            (ok_event().header("x-seq", 1), |e| matches!(e, EventError::ReservedHeader { .. })),
            (ok_event().header("X-Entity", "k"), |e| matches!(e, EventError::ReservedHeader { .. })),
            (ok_event().header("x-outbox-anything", "k"), |e| matches!(e, EventError::ReservedHeader { .. })),
            (ok_event().header("x-death", "k"), |e| matches!(e, EventError::ReservedHeader { .. })),
            (ok_event().header("", "v"), |e| matches!(e, EventError::InvalidHeaderName { .. })),
            (ok_event().header("has space", "v"), |e| matches!(e, EventError::InvalidHeaderName { .. })),
            (ok_event().header("ünicode", "v"), |e| matches!(e, EventError::InvalidHeaderName { .. })),
            (ok_event().header("h".repeat(129), "v"), |e| matches!(e, EventError::InvalidHeaderName { .. })),
            (ok_event().header("f", HeaderValue::Float(1.5)), |e| {
                matches!(e, EventError::UnsupportedHeaderValue { type_name: "float", .. })
            }),
            (ok_event().header("k", "a\0b"), |e| matches!(e, EventError::InvalidHeaderValue { .. })),
            (ok_event().correlation_id("a\0b"), |e| matches!(e, EventError::InvalidId { field: "correlation_id" })),
            (ok_event().entity("a\0b"), |e| matches!(e, EventError::InvalidEntityKey)),
            (NewEvent::json("a\0b", &1).expect("json"), |e| matches!(e, EventError::InvalidEventType)),
            (ok_event().header("big", "v".repeat(17 * 1024)), |e| matches!(e, EventError::HeadersTooLarge { .. })),
            (ok_event().correlation_id(""), |e| matches!(e, EventError::InvalidId { field: "correlation_id" })),
            (ok_event().causation_id("c".repeat(256)), |e| {
                matches!(e, EventError::InvalidId { field: "causation_id" })
            }),
            (ok_event().traceparent("00-abc-def-01"), |e| matches!(e, EventError::InvalidTraceparent)),
            (ok_event().idempotency_key(""), |e| matches!(e, EventError::InvalidId { field: "idempotency_key" })),
            (ok_event().idempotency_key("k\0"), |e| matches!(e, EventError::InvalidId { field: "idempotency_key" })),
            (ok_event().idempotency_key("k".repeat(256)), |e| {
                matches!(e, EventError::InvalidId { field: "idempotency_key" })
            }),
        ]
    }

    #[test]
    fn valid_events_pass() {
        ok_event().validate(&Limits::default()).expect("valid");
        ok_event()
            .entity("order-1")
            .version(3)
            .correlation_id("c")
            .causation_id("d")
            .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .header("tenant", "acme")
            .header("priority", 5)
            .header("urgent", true)
            .validate(&Limits::default())
            .expect("valid");
        // Exactly at the limits.
        NewEvent::json("t".repeat(255), &1)
            .expect("json")
            .entity("k".repeat(255))
            .validate(&Limits::default())
            .expect("valid at the limit");
    }

    #[test]
    fn every_invalid_event_has_its_typed_error() {
        for (event, expected) in invalid_events() {
            let err = event.validate(&Limits::default()).expect_err("must be rejected");
            assert!(expected(&err), "unexpected error {err:?} for {event:?}");
        }
        let big = NewEvent::new("t", Payload::new(vec![b'x'; 17], "text/plain"));
        let err = big.validate(&Limits::default().max_payload_bytes(16)).expect_err("too large");
        assert_eq!(err, EventError::PayloadTooLarge { size: 17, max: 16 });
        let default_max = NewEvent::new("t", Payload::new(vec![0; Limits::DEFAULT_MAX_PAYLOAD_BYTES + 1], "a/b"));
        assert!(matches!(default_max.validate(&Limits::default()), Err(EventError::PayloadTooLarge { .. })));
    }

    #[test]
    fn errors_and_debug_never_show_the_payload() {
        let limits = Limits::default().max_payload_bytes(8);
        let event = ok_event().header("x-seq", SECRET);
        let err = event.validate(&limits).expect_err("too large");
        for text in [err.to_string(), format!("{err:?}"), format!("{event:?}")] {
            assert!(!text.contains(SECRET), "payload or header value leaked: {text}");
        }
        let stored = event.into_event(Some(1), SystemTime::now());
        assert!(!format!("{stored:?}").contains(SECRET));
    }

    #[test]
    fn serialization_failure_is_typed_without_message() {
        let mut map = std::collections::HashMap::new();
        map.insert(vec![1u8], SECRET);
        let err = NewEvent::json("t", &map).expect_err("non-string keys cannot be JSON");
        assert!(matches!(err, EventError::PayloadSerialization { .. }));
        assert!(!err.to_string().contains(SECRET));
    }
}
