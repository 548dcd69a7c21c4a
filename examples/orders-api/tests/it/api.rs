//! Orders over HTTP: each change announced once, a retried request answered as the first and
//! written once, bad requests refused, and a SIGTERM that stops the service cleanly.

use outbox_testkit::{equal, wait_for};

use crate::support::{DEADLINE, Running};

const KEY: &str = "Idempotency-Key: 7f3a-create";

#[tokio::test]
async fn orders_changed_over_http_are_shipped_once_each_and_a_retry_writes_nothing() {
    let api = Running::start().await;
    assert_eq!(api.request("GET", "/healthz", &[], None).await.expect("healthz").status, 200);

    let first = api.request("POST", "/orders", &[KEY], Some(r#"{"total_cents": 1999}"#)).await.expect("create");
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    let order = first.json();
    let id = order["id"].as_i64().expect("id");
    assert_eq!((order["version"].as_i64(), order["status"].as_str()), (Some(1), Some("placed")));

    let retry = api.request("POST", "/orders", &[KEY], Some(r#"{"total_cents": 1999}"#)).await.expect("retry");
    assert_eq!(retry.status, 201, "the first answer's status");
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json(), order, "the first answer, the same order and event");

    let path = format!("/orders/{id}");
    let paid =
        api.request("PATCH", &path, &["Idempotency-Key: pay"], Some(r#"{"status": "paid"}"#)).await.expect("pay");
    assert_eq!((paid.status, paid.json()["version"].as_i64()), (200, Some(2)), "{}", paid.body);
    let paid_again =
        api.request("PATCH", &path, &["Idempotency-Key: pay"], Some(r#"{"status": "paid"}"#)).await.expect("pay");
    assert_eq!((paid_again.status, paid_again.json()), (200, paid.json()), "a retried change answers the first");
    for status in ["packed", "shipped"] {
        let body = format!(r#"{{"status": "{status}"}}"#);
        assert_eq!(api.request("PATCH", &path, &[], Some(&body)).await.expect("change").status, 200);
    }

    assert_eq!(
        api.request("PATCH", "/orders/999999", &[], Some(r#"{"status": "paid"}"#)).await.expect("404").status,
        404
    );
    assert_eq!(api.request("POST", "/orders", &[], Some(r#"{"total_cents": -1}"#)).await.expect("422").status, 422);
    assert_eq!(api.request("POST", "/orders", &[], Some("not json")).await.expect("400").status, 400);

    let orders = api.orders.pool();
    let count =
        |sql: &'static str| async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(orders).await.expect(sql) };
    assert_eq!(count("SELECT count(*) FROM orders").await, 1, "one order, the retry wrote none");
    assert_eq!(count("SELECT count(*) FROM outbox_events").await, 4, "four changes, four events");

    let shipping = api.shipping.pool();
    let versions = wait_for("the shipping service to apply all four changes", DEADLINE, || async {
        let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM shipments WHERE order_id = $1 ORDER BY n")
            .bind(id)
            .fetch_all(shipping)
            .await
            .unwrap_or_default();
        equal(versions.len(), 4).map(|()| versions)
    })
    .await
    .expect("shipped");
    assert_eq!(versions, [1, 2, 3, 4], "each change applied once, in order");

    let (code, log, rest) = api.terminate();
    assert_eq!(code, Some(0), "a clean exit on SIGTERM:\n{log}");
    assert!(log.contains("orders-api stopped"), "the relay stopped after the requests drained:\n{log}");
    assert!(!log.contains(" WARN ") && !log.contains(" ERROR "), "a clean run logs no WARN or ERROR:\n{log}");
    let claimed: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'pending'")
        .fetch_one(rest.orders.pool())
        .await
        .expect("pending");
    assert_eq!(claimed, 0, "every event published before the exit");
    rest.close().await;
}
