//! Tests of the wire contract v1: `wire::encode` and `wire::decode` between an [`Event`] and a
//! neutral AMQP [`WireMessage`].

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use outbox_types::wire::{self, DecodeError, WireMessage};
use outbox_types::{
    CONTENT_TYPE_JSON, Entity, Event, EventError, EventId, HeaderValue, Headers, Payload, RESERVED_HEADERS,
};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use uuid::Uuid;

/// A recognisable body that must never show up in an error or a `Debug`.
const SECRET: &str = "SECRET-BODY-7d2e9b";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// 2025-03-01T12:34:56.789Z: whole milliseconds, so it survives the wire exactly.
const CREATED_MS: i64 = 1_740_832_496_789;

/// The time `ms` unix milliseconds from the epoch (negative: before 1970).
fn at_ms(ms: i64) -> SystemTime {
    let d = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 { SystemTime::UNIX_EPOCH + d } else { SystemTime::UNIX_EPOCH - d }
}

fn secret_body() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "card": SECRET })).expect("serializable")
}

fn unordered_event() -> Event {
    let payload = Payload::new(vec![0, 1, 2, 255], "application/octet-stream");
    Event::new(EventId::new(), "image.resized", payload, at_ms(CREATED_MS))
}

fn ordered_event() -> Event {
    let mut headers = Headers::new();
    headers.insert("tenant".to_owned(), HeaderValue::from("acme"));
    headers.insert("priority".to_owned(), HeaderValue::from(5));
    headers.insert("urgent".to_owned(), HeaderValue::from(true));
    let payload = Payload::new(secret_body(), CONTENT_TYPE_JSON);
    let mut event = Event::new(EventId::new(), "order.placed", payload, at_ms(CREATED_MS));
    event.event_version = 3;
    event.entity = Some(Entity { key: "order-42".to_owned(), seq: 7 });
    event.correlation_id = Some("req-7f3a".to_owned());
    event.causation_id = Some("cmd-1".to_owned());
    event.traceparent = Some(TRACEPARENT.to_owned());
    event.headers = headers;
    event
}

// ---------------------------------------------------------------------------------------------
// Round trip and encoding

#[test]
fn unordered_event_round_trips() {
    let event = unordered_event();
    let message = wire::encode(&event, None);
    assert!(!message.headers.contains_key(wire::HEADER_ENTITY));
    assert!(!message.headers.contains_key(wire::HEADER_SEQ));
    assert!(!message.headers.contains_key(wire::HEADER_CAUSATION_ID));
    assert!(!message.headers.contains_key(wire::HEADER_TRACEPARENT));
    assert_eq!(message.properties.correlation_id, None);
    assert_eq!(message.properties.app_id, None);
    assert_eq!(wire::decode(message), Ok(event));
}

#[test]
fn ordered_event_with_every_field_round_trips() {
    let event = ordered_event();
    let back = wire::decode(wire::encode(&event, Some("orders"))).expect("decodes");
    // Field by field first, for a readable failure; then the whole event.
    assert_eq!(back.id, event.id);
    assert_eq!(back.event_type, event.event_type);
    assert_eq!(back.event_version, event.event_version);
    assert_eq!(back.entity, event.entity);
    assert_eq!(back.payload.bytes(), event.payload.bytes());
    assert_eq!(back.payload.content_type(), CONTENT_TYPE_JSON);
    assert_eq!(back.correlation_id, event.correlation_id);
    assert_eq!(back.causation_id, event.causation_id);
    assert_eq!(back.traceparent, event.traceparent);
    assert_eq!(back.headers, event.headers);
    assert_eq!(back.created_at, event.created_at);
    assert_eq!(back, event);
}

#[test]
fn event_at_the_limits_round_trips() {
    let mut event = Event::new(EventId::new(), "t".repeat(255), Payload::new(Vec::new(), "text/plain"), at_ms(-1));
    event.event_version = u32::MAX;
    event.entity = Some(Entity { key: "k".repeat(255), seq: i64::MAX as u64 });
    assert_eq!(wire::decode(wire::encode(&event, None)), Ok(event));
}

