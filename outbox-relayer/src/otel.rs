//! OpenTelemetry trace context of published events (feature `otel`): each event is published in
//! a span `outbox.publish` whose parent is the event's `traceparent`, and its message carries that
//! span's own context (header `traceparent`), so the consumer's span is a child of the publish.

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use outbox_types::wire::{HEADER_TRACEPARENT, WireMessage};
use outbox_types::{Event, HeaderValue};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The span `outbox.publish` of `event` (ids only, never the payload), child of the event's trace
/// context; `message`'s `traceparent` becomes the span's. Without an OpenTelemetry layer the span
/// has no context and the message is left as it is.
pub(crate) fn publish_span(event: &Event, message: &mut WireMessage) -> Span {
    let span = tracing::info_span!(
        "outbox.publish",
        event_id = %event.id,
        event_type = event.event_type.as_str(),
        entity = event.entity.as_ref().map(|e| e.key.as_str()),
        seq = event.entity.as_ref().map(|e| e.seq),
        correlation_id = event.correlation_id.as_deref(),
    );
    if let Some(parent) = event.traceparent.as_deref().and_then(parse) {
        // Fails only where there is no OpenTelemetry layer, hence no trace to continue.
        let _ = span.set_parent(Context::new().with_remote_span_context(parent));
    }
    if let Some(tp) = format(span.context().span().span_context()) {
        message.headers.insert(HEADER_TRACEPARENT.to_owned(), HeaderValue::String(tp));
    }
    span
}

/// The remote span context a W3C `traceparent` (`<version>-<32 hex>-<16 hex>-<2 hex>`) names.
fn parse(tp: &str) -> Option<SpanContext> {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let mut parts = tp.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let well_formed = parts.next().is_none()
        && hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2);
    if !well_formed {
        return None;
    }
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let (trace, span) = (TraceId::from_hex(trace).ok()?, SpanId::from_hex(span).ok()?);
    let sc = SpanContext::new(trace, span, flags, true, TraceState::NONE);
    sc.is_valid().then_some(sc)
}

/// `00-<trace id>-<span id>-<flags>`, for a valid span context.
fn format(sc: &SpanContext) -> Option<String> {
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use outbox_types::{EventId, Payload, wire};

    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_parses_and_formats_back() {
        let sc = parse(TP).expect("valid");
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(format(&sc).as_deref(), Some(TP));
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn without_an_opentelemetry_layer_the_message_keeps_its_traceparent() {
        let payload = Payload::new(b"{}".to_vec(), "application/json");
        let mut event = Event::new(EventId::new(), "order.placed", payload, SystemTime::now());
        event.traceparent = Some(TP.to_owned());
        let mut message = wire::encode(&event, None);
        let _span = publish_span(&event, &mut message);
        assert_eq!(message.headers.get(HEADER_TRACEPARENT), Some(&HeaderValue::String(TP.to_owned())));
    }
}
