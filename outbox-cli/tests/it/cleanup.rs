//! `outbox cleanup` on 100,000 old published rows beside rows in every other state: a dry run
//! counts and deletes nothing; the run deletes exactly the old published rows and the consumer's
//! old processed event ids, with progress lines and the rate, and leaves waiting, claimed, held,
//! quarantined, recent, parked and failed rows alone.

use crate::support::output as run;
use outbox_system_tests::sizes;
use outbox_testkit::TestDb;

const OLD: i64 = sizes::CLEANUP_OLD_ROWS;

/// `OLD` published rows two days old over 1,000 entities, then per state one row three days old:
/// waiting, claimed (leased), held, quarantined, skipped; and 10 published an hour ago. The inbox of
/// `shipping`: 1,000 processed ids two days old, 10 recent, one parked and one failed, both old.
async fn fill(db: &TestDb) {
    sqlx::query(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type, status,
                                    created_at, published_at)
         SELECT gen_random_uuid(), 'order.changed', 1, 'order-' || (i % 1000), i / 1000 + 1, '\\x7b7d',
                'application/json', 'published', now() - interval '2 days', now() - interval '2 days'
         FROM generate_series(0, $1 - 1) AS i",
    )
    .bind(OLD)
    .execute(db.pool())
    .await
    .expect("old published rows");
    let statements = [
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type, status,
                                    created_at, published_at, quarantined_at, next_attempt_at, lease_owner, lease_until)
         VALUES
         (gen_random_uuid(), 't', 1, 'w', 1, '\\x7b7d', 'application/json', 'pending', now() - interval '3 days', NULL, NULL, now(), NULL, NULL),
         (gen_random_uuid(), 't', 1, 'c', 1, '\\x7b7d', 'application/json', 'pending', now() - interval '3 days', NULL, NULL, now(), 'relay-x', now() + interval '1 minute'),
         (gen_random_uuid(), 't', 1, 'q', 1, '\\x7b7d', 'application/json', 'quarantined', now() - interval '3 days', NULL, now() - interval '3 days', now(), NULL, NULL),
         (gen_random_uuid(), 't', 1, 'q', 2, '\\x7b7d', 'application/json', 'pending', now() - interval '3 days', NULL, NULL, 'infinity', NULL, NULL),
         (gen_random_uuid(), 't', 1, 's', 1, '\\x7b7d', 'application/json', 'skipped', now() - interval '3 days', NULL, now() - interval '3 days', now(), NULL, NULL)",
        "INSERT INTO outbox_events (id, event_type, event_version, payload, content_type, status, published_at)
         SELECT gen_random_uuid(), 'recent', 1, '\\x7b7d', 'application/json', 'published', now() - interval '1 hour'
         FROM generate_series(1, 10)",
        "INSERT INTO inbox_events (consumer, event_id, status, received_at, processed_at)
         SELECT 'shipping', gen_random_uuid(), 'processed', now() - interval '2 days', now() - interval '2 days'
         FROM generate_series(1, 1000)",
        "INSERT INTO inbox_events (consumer, event_id, status, received_at, processed_at)
         SELECT 'shipping', gen_random_uuid(), 'processed', now(), now() FROM generate_series(1, 10)",
        "INSERT INTO inbox_events (consumer, event_id, entity_key, seq, status, received_at)
         VALUES ('shipping', gen_random_uuid(), 'p', 2, 'parked', now() - interval '3 days'),
                ('shipping', gen_random_uuid(), 'f', 1, 'failed', now() - interval '3 days')",
        "VACUUM ANALYZE outbox_events, inbox_events",
    ];
    for statement in statements {
        sqlx::raw_sql(statement).execute(db.pool()).await.expect(statement);
    }
}

async fn counts(db: &TestDb) -> (Vec<(String, i64)>, Vec<(String, i64)>) {
    let outbox = sqlx::query_as("SELECT status, count(*) FROM outbox_events GROUP BY 1 ORDER BY 1")
        .fetch_all(db.pool())
        .await
        .expect("outbox");
    let inbox = sqlx::query_as("SELECT status, count(*) FROM inbox_events GROUP BY 1 ORDER BY 1")
        .fetch_all(db.pool())
        .await
        .expect("inbox");
    (outbox, inbox)
}

fn pairs(p: &[(&str, i64)]) -> Vec<(String, i64)> {
    p.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
}