#[test]
fn encode_fills_the_contract_fields() {
    let event = ordered_event();
    let message = wire::encode(&event, Some("orders"));
    let p = &message.properties;
    assert_eq!(p.message_id.as_deref(), Some(event.id.to_string().as_str()));
    assert_eq!(p.kind.as_deref(), Some("order.placed"));
    assert_eq!(p.correlation_id.as_deref(), Some("req-7f3a"));
    assert_eq!(p.timestamp, Some(1_740_832_496));
    assert_eq!(p.content_type.as_deref(), Some(CONTENT_TYPE_JSON));
    assert_eq!(p.app_id.as_deref(), Some("orders"));
    assert_eq!(p.delivery_mode, Some(wire::PERSISTENT));
    assert_eq!(wire::PERSISTENT, 2);
    assert_eq!(message.body, secret_body());

    let mut expected = event.headers.clone();
    for (name, value) in [
        (wire::HEADER_EVENT_VERSION, HeaderValue::Int(3)),
        (wire::HEADER_CREATED_AT_MS, HeaderValue::Int(CREATED_MS)),
        (wire::HEADER_ENTITY, HeaderValue::from("order-42")),
        (wire::HEADER_SEQ, HeaderValue::Int(7)),
        (wire::HEADER_CAUSATION_ID, HeaderValue::from("cmd-1")),
        (wire::HEADER_TRACEPARENT, HeaderValue::from(TRACEPARENT)),
    ] {
        expected.insert(name.to_owned(), value);
    }
    assert_eq!(message.headers, expected);
}

#[test]
fn decode_falls_back_to_the_timestamp_property() {
    let mut message = wire::encode(&ordered_event(), None);
    message.headers.remove(wire::HEADER_CREATED_AT_MS);
    message.properties.timestamp = Some(1_740_832_496);
    let event = wire::decode(message).expect("decodes");
    assert_eq!(event.created_at, at_ms(1_740_832_496_000));
}

#[test]
fn x_created_at_ms_wins_over_the_timestamp_property() {
    let mut message = wire::encode(&ordered_event(), None);
    message.properties.timestamp = Some(1);
    let event = wire::decode(message).expect("decodes");
    assert_eq!(event.created_at, at_ms(CREATED_MS));
}

#[test]
fn unknown_and_broker_headers_pass_through_decode() {
    let event = ordered_event();
    let mut message = wire::encode(&event, None);
    let death = HeaderValue::List(vec![HeaderValue::Table(BTreeMap::from([
        ("count".to_owned(), HeaderValue::Int(2)),
        ("reason".to_owned(), HeaderValue::from("rejected")),
        ("queue".to_owned(), HeaderValue::from("orders.q0")),
        ("routing-keys".to_owned(), HeaderValue::List(vec![HeaderValue::from("order.placed")])),
    ]))]);
    let broker = [
        ("x-death", death),
        ("x-first-death-queue", HeaderValue::from("orders.q0")),
        ("x-opaque", HeaderValue::Bytes(vec![0, 159, 146, 150])),
        ("x-ratio", HeaderValue::Float(0.25)),
        ("X-Entity", HeaderValue::from("case differs, not ours")),
    ];
    for (name, value) in broker.clone() {
        message.headers.insert(name.to_owned(), value);
    }

    let decoded = wire::decode(message).expect("decodes");
    let mut expected = event.headers.clone();
    expected.extend(broker.map(|(name, value)| (name.to_owned(), value)));
    assert_eq!(decoded.headers, expected);
    for name in [
        wire::HEADER_EVENT_VERSION,
        wire::HEADER_CREATED_AT_MS,
        wire::HEADER_ENTITY,
        wire::HEADER_SEQ,
        wire::HEADER_CAUSATION_ID,
        wire::HEADER_TRACEPARENT,
    ] {
        assert!(!decoded.headers.contains_key(name), "{name} left in headers");
    }
    assert_eq!(decoded.entity, event.entity);
}

// ---------------------------------------------------------------------------------------------
// Decode errors: start from a valid message, break one field, expect one exact error.

/// Encodes a valid ordered event with a secret body, applies `breakage` and returns the error.
/// Also checks that neither the message's `Debug` nor the error show the body.
fn decode_broken(breakage: impl FnOnce(&mut WireMessage)) -> DecodeError {
    let mut message = wire::encode(&ordered_event(), Some("orders"));
    let debug = format!("{message:?}");
    assert!(!debug.contains(SECRET), "message Debug shows the body: {debug}");
    breakage(&mut message);
    let err = wire::decode(message).expect_err("must not decode");
    for text in [err.to_string(), format!("{err:?}"), err.code().to_owned()] {
        assert!(!text.contains(SECRET), "error shows the body: {text}");
    }
    err
}

