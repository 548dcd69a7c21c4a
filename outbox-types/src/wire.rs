//! The wire contract, version 1: how an [`Event`] is carried by an AMQP 0-9-1 message.
//!
//! | field | carried in |
//! |---|---|
//! | event id | property `message_id` |
//! | event type | property `type` |
//! | correlation id | property `correlation_id` |
//! | creation time | property `timestamp` (seconds) and header `x-created-at-ms` (unix milliseconds) |
//! | content type | property `content_type` |
//! | producing service | property `app_id` |
//! | persistence | `delivery_mode` 2 |
//! | event version | header `x-event-version` (integer) |
//! | entity key | header `x-entity` (string, absent for unordered events) |
//! | entity sequence | header `x-seq` (integer, absent for unordered events) |
//! | causation id | header `x-causation-id` |
//! | trace context | header `traceparent` (W3C) |
//!
//! Any other header is an extra header of the event. The functions here are pure: the producer
//! maps a [`WireMessage`] onto lapin's `BasicProperties`, the consumer maps a delivery back.
//!
//! ```
//! use outbox_types::{wire, NewEvent};
//! use std::time::SystemTime;
//!
//! let event = NewEvent::json("order.placed", &serde_json::json!({"id": 1}))?
//!     .entity("order-1")
//!     .into_event(Some(1), SystemTime::now());
//! let message = wire::encode(&event, Some("orders"));
//! assert_eq!(message.properties.delivery_mode, Some(wire::PERSISTENT));
//! let back = wire::decode(message)?;
//! assert_eq!(back.id, event.id);
//! assert_eq!(back.entity, event.entity);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::{Duration, SystemTime};

use crate::{Entity, Event, EventId, HeaderValue, Headers, Payload};

/// Version of the contract implemented here.
pub const CONTRACT_VERSION: u32 = 1;
pub use crate::header_names::{
    HEADER_CAUSATION_ID, HEADER_CONTRACT, HEADER_CREATED_AT_MS, HEADER_ENTITY, HEADER_EVENT_VERSION,
    HEADER_PAYLOAD_KEY, HEADER_REPLAY, HEADER_SEQ, HEADER_TRACEPARENT,
};
/// AMQP `delivery_mode` of persistent messages.
pub const PERSISTENT: u8 = 2;

/// The AMQP basic properties the contract uses, in a neutral form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireProperties {
    /// `message_id`: the event id.
    pub message_id: Option<String>,
    /// `type`: the event type.
    pub kind: Option<String>,
    /// `correlation_id`.
    pub correlation_id: Option<String>,
    /// `timestamp`, unix seconds.
    pub timestamp: Option<u64>,
    /// `content_type`.
    pub content_type: Option<String>,
    /// `app_id`: the producing service.
    pub app_id: Option<String>,
    /// `delivery_mode`: 2 for persistent.
    pub delivery_mode: Option<u8>,
}

/// An AMQP message in a neutral form: properties, headers and body.
#[derive(Clone, PartialEq)]
pub struct WireMessage {
    /// The basic properties.
    pub properties: WireProperties,
    /// The headers table.
    pub headers: Headers,
    /// The body.
    pub body: Vec<u8>,
}

impl std::fmt::Debug for WireMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireMessage")
            .field("properties", &self.properties)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// Why a message does not decode into an [`Event`]. The messages name the field, never its content
/// or the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// No `message_id` property.
    #[error("message has no message_id")]
    MissingMessageId,
    /// The `message_id` is not a UUID.
    #[error("message_id is not a UUID")]
    InvalidMessageId,
    /// No `type` property.
    #[error("message has no type")]
    MissingEventType,
    /// The `type` property is not a valid event type.
    #[error("message type is invalid: {0}")]
    InvalidEventType(crate::EventError),
    /// No `content_type` property.
    #[error("message has no content_type")]
    MissingContentType,
    /// A header the contract requires is missing.
    #[error("header {0} is missing")]
    MissingHeader(&'static str),
    /// A header of the contract has the wrong type or an out-of-range value.
    #[error("header {name} is malformed: {expected}")]
    InvalidHeader {
        /// The header name.
        name: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// Neither `x-created-at-ms` nor `timestamp` is present.
    #[error("message has neither x-created-at-ms nor timestamp")]
    MissingCreatedAt,
    /// Without `x-created-at-ms`, the `timestamp` property is beyond what unix milliseconds in an
    /// `i64` can carry.
    #[error("timestamp is out of range")]
    InvalidTimestamp,
    /// The message says it follows a newer contract than [`CONTRACT_VERSION`] (header
    /// `x-outbox-contract`): it is not read as this one.
    #[error("wire contract {0} is newer than this decoder's ({CONTRACT_VERSION})")]
    NewerContract(i64),
}

impl DecodeError {
    /// A stable, machine-readable reason, suitable for a dead-letter header or a metrics label.
    pub const fn code(&self) -> &'static str {
        match self {
            Self::MissingMessageId => "missing_message_id",
            Self::InvalidMessageId => "invalid_message_id",
            Self::MissingEventType => "missing_type",
            Self::InvalidEventType(_) => "invalid_type",
            Self::MissingContentType => "missing_content_type",
            Self::MissingHeader(_) => "missing_header",
            Self::InvalidHeader { .. } => "invalid_header",
            Self::MissingCreatedAt => "missing_created_at",
            Self::InvalidTimestamp => "invalid_timestamp",
            Self::NewerContract(_) => "newer_contract",
        }
    }
}

