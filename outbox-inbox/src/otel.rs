//! OpenTelemetry trace context of consumed events (feature `otel`): the span that handles an
//! event is a child of the span context its W3C `traceparent` names (the relay's publish span).

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Makes the span context `traceparent` names the OpenTelemetry parent of `span`; nothing if
/// there is none, if it is malformed, or without an OpenTelemetry layer.
pub(crate) fn set_parent(span: &Span, traceparent: Option<&str>) {
    if let Some(parent) = traceparent.and_then(parse) {
        // Fails only where there is no OpenTelemetry layer, hence no trace to continue.
        let _ = span.set_parent(Context::new().with_remote_span_context(parent));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_names_a_remote_span_context() {
        let sc = parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").expect("valid");
        assert_eq!(sc.trace_id(), TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex"));
        assert_eq!(sc.span_id(), SpanId::from_hex("00f067aa0ba902b7").expect("hex"));
        assert!(sc.is_remote() && sc.is_sampled());
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
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }
}