#[tokio::test]
async fn cleanup_deletes_exactly_the_old_final_rows_and_processed_ids() {
    let db = TestDb::new().await.expect("db");
    fill(&db).await;
    let url = db.url();
    let args = ["cleanup", "--older-than", "1d", "--inbox", "shipping", "--dedup-window", "1d"];
    let before = counts(&db).await;

    let dry = run(&url, &[&args[..], &["--dry-run"]].concat()).await;
    let out = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    assert!(out.contains(&format!("would delete {OLD} outbox row(s)")), "{out}");
    assert!(out.contains("would delete 1000 processed event id(s) of shipping"), "{out}");
    let dry = run(&url, &[&args[..], &["--dry-run", "--json"]].concat()).await;
    let v: serde_json::Value = serde_json::from_slice(&dry.stdout).expect("json");
    assert_eq!((v["outbox_rows"].as_i64(), v["inbox_ids"].as_i64()), (Some(OLD), Some(1000)), "{v}");
    assert_eq!(counts(&db).await, before, "a dry run deletes nothing");

    let done = run(&url, &args).await;
    let (out, err) = (String::from_utf8_lossy(&done.stdout), String::from_utf8_lossy(&done.stderr));
    assert!(done.status.success(), "{err}");
    assert!(out.contains(&format!("deleted {OLD} outbox rows in")) && out.contains("rows/s"), "{out}");
    assert!(out.contains("deleted 1000 processed event ids of shipping in"), "{out}");
    assert!(err.contains(&format!("deleted {OLD} of {OLD} outbox rows")), "progress lines: {err}");
    let (outbox_left, inbox_left) = counts(&db).await;
    assert_eq!(
        outbox_left,
        pairs(&[("pending", 3), ("published", 10), ("quarantined", 1), ("skipped", 1)]),
        "only the old published rows went (skipped stay without --include-skipped)"
    );
    assert_eq!(inbox_left, pairs(&[("failed", 1), ("parked", 1), ("processed", 10)]));

    let again = run(&url, &["cleanup", "--older-than", "1d", "--include-skipped", "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).expect("json");
    assert_eq!(v["outbox"]["deleted"], 1, "the skipped row, on request: {v}");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn cleanup_refuses_what_it_cannot_use() {
    let db = TestDb::new().await.expect("db");
    for (args, needle) in [
        (&["cleanup", "--older-than", "7"][..], "unit"),
        (&["cleanup", "--older-than", "0d"], "between"),
        (&["cleanup", "--older-than", "1d", "--inbox", "shipping"], "--dedup-window"),
        (&["cleanup"], "--older-than"),
    ] {
        let out = run(&db.url(), args).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {needle:?} missing: {err}");
    }
    db.close().await.expect("cleanup");
}

/// `--scrub-payload-after`: the payload of old published rows is cleared, the rows stay, and
/// `outbox events show` says when; rows old enough to delete are deleted, not scrubbed first; a
/// scrub age not shorter than the deletion age is refused.
#[tokio::test]
async fn cleanup_scrubs_old_payloads_and_show_says_when() {
    let db = TestDb::new().await.expect("db");
    let insert =
        "INSERT INTO outbox_events (id, event_type, event_version, payload, content_type, status, published_at)
                  SELECT gen_random_uuid(), 't', 1, convert_to('SECRET-' || i, 'UTF8'), 'text/plain', 'published',
                         now() - make_interval(days => i)
                  FROM generate_series(0, 9) AS i";
    sqlx::raw_sql(insert).execute(db.pool()).await.expect("rows");
    let url = db.url();
    let args = ["cleanup", "--older-than", "7d", "--scrub-payload-after", "1d"];
    let dry = run(&url, &[&args[..], &["--dry-run"]].concat()).await;
    let out = String::from_utf8_lossy(&dry.stdout);
    assert!(out.contains("would scrub the payload of 6 published row(s)"), "{out}");
    assert!(out.contains("would delete 3 outbox row(s)"), "{out}");

    let done = run(&url, &args).await;
    let out = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(out.contains("scrubbed the payload of 6 published row(s)"), "{out}");
    let plain: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE position('SECRET'::bytea in payload) > 0")
            .fetch_one(db.pool())
            .await
            .expect("count");
    assert_eq!(plain, 1, "only the row published today keeps its payload");
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events").fetch_one(db.pool()).await.ok(),
        Some(7),
        "the rows of days 7 to 9 deleted, the others kept"
    );

    let id: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM outbox_events WHERE payload_scrubbed_at IS NOT NULL LIMIT 1")
            .fetch_one(db.pool())
            .await
            .expect("id");
    let shown = run(&url, &["events", "show", &id.to_string(), "--payload"]).await;
    let out = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    let line = out.lines().find(|l| l.starts_with("payload")).unwrap_or_default().to_owned();
    assert!(line.contains("scrubbed 20"), "the record says when: {out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("payload")).count(), 1, "no empty payload printed: {out}");
    let json = run(&url, &["events", "show", &id.to_string(), "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert!(v["payload_scrubbed_at"].is_string(), "{v}");

    let refused = run(&url, &["cleanup", "--older-than", "1d", "--scrub-payload-after", "2d"]).await;
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.lines().count() == 1 && err.contains("scrub_payload_after"), "{err}");
    db.close().await.expect("cleanup");
}
