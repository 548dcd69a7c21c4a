//! One trace from the request that enqueues an event to the consumer that applies it, with the
//! feature `otel` of the producer, the relay and the consumer (enabled by this crate's
//! dev-dependencies) and a `tracing-opentelemetry` layer over an in-memory span exporter:
//! `request` → `outbox.enqueue` → `outbox.publish` → `inbox.handle`, and never a payload in a span.
//!
//! Its own test binary: the tracer is the process's global subscriber.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use opentelemetry::trace::{SpanContext, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox_inbox::{HandlerError, InboxRequest};
use outbox_producer::Outbox;
use outbox_testkit::{Harness, TestDb, wait_for};
use outbox_types::NewEvent;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// The tracer provider and its exporter, installed once for the process, behind the product's
/// log filter as a service would install them.
fn tracer() -> &'static (SdkTracerProvider, InMemorySpanExporter) {
    static TRACER: OnceLock<(SdkTracerProvider, InMemorySpanExporter)> = OnceLock::new();
    TRACER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let redact: Targets = outbox_types::REDACTING_LOG_TARGETS.parse().expect("constant targets");
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-tests")).with_filter(redact);
        tracing_subscriber::registry().with(layer).init();
        (provider, exporter)
    })
}

/// The finished spans of the trace `trace`, after a flush.
fn finished(trace: TraceId) -> Vec<SpanData> {
    let (provider, exporter) = tracer();
    provider.force_flush().expect("flush");
    let spans = exporter.get_finished_spans().expect("spans");
    spans.into_iter().filter(|s| s.span_context.trace_id() == trace).collect()
}

/// The one span named `name` among `spans`.
fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let named: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(named.len(), 1, "one {name} span in {:#?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    named[0]
}

/// The W3C `traceparent` of a sampled span.
fn traceparent(sc: &SpanContext) -> String {
    format!("00-{}-{}-01", sc.trace_id(), sc.span_id())
}

/// Every attribute value of the spans and of their events, as text.
fn attribute_values(spans: &[SpanData]) -> Vec<String> {
    let events = spans.iter().flat_map(|s| s.events.events.iter().flat_map(|e| &e.attributes));
    spans.iter().flat_map(|s| &s.attributes).chain(events).map(|kv| kv.value.as_str().into_owned()).collect()
}

async fn stored_traceparent(pool: &sqlx::PgPool, id: outbox_types::EventId) -> Option<String> {
    sqlx::query_scalar("SELECT traceparent FROM outbox_events WHERE id = $1")
        .bind(id.as_uuid())
        .fetch_one(pool)
        .await
        .expect("the row")
}

#[tokio::test]
async fn one_trace_runs_from_the_request_to_the_consumers_effect() {
    tracer();
    let secret = format!("p4yl0ad-{}", outbox_testkit::unique_suffix());
    // The traceparent each applied event arrived with.
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let record = seen.clone();
    let handler = tower::service_fn(move |req: InboxRequest| {
        record.lock().unwrap_or_else(PoisonError::into_inner).push(req.event().traceparent.clone());
        async move { Ok::<_, HandlerError>(req) }
    });
    let h = Harness::builder().consumer(handler).start().await.expect("harness");

    let request = tracing::info_span!("request");
    let event =
        NewEvent::json("order.placed", &serde_json::json!({ "secret": secret })).expect("json").entity("order-1");
    let id = async {
        let mut tx = h.pool().begin().await.expect("begin");
        let id = h.outbox().enqueue(&mut *tx, event).await.expect("enqueue");
        tx.commit().await.expect("commit");
        id
    }
    .instrument(request.clone())
    .await;
    let request = request.context().span().span_context().clone();
    let stored = stored_traceparent(h.pool(), id).await;

    let runner = h.consumer_handle().expect("consumer");
    wait_for("the event applied", Duration::from_secs(30), || async {
        outbox_testkit::at_least(runner.stats().applied, 1)
    })
    .await
    .expect("applied");
    h.close().await.expect("cleanup");

    let spans = finished(request.trace_id());
    let (enqueue, publish, handle) =
        (one(&spans, "outbox.enqueue"), one(&spans, "outbox.publish"), one(&spans, "inbox.handle"));
    assert_eq!(enqueue.parent_span_id, request.span_id(), "enqueue under the request");
    assert_eq!(stored, Some(traceparent(&enqueue.span_context)), "the row carries the enqueue span");
    assert_eq!(publish.parent_span_id, enqueue.span_context.span_id(), "publish under enqueue");
    assert_eq!(handle.parent_span_id, publish.span_context.span_id(), "handling under publish");
    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(seen, [Some(traceparent(&publish.span_context))], "the message carries the publish span");
    let leaked: Vec<String> = attribute_values(&spans).into_iter().filter(|v| v.contains(&secret)).collect();
    assert!(leaked.is_empty(), "payload in span attributes: {leaked:?}");
}

#[tokio::test]
async fn a_caller_set_traceparent_is_kept() {
    tracer();
    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let db = TestDb::new().await.expect("database");
    let outbox = Outbox::new();
    let event = || NewEvent::json("order.placed", &serde_json::json!({ "id": 1 })).expect("json");

    let request = tracing::info_span!("request");
    let (one_id, many_ids) = async {
        let mut tx = db.pool().begin().await.expect("begin");
        let one_id = outbox.enqueue(&mut *tx, event().traceparent(CALLER)).await.expect("enqueue");
        let many_ids =
            outbox.enqueue_many(&mut *tx, [event().traceparent(CALLER), event()]).await.expect("enqueue many");
        tx.commit().await.expect("commit");
        (one_id, many_ids)
    }
    .instrument(request.clone())
    .await;
    let trace = request.context().span().span_context().trace_id();

    assert_eq!(stored_traceparent(db.pool(), one_id).await.as_deref(), Some(CALLER), "enqueue keeps it");
    assert_eq!(stored_traceparent(db.pool(), many_ids[0]).await.as_deref(), Some(CALLER), "enqueue_many keeps it");
    let filled = stored_traceparent(db.pool(), many_ids[1]).await.expect("filled in");
    let enqueue_many = one(&finished(trace), "outbox.enqueue_many").span_context.clone();
    assert_eq!(filled, traceparent(&enqueue_many), "the one without gets the enqueue_many span");
    db.close().await.expect("cleanup");
}
