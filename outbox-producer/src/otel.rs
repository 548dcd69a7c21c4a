//! OpenTelemetry trace context of enqueued events (feature `otel`): an event without a
//! `traceparent` gets the one of the span that enqueues it, so the trace of the request that
//! wrote it goes on at the relay and the consumer. A caller-set `traceparent` is kept.

use opentelemetry::trace::{SpanContext, TraceContextExt};
use outbox_types::NewEvent;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `event`, with the current span's trace context unless it has one of its own.
pub(crate) fn with_current_trace(event: NewEvent) -> NewEvent {
    if event.event_traceparent().is_some() {
        return event;
    }
    match current_traceparent() {
        Some(tp) => event.traceparent(tp),
        None => event,
    }
}

/// `events`, each with the current span's trace context unless it has one of its own (the span's
/// context is read once).
pub(crate) fn with_current_trace_all(events: Vec<NewEvent>) -> Vec<NewEvent> {
    if events.iter().all(|e| e.event_traceparent().is_some()) {
        return events;
    }
    match current_traceparent() {
        Some(tp) => events.into_iter().map(|e| keep_or(e, &tp)).collect(),
        None => events,
    }
}

/// `event` with its own `traceparent`, or `tp` if it has none.
fn keep_or(event: NewEvent, tp: &str) -> NewEvent {
    if event.event_traceparent().is_some() { event } else { event.traceparent(tp) }
}

/// The W3C `traceparent` of the current span, if it has a valid OpenTelemetry context (none
/// without an OpenTelemetry layer).
fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    format(cx.span().span_context())
}

/// `00-<trace id>-<span id>-<flags>`, for a valid span context.
fn format(sc: &SpanContext) -> Option<String> {
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    use super::*;

    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn event() -> NewEvent {
        NewEvent::new("order.placed", outbox_types::Payload::new(b"{}".to_vec(), "application/json"))
    }

    #[test]
    fn a_caller_set_traceparent_is_kept() {
        let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let kept = keep_or(event().traceparent(CALLER), other);
        assert_eq!(kept.event_traceparent(), Some(CALLER));
        let all = with_current_trace_all(vec![event().traceparent(CALLER)]);
        assert_eq!(all[0].event_traceparent(), Some(CALLER));
        assert_eq!(with_current_trace(event().traceparent(CALLER)).event_traceparent(), Some(CALLER));
    }

    #[test]
    fn an_event_without_one_gets_the_spans() {
        assert_eq!(keep_or(event(), CALLER).event_traceparent(), Some(CALLER));
    }

    #[test]
    fn without_an_opentelemetry_layer_nothing_is_written() {
        let span = tracing::info_span!("request");
        let _entered = span.enter();
        assert_eq!(with_current_trace(event()).event_traceparent(), None);
    }

    #[test]
    fn the_format_is_w3c() {
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex"),
            SpanId::from_hex("00f067aa0ba902b7").expect("hex"),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        );
        assert_eq!(format(&sc).as_deref(), Some(CALLER));
        assert_eq!(format(&SpanContext::NONE), None);
    }
}