fn set_header(name: &str, value: impl Into<HeaderValue>) -> impl FnOnce(&mut WireMessage) {
    let (name, value) = (name.to_owned(), value.into());
    move |m: &mut WireMessage| {
        m.headers.insert(name, value);
    }
}

fn remove_header(name: &'static str) -> impl FnOnce(&mut WireMessage) {
    move |m: &mut WireMessage| {
        m.headers.remove(name);
    }
}

#[track_caller]
fn assert_invalid_header(err: &DecodeError, header: &str) {
    assert!(
        matches!(err, DecodeError::InvalidHeader { name, .. } if *name == header),
        "expected InvalidHeader({header}), got {err:?}"
    );
    assert_eq!(err.code(), "invalid_header");
    assert!(err.to_string().contains(header), "{err} does not name {header}");
}

#[test]
fn missing_message_id() {
    let err = decode_broken(|m| m.properties.message_id = None);
    assert_eq!(err, DecodeError::MissingMessageId);
    assert_eq!(err.code(), "missing_message_id");
}

#[test]
fn message_id_not_a_uuid() {
    let err = decode_broken(|m| m.properties.message_id = Some("order-42".to_owned()));
    assert_eq!(err, DecodeError::InvalidMessageId);
    assert_eq!(err.code(), "invalid_message_id");
}

#[test]
fn missing_type() {
    let err = decode_broken(|m| m.properties.kind = None);
    assert_eq!(err, DecodeError::MissingEventType);
    assert_eq!(err.code(), "missing_type");
}

#[test]
fn empty_type() {
    let err = decode_broken(|m| m.properties.kind = Some(String::new()));
    assert_eq!(err, DecodeError::InvalidEventType(EventError::EmptyEventType));
    assert_eq!(err.code(), "invalid_type");
}

#[test]
fn type_with_whitespace() {
    for kind in ["order placed", "order.placed\n", "\torder"] {
        let err = decode_broken(|m| m.properties.kind = Some(kind.to_owned()));
        assert_eq!(err, DecodeError::InvalidEventType(EventError::InvalidEventType), "{kind:?}");
        assert_eq!(err.code(), "invalid_type");
    }
}

#[test]
fn type_too_long() {
    let err = decode_broken(|m| m.properties.kind = Some("t".repeat(256)));
    assert_eq!(err, DecodeError::InvalidEventType(EventError::EventTypeTooLong { len: 256, max: 255 }));
}

#[test]
fn missing_content_type() {
    let err = decode_broken(|m| m.properties.content_type = None);
    assert_eq!(err, DecodeError::MissingContentType);
    assert_eq!(err.code(), "missing_content_type");
}

#[test]
fn missing_event_version() {
    let err = decode_broken(remove_header(wire::HEADER_EVENT_VERSION));
    assert_eq!(err, DecodeError::MissingHeader(wire::HEADER_EVENT_VERSION));
    assert_eq!(err.code(), "missing_header");
}

#[test]
fn event_version_not_an_integer() {
    let err = decode_broken(set_header(wire::HEADER_EVENT_VERSION, "3"));
    assert_invalid_header(&err, wire::HEADER_EVENT_VERSION);
}

#[test]
fn event_version_zero_or_negative() {
    for version in [0, -1, i64::MIN] {
        let err = decode_broken(set_header(wire::HEADER_EVENT_VERSION, version));
        assert_invalid_header(&err, wire::HEADER_EVENT_VERSION);
    }
}

#[test]
fn event_version_above_u32_max() {
    for version in [i64::from(u32::MAX) + 1, i64::MAX] {
        let err = decode_broken(set_header(wire::HEADER_EVENT_VERSION, version));
        assert_invalid_header(&err, wire::HEADER_EVENT_VERSION);
    }
}

#[test]
fn entity_without_seq() {
    let err = decode_broken(remove_header(wire::HEADER_SEQ));
    assert_eq!(err, DecodeError::MissingHeader(wire::HEADER_SEQ));
    assert_eq!(err.code(), "missing_header");
}

