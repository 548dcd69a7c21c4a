use std::collections::BTreeMap;

/// A header value in the product's neutral representation.
///
/// Events written by a producer carry [`HeaderValue::String`], [`HeaderValue::Int`] and
/// [`HeaderValue::Bool`] extra headers. The other variants exist so that a consumer can represent
/// whatever a broker adds to a delivery (for example RabbitMQ's `x-death` table) without losing it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum HeaderValue {
    /// A boolean.
    Bool(bool),
    /// A signed integer (every AMQP integer type fits).
    Int(i64),
    /// A UTF-8 string.
    String(String),
    /// A floating-point number (consumer side only).
    Float(f64),
    /// Raw bytes (consumer side only).
    #[serde(skip)]
    Bytes(Vec<u8>),
    /// An array (consumer side only).
    List(Vec<HeaderValue>),
    /// A nested table (consumer side only).
    Table(BTreeMap<String, HeaderValue>),
}

impl HeaderValue {
    /// The string inside, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer inside, if this is an integer.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// Whether an event written by a producer may carry this value as an extra header.
    pub(crate) fn is_producer_value(&self) -> bool {
        matches!(self, Self::Bool(_) | Self::Int(_) | Self::String(_))
    }

    /// A short name of the variant, for error messages (never the value itself).
    pub const fn type_name(&self) -> &'static str {
        match self {
            Self::Bool(_) => "bool",
            Self::Int(_) => "int",
            Self::String(_) => "string",
            Self::Float(_) => "float",
            Self::Bytes(_) => "bytes",
            Self::List(_) => "list",
            Self::Table(_) => "table",
        }
    }
}

impl From<&str> for HeaderValue {
    fn from(v: &str) -> Self {
        Self::String(v.to_owned())
    }
}

impl From<String> for HeaderValue {
    fn from(v: String) -> Self {
        Self::String(v)
    }
}

impl From<i64> for HeaderValue {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<i32> for HeaderValue {
    fn from(v: i32) -> Self {
        Self::Int(i64::from(v))
    }
}

impl From<bool> for HeaderValue {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

/// Headers by name, in a stable order.
pub type Headers = BTreeMap<String, HeaderValue>;

/// Header names an event may not set itself: the wire contract's own headers, and those RabbitMQ
/// writes on dead-lettering and delayed delivery. Names starting with `x-outbox-` are reserved too.
pub const RESERVED_HEADERS: &[&str] = &[
    crate::header_names::HEADER_EVENT_VERSION,
    crate::header_names::HEADER_ENTITY,
    crate::header_names::HEADER_SEQ,
    crate::header_names::HEADER_CAUSATION_ID,
    crate::header_names::HEADER_CREATED_AT_MS,
    crate::header_names::HEADER_TRACEPARENT,
    "x-death",
    "x-first-death-exchange",
    "x-first-death-queue",
    "x-first-death-reason",
    "x-last-death-exchange",
    "x-last-death-queue",
    "x-last-death-reason",
    "x-delay",
];

/// Prefix reserved for the product's own future headers.
pub(crate) const RESERVED_PREFIX: &str = "x-outbox-";

pub(crate) fn is_reserved(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with(RESERVED_PREFIX)
}
