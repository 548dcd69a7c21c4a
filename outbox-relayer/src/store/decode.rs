//! The rows a claim returned, decoded into events ([`Claimed`]), or set aside as corrupt when they
//! break the schema's promises ([`Corrupt`]).

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use outbox_types::{CipherError, Entity, Event, EventId, HeaderValue, Headers, Payload, PayloadCipher};
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::{Error, Result};

/// The longest string an AMQP short string (message type, content type, correlation id) holds.
const MAX_SHORT_STRING: usize = 255;

/// A claimed row: the event and what the retry policy needs.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) event: Event,
    pub(crate) attempts: u32,
    /// The claimed row version's tuple id (text form), for the mark: see `MARK_PUBLISHED`.
    pub(crate) tid: String,
}

/// What a claim took: the rows to publish, and those that do not decode into an event.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    pub(crate) rows: Vec<Claimed>,
    pub(crate) corrupt: Vec<Corrupt>,
    /// Rows whose lease had expired in another claim, by the relay that held it, in the order
    /// first seen.
    pub(crate) taken_over: Vec<(String, usize)>,
}

/// A claimed row that does not decode into an event.
#[derive(Debug)]
pub(crate) struct Corrupt {
    pub(crate) id: EventId,
    /// Its entity key and sequence, as stored, if they read.
    pub(crate) entity: Option<(String, i64)>,
    pub(crate) what: &'static str,
}

/// What the relay does with sealed payloads.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sealed<'a> {
    /// Opens them with this cipher (none: every sealed row is quarantined).
    Open(Option<&'a PayloadCipher>),
    /// Publishes them sealed, with the key id in a header, for the consumer to open.
    Forward,
}

/// The rows of a claim (`CLAIM`'s `RETURNING`), each decoded or set aside as corrupt, and the
/// claims they were taken over from.
pub(super) fn taken(rows: &[PgRow], sealed: Sealed<'_>) -> Result<Taken> {
    let mut taken = Taken::default();
    for row in rows {
        if let Some(owner) = row.try_get::<Option<String>, _>("taken_from")? {
            match taken.taken_over.iter_mut().find(|(o, _)| *o == owner) {
                Some((_, n)) => *n += 1,
                None => taken.taken_over.push((owner, 1)),
            }
        }
        match event_from_row(row, sealed) {
            Ok(claimed) => taken.rows.push(claimed),
            Err(Error::CorruptRow { id, what }) => {
                let key: Option<String> = row.try_get("entity_key").ok().flatten();
                let seq: Option<i64> = row.try_get("seq").ok().flatten();
                taken.corrupt.push(Corrupt { id: EventId::from_uuid(id), entity: key.zip(seq), what });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(taken)
}

/// A row read for a replay (with the claim's columns), decoded into its event, or
/// [`Error::CorruptRow`] saying why it cannot be (a payload sealed with a key it lacks, among them).
pub(crate) fn replayed(row: &PgRow, sealed: Sealed<'_>) -> Result<Event> {
    event_from_row(row, sealed).map(|claimed| claimed.event)
}

fn event_from_row(row: &PgRow, sealed: Sealed<'_>) -> Result<Claimed> {
    let id: Uuid = row.try_get("id")?;
    decode_row(row, id, sealed).map_err(|e| match e {
        Error::CorruptRow { .. } => e,
        _ => Error::CorruptRow { id, what: "a column does not decode" },
    })
}

fn decode_row(row: &PgRow, id: Uuid, sealed: Sealed<'_>) -> Result<Claimed> {
    let corrupt = |what| Error::CorruptRow { id, what };
    let version: i64 = row.try_get("event_version")?;
    let entity_key: Option<String> = row.try_get("entity_key")?;
    let seq: Option<i64> = row.try_get("seq")?;
    let entity = match (entity_key, seq) {
        (Some(key), Some(seq)) => {
            Some(Entity { key, seq: u64::try_from(seq).map_err(|_| corrupt("negative sequence"))? })
        }
        (None, None) => None,
        _ => return Err(corrupt("entity key without sequence")),
    };
    let created_at: DateTime<Utc> = row.try_get("created_at")?;
    let attempts: i32 = row.try_get("attempts")?;
    let (body, forwarded_key) = payload_of(row, id, sealed)?;
    let payload = Payload::new(body, row.try_get::<String, _>("content_type")?);
    let event_type: String = row.try_get("event_type")?;
    let mut event = Event::new(EventId::from_uuid(id), event_type, payload, SystemTime::from(created_at));
    event.event_version = u32::try_from(version).map_err(|_| corrupt("event version out of range"))?;
    event.entity = entity;
    event.correlation_id = row.try_get("correlation_id")?;
    event.causation_id = row.try_get("causation_id")?;
    event.traceparent = row.try_get("traceparent")?;
    event.headers = headers_from_json(id, row.try_get("headers")?)?;
    if let Some(key_id) = forwarded_key {
        event.headers.insert(outbox_types::wire::HEADER_PAYLOAD_KEY.to_owned(), HeaderValue::String(key_id));
    }
    // Rows written by SQL rather than `enqueue` skip validation; these would not fit the message.
    let short = [Some(event.event_type.as_str()), Some(event.payload.content_type()), event.correlation_id.as_deref()];
    if short.into_iter().flatten().any(|s| s.len() > MAX_SHORT_STRING) {
        return Err(corrupt("type, content type or correlation id longer than 255 bytes"));
    }
    Ok(Claimed { event, attempts: u32::try_from(attempts).unwrap_or(0), tid: row.try_get("tid")? })
}

/// The payload to publish and, for a payload forwarded sealed, its key id.
fn payload_of(row: &PgRow, id: Uuid, sealed: Sealed<'_>) -> Result<(Vec<u8>, Option<String>)> {
    let stored: Vec<u8> = row.try_get("payload")?;
    let Some(key_id) = row.try_get::<Option<String>, _>("payload_key_id")? else { return Ok((stored, None)) };
    let cipher = match sealed {
        Sealed::Forward => return Ok((stored, Some(key_id))),
        Sealed::Open(cipher) => cipher,
    };
    let corrupt = |what| Error::CorruptRow { id, what };
    let cipher = cipher.ok_or_else(|| corrupt("the payload is encrypted and this relay has no payload keys"))?;
    let plain = cipher.open(EventId::from_uuid(id), &key_id, &stored).map_err(|e| match e {
        CipherError::UnknownKey(_) => corrupt("the payload is encrypted with a key id this relay does not have"),
        _ => corrupt("the encrypted payload failed authentication (changed, or another key)"),
    })?;
    Ok((plain, None))
}

fn headers_from_json(id: Uuid, value: serde_json::Value) -> Result<Headers> {
    let serde_json::Value::Object(map) = value else {
        return Err(Error::CorruptRow { id, what: "headers is not a JSON object" });
    };
    map.into_iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => HeaderValue::String(s),
                serde_json::Value::Bool(b) => HeaderValue::Bool(b),
                serde_json::Value::Number(n) => HeaderValue::Int(
                    n.as_i64().ok_or(Error::CorruptRow { id, what: "header number is not an integer" })?,
                ),
                _ => {
                    return Err(Error::CorruptRow { id, what: "header value is not a string, integer or boolean" });
                }
            };
            Ok((k, v))
        })
        .collect()
}
