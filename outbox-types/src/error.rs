/// Why a [`NewEvent`](crate::NewEvent) was rejected.
///
/// Raised by validation before any SQL runs, so a rejected event never poisons the caller's
/// transaction. Messages name the offending field and its size, never the payload or a header
/// value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The event type is empty.
    #[error("event type is empty")]
    EmptyEventType,
    /// The event type is longer than the maximum (it is the default routing key, an AMQP short string).
    #[error("event type is {len} bytes, more than the maximum of {max}")]
    EventTypeTooLong {
        /// Its length in bytes.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The event type contains whitespace or control characters.
    #[error("event type contains whitespace or control characters")]
    InvalidEventType,
    /// The event version is 0; versions start at 1.
    #[error("event version must be at least 1")]
    InvalidVersion,
    /// The entity key is empty (use no entity key for unordered events).
    #[error("entity key is empty")]
    EmptyEntityKey,
    /// The entity key is longer than the maximum.
    #[error("entity key is {len} bytes, more than the maximum of {max}")]
    EntityKeyTooLong {
        /// Its length in bytes.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The entity key contains control characters.
    #[error("entity key contains control characters")]
    InvalidEntityKey,
    /// The payload is larger than the configured maximum.
    #[error("payload is {size} bytes, more than the maximum of {max}")]
    PayloadTooLarge {
        /// Its size in bytes.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// The payload could not be serialized to JSON.
    #[error("payload could not be serialized to JSON ({category})")]
    PayloadSerialization {
        /// The class of serde error (`io`, `syntax`, `data`, `eof`); the message itself is not kept
        /// because it may quote the payload.
        category: &'static str,
    },
    /// The content type is empty, too long, or not printable ASCII.
    #[error("content type must be 1 to 255 bytes of printable ASCII")]
    InvalidContentType,
    /// A header name belongs to the wire contract or to the broker.
    #[error("header name {name:?} is reserved")]
    ReservedHeader {
        /// The header name.
        name: String,
    },
    /// A header name is empty, too long, or not printable ASCII.
    #[error("header name {name:?} is invalid: 1 to 128 bytes of printable ASCII without spaces")]
    InvalidHeaderName {
        /// The header name, with non-printable characters escaped.
        name: String,
    },
    /// A header value is of a type a producer may not send.
    #[error("header {name:?} has a {type_name} value; only string, int and bool are allowed")]
    UnsupportedHeaderValue {
        /// The header name.
        name: String,
        /// The variant's type name.
        type_name: &'static str,
    },
    /// A header's string value contains a NUL character, which PostgreSQL cannot store (in `text`
    /// or `jsonb`).
    #[error("header {name:?} has a value with a NUL character, which PostgreSQL cannot store")]
    InvalidHeaderValue {
        /// The header name.
        name: String,
    },
    /// The headers are larger than the maximum.
    #[error("headers are {size} bytes, more than the maximum of {max}")]
    HeadersTooLarge {
        /// Their encoded size in bytes (approximate: names plus values).
        size: usize,
        /// The maximum.
        max: usize,
    },
    /// A correlation or causation id or an idempotency key is empty, too long, or contains
    /// control characters.
    #[error("{field} must be 1 to 255 bytes without control characters")]
    InvalidId {
        /// `correlation_id`, `causation_id` or `idempotency_key`.
        field: &'static str,
    },
    /// Two events of one `enqueue_many` batch have the same type and idempotency key.
    #[error("the idempotency key of this event repeats an earlier event's of the same type in the batch")]
    RepeatedIdempotencyKey,
    /// The `traceparent` value is not a W3C trace context.
    #[error("traceparent is not a W3C trace context (version-traceid-parentid-flags)")]
    InvalidTraceparent,
}

/// `Result` with [`EventError`] as the default error.
pub type Result<T, E = EventError> = std::result::Result<T, E>;