fn unix_millis(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

fn from_unix_millis(ms: i64) -> SystemTime {
    if ms >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// Encodes an event as an AMQP message. `app_id` names the producing service.
pub fn encode(event: &Event, app_id: Option<&str>) -> WireMessage {
    let created_ms = unix_millis(event.created_at);
    let mut headers = event.headers.clone();
    headers.insert(HEADER_EVENT_VERSION.to_owned(), HeaderValue::Int(i64::from(event.event_version)));
    headers.insert(HEADER_CREATED_AT_MS.to_owned(), HeaderValue::Int(created_ms));
    if let Some(Entity { key, seq }) = &event.entity {
        headers.insert(HEADER_ENTITY.to_owned(), HeaderValue::String(key.clone()));
        headers.insert(HEADER_SEQ.to_owned(), HeaderValue::Int(i64::try_from(*seq).unwrap_or(i64::MAX)));
    }
    if let Some(c) = &event.causation_id {
        headers.insert(HEADER_CAUSATION_ID.to_owned(), HeaderValue::String(c.clone()));
    }
    if let Some(t) = &event.traceparent {
        headers.insert(HEADER_TRACEPARENT.to_owned(), HeaderValue::String(t.clone()));
    }
    WireMessage {
        properties: WireProperties {
            message_id: Some(event.id.to_string()),
            kind: Some(event.event_type.clone()),
            correlation_id: event.correlation_id.clone(),
            timestamp: Some(u64::try_from(created_ms.max(0) / 1000).unwrap_or(0)),
            content_type: Some(event.payload.content_type().to_owned()),
            app_id: app_id.map(str::to_owned),
            delivery_mode: Some(PERSISTENT),
        },
        headers,
        body: event.payload.bytes().to_vec(),
    }
}

fn take_int(headers: &mut Headers, name: &'static str, expected: &'static str) -> Result<Option<i64>, DecodeError> {
    match headers.remove(name) {
        None => Ok(None),
        Some(HeaderValue::Int(i)) => Ok(Some(i)),
        Some(_) => Err(DecodeError::InvalidHeader { name, expected }),
    }
}

fn take_string(headers: &mut Headers, name: &'static str) -> Result<Option<String>, DecodeError> {
    match headers.remove(name) {
        None => Ok(None),
        Some(HeaderValue::String(s)) => Ok(Some(s)),
        Some(_) => Err(DecodeError::InvalidHeader { name, expected: "a string" }),
    }
}

/// Decodes an AMQP message into an event.
///
/// # Errors
/// A [`DecodeError`] naming the first missing or malformed field.
pub fn decode(message: WireMessage) -> Result<Event, DecodeError> {
    let WireMessage { properties, mut headers, body } = message;
    match take_int(&mut headers, HEADER_CONTRACT, "an integer")? {
        Some(v) if v > i64::from(CONTRACT_VERSION) => return Err(DecodeError::NewerContract(v)),
        _ => {}
    }
    let id: EventId = properties
        .message_id
        .ok_or(DecodeError::MissingMessageId)?
        .parse()
        .map_err(|_| DecodeError::InvalidMessageId)?;
    let event_type = properties.kind.ok_or(DecodeError::MissingEventType)?;
    crate::validate::validate_event_type(&event_type).map_err(DecodeError::InvalidEventType)?;
    let content_type = properties.content_type.ok_or(DecodeError::MissingContentType)?;

    let version = take_int(&mut headers, HEADER_EVENT_VERSION, "an integer from 1 to 2^32-1")?
        .ok_or(DecodeError::MissingHeader(HEADER_EVENT_VERSION))?;
    let event_version = u32::try_from(version)
        .ok()
        .filter(|v| *v >= 1)
        .ok_or(DecodeError::InvalidHeader { name: HEADER_EVENT_VERSION, expected: "an integer from 1 to 2^32-1" })?;

    let entity_key = take_string(&mut headers, HEADER_ENTITY)?;
    let seq = take_int(&mut headers, HEADER_SEQ, "a positive integer")?;
    let entity = match (entity_key, seq) {
        (None, None) => None,
        (Some(key), Some(seq)) => {
            crate::validate::validate_entity_key(&key).map_err(|_| DecodeError::InvalidHeader {
                name: HEADER_ENTITY,
                expected: "1 to 255 bytes without control characters",
            })?;
            let seq = u64::try_from(seq)
                .ok()
                .filter(|s| *s >= 1)
                .ok_or(DecodeError::InvalidHeader { name: HEADER_SEQ, expected: "a positive integer" })?;
            Some(Entity { key, seq })
        }
        (Some(_), None) => return Err(DecodeError::MissingHeader(HEADER_SEQ)),
        (None, Some(_)) => return Err(DecodeError::MissingHeader(HEADER_ENTITY)),
    };

    let created_at = match take_int(&mut headers, HEADER_CREATED_AT_MS, "unix milliseconds")? {
        Some(ms) => from_unix_millis(ms),
        None => {
            let secs = properties.timestamp.ok_or(DecodeError::MissingCreatedAt)?;
            let ms =
                secs.checked_mul(1000).and_then(|ms| i64::try_from(ms).ok()).ok_or(DecodeError::InvalidTimestamp)?;
            from_unix_millis(ms)
        }
    };
    let causation_id = take_string(&mut headers, HEADER_CAUSATION_ID)?;
    let traceparent = take_string(&mut headers, HEADER_TRACEPARENT)?;

    Ok(Event {
        id,
        event_type,
        event_version,
        entity,
        payload: Payload::new(body, content_type),
        correlation_id: properties.correlation_id,
        causation_id,
        traceparent,
        headers,
        created_at,
    })
}
