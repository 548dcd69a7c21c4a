//! What PostgreSQL and the wire contract accept of an event's strings: every check runs before
//! any SQL, with a typed [`EventError`].

use crate::header::{HeaderValue, Headers, is_reserved};
use crate::{EventError, Result};

/// The most bytes an event type may have: it is the default routing key, an AMQP short string.
const MAX_EVENT_TYPE: usize = 255;
/// The most bytes an entity key may have.
const MAX_ENTITY_KEY: usize = 255;
/// The most bytes a correlation or causation id may have (AMQP short string).
const MAX_ID: usize = 255;
/// The most bytes a header name may have.
const MAX_HEADER_NAME: usize = 128;

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

pub(crate) fn validate_event_type(t: &str) -> Result<()> {
    if t.is_empty() {
        return Err(EventError::EmptyEventType);
    }
    if t.len() > MAX_EVENT_TYPE {
        return Err(EventError::EventTypeTooLong { len: t.len(), max: MAX_EVENT_TYPE });
    }
    if t.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(EventError::InvalidEventType);
    }
    Ok(())
}

pub(crate) fn validate_entity_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(EventError::EmptyEntityKey);
    }
    if key.len() > MAX_ENTITY_KEY {
        return Err(EventError::EntityKeyTooLong { len: key.len(), max: MAX_ENTITY_KEY });
    }
    if has_control(key) {
        return Err(EventError::InvalidEntityKey);
    }
    Ok(())
}

pub(crate) fn validate_id(field: &'static str, id: Option<&str>) -> Result<()> {
    match id {
        Some(id) if id.is_empty() || id.len() > MAX_ID || has_control(id) => Err(EventError::InvalidId { field }),
        _ => Ok(()),
    }
}

pub(crate) fn validate_traceparent(tp: &str) -> Result<()> {
    let parts: Vec<&str> = tp.split('-').collect();
    let lower_hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let ok = parts.len() == 4
        && lower_hex(parts[0], 2)
        && parts[0] != "ff"
        && lower_hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && lower_hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && lower_hex(parts[3], 2);
    if ok { Ok(()) } else { Err(EventError::InvalidTraceparent) }
}

pub(crate) fn validate_headers(headers: &Headers, max_bytes: usize) -> Result<()> {
    let mut size = 0usize;
    for (name, value) in headers {
        if name.is_empty() || name.len() > MAX_HEADER_NAME || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(EventError::InvalidHeaderName { name: name.escape_default().to_string() });
        }
        if is_reserved(name) {
            return Err(EventError::ReservedHeader { name: name.clone() });
        }
        if !value.is_producer_value() {
            return Err(EventError::UnsupportedHeaderValue { name: name.clone(), type_name: value.type_name() });
        }
        if let HeaderValue::String(s) = value
            && s.contains('\0')
        {
            // PostgreSQL stores neither a NUL in `text` nor `\u0000` in `jsonb`: the INSERT would
            // fail and abort the caller's transaction.
            return Err(EventError::InvalidHeaderValue { name: name.clone() });
        }
        size += name.len()
            + match value {
                HeaderValue::String(s) => s.len(),
                _ => 8,
            };
    }
    if size > max_bytes {
        return Err(EventError::HeadersTooLarge { size, max: max_bytes });
    }
    Ok(())
}
