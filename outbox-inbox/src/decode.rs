//! From a received message (the wire contract's neutral form) to an [`Event`], with every check a
//! consumer needs before handing it to the inbox.

use outbox_types::wire::{self, DecodeError, HEADER_PAYLOAD_KEY, WireMessage};
use outbox_types::{CipherError, Event, HeaderValue, Headers, Payload, PayloadCipher, SEAL_OVERHEAD};

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
    /// The payload is sealed (end-to-end encryption) and cannot be opened: no keys configured, a
    /// key id this consumer does not have, or a payload that fails authentication.
    #[error("the payload is sealed and cannot be opened: {0}")]
    Sealed(SealedError),
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
            Self::Sealed(_) => "sealed_payload",
        }
    }
}

/// Why a sealed payload was not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealedError {
    /// The consumer has no payload keys (`InboxRunnerBuilder::cipher`).
    #[error("this consumer has no payload keys")]
    NoKeys,
    /// The key id header is not a string.
    #[error("the key id header is not a string")]
    KeyIdNotString,
    /// The keys do not open it.
    #[error("{0}")]
    Cipher(#[from] CipherError),
}

/// What a consumer accepts. Defaults: `application/json` payloads (checked to parse) of at most
/// 1 MiB, and at most 64 KiB of headers.
#[derive(Debug, Clone)]
pub struct DeliveryLimits {
    pub(crate) content_types: Vec<String>,
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_header_bytes: usize,
    pub(crate) cipher: Option<PayloadCipher>,
}

impl Default for DeliveryLimits {
    fn default() -> Self {
        Self {
            content_types: vec![outbox_types::CONTENT_TYPE_JSON.to_owned()],
            max_payload_bytes: 1024 * 1024,
            max_header_bytes: 64 * 1024,
            cipher: None,
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

    /// Opens payloads the relay forwarded sealed (end-to-end encryption, header
    /// `x-outbox-payload-key`) with `cipher` before any other check. Without one, a sealed
    /// delivery is dead-lettered (`sealed_payload`). `InboxRunnerBuilder::cipher` sets it.
    #[must_use]
    pub fn cipher(mut self, cipher: PayloadCipher) -> Self {
        self.cipher = Some(cipher);
        self
    }
}

/// The size of a headers table as AMQP encodes it, roughly: its names, its strings and bytes, and
/// eight bytes for every value.
fn encoded_size(headers: &Headers) -> usize {
    headers.iter().map(|(name, value)| name.len() + value_size(value)).sum()
}

fn value_size(value: &HeaderValue) -> usize {
    8 + match value {
        HeaderValue::String(s) => s.len(),
        HeaderValue::Bytes(b) => b.len(),
        HeaderValue::List(items) => items.iter().map(value_size).sum(),
        HeaderValue::Table(t) => encoded_size(t),
        _ => 0,
    }
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence == "application/json" || essence.ends_with("+json")
}

/// Decodes and checks a received message.
///
/// # Errors
/// The first [`DeliveryError`] found.
pub fn decode_delivery(message: WireMessage, limits: &DeliveryLimits) -> Result<Event, DeliveryError> {
    let size = encoded_size(&message.headers);
    if size > limits.max_header_bytes {
        return Err(DeliveryError::HeadersTooLarge { size, max: limits.max_header_bytes });
    }
    // Before anything is opened, a sealed body may be longer than the plain payload by its seal.
    if message.body.len() > limits.max_payload_bytes.saturating_add(SEAL_OVERHEAD) {
        return Err(DeliveryError::PayloadTooLarge { size: message.body.len(), max: limits.max_payload_bytes });
    }
    let mut event = wire::decode(message)?;
    if let Some(key_id) = event.headers.remove(HEADER_PAYLOAD_KEY) {
        let key_id = key_id.as_str().ok_or(DeliveryError::Sealed(SealedError::KeyIdNotString))?.to_owned();
        let cipher = limits.cipher.as_ref().ok_or(DeliveryError::Sealed(SealedError::NoKeys))?;
        let plain =
            cipher.open(event.id, &key_id, event.payload.bytes()).map_err(|e| DeliveryError::Sealed(e.into()))?;
        event.payload = Payload::new(plain, event.payload.content_type());
    }
    let size = event.payload.bytes().len();
    if size > limits.max_payload_bytes {
        return Err(DeliveryError::PayloadTooLarge { size, max: limits.max_payload_bytes });
    }
    let content_type = event.payload.content_type();
    if !limits.content_types.iter().any(|c| c == content_type) {
        return Err(DeliveryError::UnknownContentType(content_type.chars().take(64).collect()));
    }
    if is_json(content_type) && serde_json::from_slice::<serde::de::IgnoredAny>(event.payload.bytes()).is_err() {
        return Err(DeliveryError::UnparsablePayload(content_type.to_owned()));
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use outbox_types::{EventId, Keyring};

    use super::*;

    /// A sealed delivery whose plain payload is `len` bytes.
    fn sealed(cipher: &PayloadCipher, len: usize) -> WireMessage {
        let id = EventId::new();
        let (key_id, body) = cipher.seal(id, &vec![b'x'; len]).expect("seal");
        let mut event = Event::new(id, "t", Payload::new(body, "text/plain"), SystemTime::now());
        event.headers.insert(HEADER_PAYLOAD_KEY.to_owned(), HeaderValue::from(key_id.as_str()));
        wire::encode(&event, None)
    }

    /// The size limit is the plain payload's: a sealed one at the limit passes, one byte over fails.
    #[test]
    fn the_size_limit_applies_to_the_opened_payload() {
        let cipher = PayloadCipher::new(Keyring::new("k1", [7; outbox_types::KEY_BYTES]).expect("keyring"));
        let limits =
            DeliveryLimits::default().max_payload_bytes(100).accept_content_type("text/plain").cipher(cipher.clone());
        let event = decode_delivery(sealed(&cipher, 100), &limits).expect("at the limit");
        assert_eq!(event.payload.bytes().len(), 100);
        let over = decode_delivery(sealed(&cipher, 101), &limits);
        assert!(matches!(over, Err(DeliveryError::PayloadTooLarge { max: 100, .. })), "{over:?}");
        let plain = Event::new(EventId::new(), "t", Payload::new(vec![b'x'; 120], "text/plain"), SystemTime::now());
        let over = decode_delivery(wire::encode(&plain, None), &limits);
        assert!(matches!(over, Err(DeliveryError::PayloadTooLarge { size: 120, max: 100 })), "{over:?}");
    }
}