#[test]
fn seq_without_entity() {
    let err = decode_broken(remove_header(wire::HEADER_ENTITY));
    assert_eq!(err, DecodeError::MissingHeader(wire::HEADER_ENTITY));
    assert_eq!(err.code(), "missing_header");
}

#[test]
fn seq_not_an_integer() {
    for value in [HeaderValue::from("7"), HeaderValue::Float(7.0)] {
        let err = decode_broken(set_header(wire::HEADER_SEQ, value));
        assert_invalid_header(&err, wire::HEADER_SEQ);
    }
}

#[test]
fn seq_zero_or_negative() {
    for seq in [0, -1, i64::MIN] {
        let err = decode_broken(set_header(wire::HEADER_SEQ, seq));
        assert_invalid_header(&err, wire::HEADER_SEQ);
    }
}

#[test]
fn entity_not_a_string() {
    let err = decode_broken(set_header(wire::HEADER_ENTITY, 42));
    assert_invalid_header(&err, wire::HEADER_ENTITY);
}

#[test]
fn entity_empty_too_long_or_with_control_characters() {
    for key in [String::new(), "k".repeat(256), "order\n42".to_owned()] {
        let err = decode_broken(set_header(wire::HEADER_ENTITY, key));
        assert_invalid_header(&err, wire::HEADER_ENTITY);
    }
}

#[test]
fn created_at_ms_not_an_integer() {
    let err = decode_broken(set_header(wire::HEADER_CREATED_AT_MS, "1740832496789"));
    assert_invalid_header(&err, wire::HEADER_CREATED_AT_MS);
}

#[test]
fn missing_created_at() {
    let err = decode_broken(|m| {
        m.headers.remove(wire::HEADER_CREATED_AT_MS);
        m.properties.timestamp = None;
    });
    assert_eq!(err, DecodeError::MissingCreatedAt);
    assert_eq!(err.code(), "missing_created_at");
}

#[test]
fn timestamp_out_of_range_is_an_error_not_a_panic() {
    // Only reached without x-created-at-ms; its milliseconds must fit the contract's i64.
    for secs in [u64::MAX, i64::MAX as u64, (i64::MAX / 1000) as u64 + 1] {
        let err = decode_broken(|m| {
            m.headers.remove(wire::HEADER_CREATED_AT_MS);
            m.properties.timestamp = Some(secs);
        });
        assert_eq!(err, DecodeError::InvalidTimestamp, "{secs}");
        assert_eq!(err.code(), "invalid_timestamp");
    }
}

#[test]
fn causation_id_not_a_string() {
    let err = decode_broken(set_header(wire::HEADER_CAUSATION_ID, 1));
    assert_invalid_header(&err, wire::HEADER_CAUSATION_ID);
}

#[test]
fn traceparent_not_a_string() {
    let err = decode_broken(set_header(wire::HEADER_TRACEPARENT, HeaderValue::Bytes(TRACEPARENT.as_bytes().to_vec())));
    assert_invalid_header(&err, wire::HEADER_TRACEPARENT);
}

#[test]
fn errors_and_message_debug_never_show_the_body_or_header_values() {
    let message = wire::encode(&ordered_event(), None);
    assert!(String::from_utf8_lossy(&message.body).contains(SECRET));
    assert!(!format!("{message:?}").contains(SECRET));
    assert!(!format!("{message:#?}").contains(SECRET));
    // The offending value itself is not quoted either.
    for header in [wire::HEADER_EVENT_VERSION, wire::HEADER_SEQ, wire::HEADER_CREATED_AT_MS] {
        decode_broken(set_header(header, SECRET));
    }
    decode_broken(|m| m.properties.message_id = Some(SECRET.to_owned()));
    decode_broken(set_header(wire::HEADER_ENTITY, format!("{SECRET}\n")));
    let err = decode_broken(|m| m.properties.kind = Some(format!("{SECRET} x")));
    assert!(!format!("{err:#?}").contains(SECRET));
}

// ---------------------------------------------------------------------------------------------
// Properties

fn is_reserved(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("x-outbox-")
}

/// Cuts `s` to at most `max` bytes on a char boundary.
fn truncate_bytes(mut s: String, max: usize) -> String {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s
}

fn arb_created_ms() -> impl Strategy<Value = i64> {
    prop_oneof![
        // 1900 to 2100.
        -2_208_988_800_000i64..4_102_444_800_000,
        any::<i64>(),
        Just(i64::MIN),
        Just(-1),
        Just(0),
        Just(i64::MAX),
    ]
}

