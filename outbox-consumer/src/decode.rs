//! From a RabbitMQ delivery to an [`Event`], with every check a consumer needs before handing it
//! to the inbox.

use lapin::types::{AMQPValue, FieldTable};
use outbox_core::wire::{self, DecodeError, WireMessage, WireProperties};
use outbox_core::{Event, HeaderValue, Headers};

/// Why a delivery was not handed to the inbox. It is dead-lettered with [`DeliveryError::code`] as
/// its reason and acked; the consumer keeps running. Messages never quote the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The message breaks the wire contract (missing or malformed property or header).
    #[error("wire contract: {0}")]
    Contract(#[from] DecodeError),
    /// The content type is not one this consumer accepts.
    #[error("content type {0:?} is not accepted")]
    UnknownContentType(String),
    /// The body does not parse as its content type says.
    #[error("payload does not parse as {0}")]
    UnparsablePayload(String),
    /// The body is larger than the consumer accepts.
    #[error("payload is {size} bytes, more than the maximum of {max}")]
    PayloadTooLarge {
        /// Body size.
        size: usize,
        /// The maximum.
        max: usize,
    },
    /// The headers are larger than the consumer accepts.
    #[error("headers are {size} bytes, more than the maximum of {max}")]
    HeadersTooLarge {
        /// Approximate encoded size.
        size: usize,
        /// The maximum.
        max: usize,
    },
}

impl DeliveryError {
    /// A stable machine-readable reason, carried in the dead letter's `x-outbox-dead-letter-reason`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Contract(e) => e.code(),
            Self::UnknownContentType(_) => "unknown_content_type",
            Self::UnparsablePayload(_) => "unparsable_payload",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::HeadersTooLarge { .. } => "headers_too_large",
        }
    }
}

/// What a consumer accepts. Defaults: `application/json` payloads (checked to parse) of at most
/// 1 MiB, and at most 64 KiB of headers.
#[derive(Debug, Clone)]
pub struct DeliveryLimits {
    pub(crate) content_types: Vec<String>,
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_header_bytes: usize,
}

impl Default for DeliveryLimits {
    fn default() -> Self {
        Self {
            content_types: vec![outbox_core::CONTENT_TYPE_JSON.to_owned()],
            max_payload_bytes: 1024 * 1024,
            max_header_bytes: 64 * 1024,
        }
    }
}

impl DeliveryLimits {
    /// Accepts `content_type` too (JSON types are checked to parse, others are passed as bytes).
    #[must_use]
    pub fn accept_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_types.push(content_type.into());
        self
    }

    /// Sets the largest body accepted. Defaults to 1 MiB.
    #[must_use]
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// Sets the largest headers table accepted. Defaults to 64 KiB.
    #[must_use]
    pub fn max_header_bytes(mut self, bytes: usize) -> Self {
        self.max_header_bytes = bytes;
        self
    }
}

fn from_amqp(value: &AMQPValue, size: &mut usize) -> HeaderValue {
    *size += 8;
    match value {
        AMQPValue::Boolean(b) => HeaderValue::Bool(*b),
        AMQPValue::ShortShortInt(i) => HeaderValue::Int(i64::from(*i)),
        AMQPValue::ShortShortUInt(i) => HeaderValue::Int(i64::from(*i)),
        AMQPValue::ShortInt(i) => HeaderValue::Int(i64::from(*i)),
        AMQPValue::ShortUInt(i) => HeaderValue::Int(i64::from(*i)),
        AMQPValue::LongInt(i) => HeaderValue::Int(i64::from(*i)),
        AMQPValue::LongUInt(i) => HeaderValue::Int(i64::from(*i)),
        AMQPValue::LongLongInt(i) => HeaderValue::Int(*i),
        AMQPValue::Timestamp(t) => HeaderValue::Int(i64::try_from(*t).unwrap_or(i64::MAX)),
        AMQPValue::Float(f) => HeaderValue::Float(f64::from(*f)),
        AMQPValue::Double(f) => HeaderValue::Float(*f),
        AMQPValue::DecimalValue(d) => HeaderValue::Float(f64::from(d.value) / 10f64.powi(i32::from(d.scale))),
        AMQPValue::ShortString(s) => {
            *size += s.as_str().len();
            HeaderValue::String(s.as_str().to_owned())
        }
        AMQPValue::LongString(s) => {
            *size += s.as_bytes().len();
            match std::str::from_utf8(s.as_bytes()) {
                Ok(text) => HeaderValue::String(text.to_owned()),
                Err(_) => HeaderValue::Bytes(s.as_bytes().to_vec()),
            }
        }
        AMQPValue::ByteArray(b) => {
            *size += b.as_slice().len();
            HeaderValue::Bytes(b.as_slice().to_vec())
        }
        AMQPValue::FieldArray(a) => HeaderValue::List(a.as_slice().iter().map(|v| from_amqp(v, size)).collect()),
        AMQPValue::FieldTable(t) => HeaderValue::Table(headers(t, size)),
        AMQPValue::Void => HeaderValue::List(Vec::new()),
    }
}

fn headers(table: &FieldTable, size: &mut usize) -> Headers {
    table
        .inner()
        .iter()
        .map(|(k, v)| {
            *size += k.as_str().len();
            (k.as_str().to_owned(), from_amqp(v, size))
        })
        .collect()
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence == "application/json" || essence.ends_with("+json")
}

/// Decodes and checks a delivery.
///
/// # Errors
/// The first [`DeliveryError`] found.
pub fn decode_delivery(
    properties: &lapin::BasicProperties,
    body: &[u8],
    limits: &DeliveryLimits,
) -> Result<Event, DeliveryError> {
    let mut size = 0;
    let headers = properties.headers().as_ref().map(|t| headers(t, &mut size)).unwrap_or_default();
    if size > limits.max_header_bytes {
        return Err(DeliveryError::HeadersTooLarge { size, max: limits.max_header_bytes });
    }
    if body.len() > limits.max_payload_bytes {
        return Err(DeliveryError::PayloadTooLarge { size: body.len(), max: limits.max_payload_bytes });
    }
    let message = WireMessage {
        properties: WireProperties {
            message_id: properties.message_id().as_ref().map(|s| s.as_str().to_owned()),
            kind: properties.kind().as_ref().map(|s| s.as_str().to_owned()),
            correlation_id: properties.correlation_id().as_ref().map(|s| s.as_str().to_owned()),
            timestamp: *properties.timestamp(),
            content_type: properties.content_type().as_ref().map(|s| s.as_str().to_owned()),
            app_id: properties.app_id().as_ref().map(|s| s.as_str().to_owned()),
            delivery_mode: *properties.delivery_mode(),
        },
        headers,
        body: body.to_vec(),
    };
    let event = wire::decode(message)?;
    let content_type = event.payload.content_type();
    if !limits.content_types.iter().any(|c| c == content_type) {
        return Err(DeliveryError::UnknownContentType(content_type.chars().take(64).collect()));
    }
    if is_json(content_type) && serde_json::from_slice::<serde::de::IgnoredAny>(event.payload.bytes()).is_err() {
        return Err(DeliveryError::UnparsablePayload(content_type.to_owned()));
    }
    Ok(event)
}
