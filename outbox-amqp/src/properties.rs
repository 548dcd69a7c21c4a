//! Wire contract v1 on lapin: a [`WireMessage`] as lapin's `BasicProperties` and headers table,
//! and back. The only place that maps the neutral form onto AMQP field types.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use outbox_types::wire::{WireMessage, WireProperties};
use outbox_types::{HeaderValue, Headers};

fn to_amqp(value: &HeaderValue) -> AMQPValue {
    match value {
        HeaderValue::Bool(b) => AMQPValue::Boolean(*b),
        HeaderValue::Int(i) => AMQPValue::LongLongInt(*i),
        HeaderValue::String(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        HeaderValue::Float(f) => AMQPValue::Double(*f),
        HeaderValue::Bytes(b) => AMQPValue::ByteArray(b.clone().into()),
        HeaderValue::List(items) => AMQPValue::FieldArray(items.iter().map(to_amqp).collect::<Vec<_>>().into()),
        HeaderValue::Table(t) => AMQPValue::FieldTable(to_table(t)),
        _ => AMQPValue::Void,
    }
}

/// The headers as an AMQP field table.
pub fn to_table(headers: &Headers) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in headers {
        t.insert(ShortString::from(k.as_str()), to_amqp(v));
    }
    t
}

fn from_amqp(value: &AMQPValue) -> HeaderValue {
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
        AMQPValue::ShortString(s) => HeaderValue::String(s.as_str().to_owned()),
        AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(text) => HeaderValue::String(text.to_owned()),
            Err(_) => HeaderValue::Bytes(s.as_bytes().to_vec()),
        },
        AMQPValue::ByteArray(b) => HeaderValue::Bytes(b.as_slice().to_vec()),
        AMQPValue::FieldArray(a) => HeaderValue::List(a.as_slice().iter().map(from_amqp).collect()),
        AMQPValue::FieldTable(t) => HeaderValue::Table(from_table(t)),
        AMQPValue::Void => HeaderValue::List(Vec::new()),
    }
}

/// An AMQP field table as headers. Every AMQP integer becomes an `Int`, a long string that is not
/// UTF-8 becomes `Bytes`, `void` an empty list.
pub fn from_table(table: &FieldTable) -> Headers {
    table.inner().iter().map(|(k, v)| (k.as_str().to_owned(), from_amqp(v))).collect()
}

/// The message's properties and headers as lapin's `BasicProperties`.
pub fn to_properties(message: &WireMessage) -> BasicProperties {
    let p = &message.properties;
    let mut props = BasicProperties::default().with_headers(to_table(&message.headers));
    if let Some(v) = &p.message_id {
        props = props.with_message_id(v.as_str().into());
    }
    if let Some(v) = &p.kind {
        props = props.with_type(v.as_str().into());
    }
    if let Some(v) = &p.correlation_id {
        props = props.with_correlation_id(v.as_str().into());
    }
    if let Some(v) = p.timestamp {
        props = props.with_timestamp(v);
    }
    if let Some(v) = &p.content_type {
        props = props.with_content_type(v.as_str().into());
    }
    if let Some(v) = &p.app_id {
        props = props.with_app_id(v.as_str().into());
    }
    if let Some(v) = p.delivery_mode {
        props = props.with_delivery_mode(v);
    }
    props
}

/// A received message in the neutral form: lapin's properties and headers, and the body.
pub fn to_wire(properties: &BasicProperties, body: &[u8]) -> WireMessage {
    let text = |s: &Option<ShortString>| s.as_ref().map(|s| s.as_str().to_owned());
    WireMessage {
        properties: WireProperties {
            message_id: text(properties.message_id()),
            kind: text(properties.kind()),
            correlation_id: text(properties.correlation_id()),
            timestamp: *properties.timestamp(),
            content_type: text(properties.content_type()),
            app_id: text(properties.app_id()),
            delivery_mode: *properties.delivery_mode(),
        },
        headers: properties.headers().as_ref().map(from_table).unwrap_or_default(),
        body: body.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::SystemTime;

    use outbox_types::{NewEvent, wire};

    use super::*;

    #[test]
    fn an_event_survives_the_round_trip_through_lapin() {
        let nested = BTreeMap::from([("inner".to_owned(), HeaderValue::Int(-3))]);
        let event = NewEvent::json("order.placed", &serde_json::json!({"id": 1}))
            .expect("event")
            .entity("order-1")
            .correlation_id("corr-1")
            .causation_id("cause-1")
            .header("tenant", "acme")
            .header("retries", 2_i64)
            .header("urgent", true)
            .into_event(Some(7), SystemTime::now());
        let mut message = wire::encode(&event, Some("orders"));
        message.headers.insert("nested".to_owned(), HeaderValue::Table(nested));
        message.headers.insert("list".to_owned(), HeaderValue::List(vec![HeaderValue::Float(1.5)]));
        message.headers.insert("raw".to_owned(), HeaderValue::Bytes(vec![0, 159, 146, 150]));

        let back = to_wire(&to_properties(&message), &message.body);
        assert_eq!(back, message);
        let decoded = wire::decode(back).expect("decodes");
        assert_eq!(decoded.id, event.id);
        assert_eq!(decoded.entity, event.entity);
        assert_eq!(decoded.correlation_id.as_deref(), Some("corr-1"));
        assert_eq!(decoded.headers.get("tenant"), Some(&HeaderValue::String("acme".to_owned())));
    }

    #[test]
    fn every_amqp_integer_reads_as_an_int_and_non_utf8_text_as_bytes() {
        let mut table = FieldTable::default();
        table.insert("a".into(), AMQPValue::ShortShortUInt(200));
        table.insert("b".into(), AMQPValue::LongUInt(4_000_000_000));
        table.insert("c".into(), AMQPValue::LongString(LongString::from(vec![0xff, 0xfe])));
        table.insert("d".into(), AMQPValue::ShortString("short".into()));
        let headers = from_table(&table);
        assert_eq!(headers["a"], HeaderValue::Int(200));
        assert_eq!(headers["b"], HeaderValue::Int(4_000_000_000));
        assert_eq!(headers["c"], HeaderValue::Bytes(vec![0xff, 0xfe]));
        assert_eq!(headers["d"], HeaderValue::String("short".to_owned()));
    }
}