fn arb_event_type() -> impl Strategy<Value = String> {
    "[^\\s\\p{Cc}]{1,60}".prop_filter("a valid event type", |t| {
        t.len() <= 255 && !t.chars().any(|c| c.is_control() || c.is_whitespace())
    })
}

fn arb_entity() -> impl Strategy<Value = Entity> {
    let key = prop_oneof!["[^\\p{Cc}]{1,255}".prop_map(|k| truncate_bytes(k, 255)), "[ -~]{255}",];
    (key, 1..=i64::MAX as u64).prop_map(|(key, seq)| Entity { key, seq })
}

fn arb_header_name() -> impl Strategy<Value = String> {
    "[!-~]{1,128}".prop_filter("not reserved", |n| !is_reserved(n))
}

fn arb_producer_value() -> impl Strategy<Value = HeaderValue> {
    prop_oneof![
        any::<String>().prop_map(HeaderValue::String),
        any::<i64>().prop_map(HeaderValue::Int),
        any::<bool>().prop_map(HeaderValue::Bool),
    ]
}

fn arb_traceparent() -> impl Strategy<Value = String> {
    (1..=u128::MAX, 1..=u64::MAX, any::<u8>())
        .prop_map(|(trace, span, flags)| format!("00-{trace:032x}-{span:016x}-{flags:02x}"))
}

prop_compose! {
    fn arb_event()(
        id in any::<u128>(),
        event_type in arb_event_type(),
        event_version in 1..=u32::MAX,
        entity in proptest::option::of(arb_entity()),
        body in vec(any::<u8>(), 0..512),
        content_type in "[ -~]{1,64}",
        correlation_id in proptest::option::of("[^\\p{Cc}]{1,60}"),
        causation_id in proptest::option::of("[^\\p{Cc}]{1,60}"),
        traceparent in proptest::option::of(arb_traceparent()),
        headers in btree_map(arb_header_name(), arb_producer_value(), 0..8),
        created_ms in arb_created_ms(),
    ) -> Event {
        let payload = Payload::new(body, content_type);
        let mut event = Event::new(EventId::from_uuid(Uuid::from_u128(id)), event_type, payload, at_ms(created_ms));
        event.event_version = event_version;
        event.entity = entity;
        event.correlation_id = correlation_id;
        event.causation_id = causation_id;
        event.traceparent = traceparent;
        event.headers = headers;
        event
    }
}

/// Any header value a broker could hand a consumer (floats finite, so that values equal themselves).
fn arb_broker_value() -> impl Strategy<Value = HeaderValue> {
    let leaf = prop_oneof![
        arb_producer_value(),
        (-1e12f64..1e12).prop_map(HeaderValue::Float),
        vec(any::<u8>(), 0..16).prop_map(HeaderValue::Bytes),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(HeaderValue::List),
            btree_map("[a-z-]{1,12}", inner, 0..4).prop_map(HeaderValue::Table),
        ]
    })
}

/// A change to one header: `None` removes it.
fn arb_header_change() -> impl Strategy<Value = (String, Option<HeaderValue>)> {
    let contract_name = prop_oneof![
        Just(wire::HEADER_EVENT_VERSION),
        Just(wire::HEADER_ENTITY),
        Just(wire::HEADER_SEQ),
        Just(wire::HEADER_CAUSATION_ID),
        Just(wire::HEADER_CREATED_AT_MS),
        Just(wire::HEADER_TRACEPARENT),
    ]
    .prop_map(str::to_owned);
    let value = prop_oneof![
        2 => any::<i64>().prop_map(HeaderValue::Int),
        2 => (-2i64..300).prop_map(HeaderValue::Int),
        1 => "[^\\p{Cc}]{0,20}".prop_map(HeaderValue::String),
        1 => arb_broker_value(),
    ];
    (prop_oneof![3 => contract_name, 1 => "x-[a-z-]{1,12}"], proptest::option::of(value))
}

