//! `outbox relay --metrics-addr`: the real binary serves /metrics in the Prometheus text format
//! with the relay's counts, /healthz and /readyz; an address that cannot be bound stops it at
//! start-up with the cause.

use std::time::Duration;

use crate::support;
use crate::support::{AT_ONCE, Running, assert_failed_with, closed_port, http_get, outbox, sample, wait_status};
use outbox_system_tests::{Load, fill};
use outbox_testkit::{ChaosProxy, Harness, wait_for};

const EVENTS: usize = 20;

fn relay(h: &Harness, port: u16) -> std::process::Command {
    relay_via(h, port, &outbox_testkit::amqp_url())
}

fn relay_via(h: &Harness, port: u16, amqp_url: &str) -> std::process::Command {
    let mut cmd = outbox();
    cmd.arg("relay")
        .args(["--exchange", h.exchange(), "--no-declare-exchange", "--gauge-interval-secs", "0.2"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", h.db().url())
        .env("AMQP_URL", amqp_url);
    cmd
}

/// Waits until `path` answers `status`; returns the body.
#[tokio::test]
async fn the_relay_serves_its_metrics_and_its_health_over_http() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    fill(h.pool(), Load { entities: EVENTS, per_entity: 1 }).await;
    let port = closed_port();
    let running = Running::spawn(relay(&h, port));

    wait_status(port, "/readyz", 200, Duration::from_secs(60)).await;
    h.recorder().wait_for_count(EVENTS, Duration::from_secs(60)).await.expect("published");
    let page = wait_for("the published count on /metrics", Duration::from_secs(30), || async {
        let (status, page) = http_get(port, "/metrics").await?;
        (status == 200 && sample(&page, "outbox_published_total") == Some(EVENTS as f64)).then_some(page)
    })
    .await
    .expect("metrics");
    assert!(page.contains("# HELP outbox_published_total"), "described metrics:\n{page}");
    assert!(page.contains("outbox_commit_to_confirm_seconds"), "latency histogram:\n{page}");
    assert!(!page.contains("order.changed") && !page.contains("entity-"), "no event data in labels:\n{page}");
    assert_eq!(http_get(port, "/healthz").await.map(|(s, _)| s), Some(200));
    assert_eq!(http_get(port, "/nothing").await.map(|(s, _)| s), Some(404));

    running.signal("-TERM");
    let (status, lines) = running.finish(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(0), "clean exit on SIGTERM:\n{}", lines.join("\n"));
    h.close().await.expect("cleanup");
}

/// A relay that has published nothing shows its series at zero, so a fresh deployment's
/// dashboards and alerts read 0 rather than "no data".
#[tokio::test]
async fn a_fresh_relay_shows_its_series_at_zero_before_any_event() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let port = closed_port();
    let running = Running::spawn(relay(&h, port));
    wait_status(port, "/readyz", 200, Duration::from_secs(60)).await;
    let page = wait_for("the quarantined-by-kind gauges on /metrics", Duration::from_secs(30), || async {
        let (_, page) = http_get(port, "/metrics").await?;
        page.contains("outbox_events_quarantined{kind=\"rejected\"} 0").then_some(page)
    })
    .await
    .expect("metrics");
    for series in [
        "outbox_published_total 0",
        "outbox_quarantined_total 0",
        "outbox_publish_attempts_total 0",
        "outbox_lease_takeovers_total 0",
        "outbox_publish_failures_total{kind=\"rejected\"} 0",
        "outbox_publish_retries_total{kind=\"transient\"} 0",
        "outbox_events_quarantined{kind=\"contract\"} 0",
        "outbox_commit_to_confirm_seconds_count 0",
        "outbox_publish_to_confirm_seconds_count 0",
    ] {
        assert!(page.lines().any(|l| l == series), "`{series}` before any event:\n{page}");
    }
    running.signal("-TERM");
    let (status, lines) = running.finish(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(0), "clean exit on SIGTERM:\n{}", lines.join("\n"));
    h.close().await.expect("cleanup");
}

#[tokio::test]
async fn an_address_that_cannot_be_bound_stops_the_relay_at_start_up() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let (status, lines, took) = support::run(relay(&h, port), AT_ONCE * 2).await;
    assert_failed_with(status, &lines, &format!("cannot listen on 127.0.0.1:{port} for --metrics-addr"));
    assert!(took < AT_ONCE, "refused at once, took {took:?}");
    drop(taken);
    h.close().await.expect("cleanup");
}

/// The broker goes away while events wait: the relay pauses and says it is not ready (and why),
/// stays alive, and is ready again once the broker is back and the events went out.
#[tokio::test]
async fn readiness_follows_a_broker_outage() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let proxy = ChaosProxy::start("127.0.0.1:5672".parse().expect("addr")).await.expect("proxy");
    let port = closed_port();
    let running = Running::spawn(relay_via(&h, port, &format!("amqp://guest:guest@{}/%2f", proxy.addr())));
    wait_status(port, "/readyz", 200, Duration::from_secs(60)).await;

    proxy.refuse();
    proxy.cut();
    fill(h.pool(), Load { entities: EVENTS, per_entity: 1 }).await;
    let why = wait_status(port, "/readyz", 503, Duration::from_secs(60)).await;
    assert!(why.contains("broker"), "the reason names the broker: {why}");
    assert_eq!(http_get(port, "/healthz").await.map(|(s, _)| s), Some(200), "paused, not dead");
    let waiting = wait_for("the backlog gauges", Duration::from_secs(30), || async {
        let (_, page) = http_get(port, "/metrics").await?;
        let aged = sample(&page, "outbox_oldest_waiting_age_seconds")? > 0.0;
        (sample(&page, "outbox_events_waiting") == Some(EVENTS as f64) && aged).then_some(page)
    })
    .await
    .expect("the waiting events on /metrics");
    assert_eq!(sample(&waiting, "outbox_events_held"), Some(0.0), "nothing held:\n{waiting}");

    proxy.heal();
    h.recorder().wait_for_count(EVENTS, Duration::from_secs(60)).await.expect("published after the outage");
    wait_status(port, "/readyz", 200, Duration::from_secs(60)).await;
    wait_for("the backlog gauges to drop to zero", Duration::from_secs(30), || async {
        let (_, page) = http_get(port, "/metrics").await.ok_or("no answer from /metrics")?;
        outbox_testkit::equal(sample(&page, "outbox_events_waiting"), Some(0.0))
    })
    .await
    .expect("nothing waiting");
    running.signal("-TERM");
    let (status, lines) = running.finish(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(0), "clean exit on SIGTERM:\n{}", lines.join("\n"));
    drop(proxy);
    h.close().await.expect("cleanup");
}