/// Arbitrary deliveries: a valid message with some properties replaced or dropped and some
/// headers replaced, added or removed, so that both decode's success and error paths are taken.
fn arb_message() -> impl Strategy<Value = WireMessage> {
    let message_id = prop_oneof![
        any::<u128>().prop_map(|u| Uuid::from_u128(u).simple().to_string()),
        any::<u128>().prop_map(|u| Uuid::from_u128(u).urn().to_string()),
        any::<String>(),
    ];
    (
        arb_event(),
        proptest::option::weighted(0.2, proptest::option::of(message_id)),
        proptest::option::weighted(0.2, proptest::option::of(any::<String>())),
        proptest::option::weighted(0.2, proptest::option::of("[ -~]{0,20}")),
        proptest::option::weighted(0.5, proptest::option::of(any::<u64>())),
        vec(arb_header_change(), 0..4),
    )
        .prop_map(|(event, message_id, kind, content_type, timestamp, changes)| {
            let mut m = wire::encode(&event, None);
            let p = &mut m.properties;
            p.message_id = message_id.unwrap_or(p.message_id.take());
            p.kind = kind.unwrap_or(p.kind.take());
            p.content_type = content_type.unwrap_or(p.content_type.take());
            p.timestamp = timestamp.unwrap_or(p.timestamp);
            for (name, value) in changes {
                match value {
                    Some(value) => m.headers.insert(name, value),
                    None => m.headers.remove(&name),
                };
            }
            m
        })
}

proptest! {
    #[test]
    fn decode_inverts_encode(event in arb_event(), app_id in proptest::option::of("[a-z-]{1,20}")) {
        let message = wire::encode(&event, app_id.as_deref());
        prop_assert_eq!(wire::decode(message), Ok(event));
    }

    #[test]
    fn encode_sets_persistence_id_type_and_time(
        mut event in arb_event(),
        created_ms in arb_created_ms(),
    ) {
        event.created_at = at_ms(created_ms);
        let message = wire::encode(&event, None);
        let p = &message.properties;
        prop_assert_eq!(p.delivery_mode, Some(wire::PERSISTENT));
        prop_assert_eq!(p.message_id.clone(), Some(event.id.to_string()));
        prop_assert_eq!(p.kind.as_deref(), Some(event.event_type.as_str()));
        prop_assert_eq!(p.content_type.as_deref(), Some(event.payload.content_type()));
        prop_assert_eq!(&p.correlation_id, &event.correlation_id);
        // AMQP timestamps are unsigned: times before 1970 carry 0, and only x-created-at-ms is exact.
        let expected_secs = u64::try_from(created_ms / 1000).unwrap_or(0);
        prop_assert_eq!(p.timestamp, Some(expected_secs));
        prop_assert_eq!(
            message.headers.get(wire::HEADER_CREATED_AT_MS),
            Some(&HeaderValue::Int(created_ms))
        );
        prop_assert_eq!(
            message.headers.get(wire::HEADER_EVENT_VERSION),
            Some(&HeaderValue::Int(i64::from(event.event_version)))
        );
        prop_assert_eq!(&message.body[..], event.payload.bytes());
    }

    /// Whatever arrives, decode returns instead of panicking, and what it accepts survives another
    /// trip over the wire unchanged.
    #[test]
    fn decode_is_total_and_stable(message in arb_message()) {
        if let Ok(event) = wire::decode(message) {
            prop_assert_eq!(wire::decode(wire::encode(&event, None)), Ok(event));
        }
    }
}

/// A message of a newer contract is refused (a consumer dead-letters it with the reason) instead
/// of being read as version 1; one that says version 1 reads as any other.
#[test]
fn a_newer_contract_is_refused_and_version_1_reads() {
    let err = decode_broken(set_header(wire::HEADER_CONTRACT, 2_i64));
    assert_eq!(err, DecodeError::NewerContract(2));
    assert_eq!(err.code(), "newer_contract");
    assert!(err.to_string().contains("newer"), "{err}");
    assert_invalid_header(&decode_broken(set_header(wire::HEADER_CONTRACT, "2")), wire::HEADER_CONTRACT);

    let mut message = wire::encode(&ordered_event(), Some("orders"));
    assert!(!message.headers.contains_key(wire::HEADER_CONTRACT), "version 1 sends no contract header");
    message.headers.insert(wire::HEADER_CONTRACT.to_owned(), HeaderValue::Int(1));
    let event = wire::decode(message).expect("version 1 decodes");
    assert!(!event.headers.contains_key(wire::HEADER_CONTRACT), "the contract header is not an event header");
}
