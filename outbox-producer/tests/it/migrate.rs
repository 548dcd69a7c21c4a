//! The product's migrations live beside the host application's own sqlx migrations without
//! touching its history.

use outbox_testkit::TestDb;
use sqlx::migrate::Migrator;

async fn tables(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
        .fetch_all(pool)
        .await
        .expect("tables")
}

#[tokio::test]
async fn outbox_and_inbox_migrations_do_not_collide_with_the_host_application() {
    let db = TestDb::empty().await.expect("test db");
    let pool = db.pool();

    // The host application has its own migrations, tracked in sqlx's default `_sqlx_migrations`.
    let dir = std::env::temp_dir().join(format!("host-migrations-{}", outbox_testkit::unique_suffix()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("1_orders.sql"), "CREATE TABLE orders (id bigint PRIMARY KEY);").expect("write");
    let host = Migrator::new(dir.as_path()).await.expect("host migrator");
    host.run(pool).await.expect("host migrations");

    outbox_producer::migrate(pool).await.expect("outbox migrations");
    outbox_inbox::migrate(pool).await.expect("inbox migrations");
    // Running everything again is a no-op, in any order: no "previously applied but missing" errors.
    host.run(pool).await.expect("host migrations again");
    outbox_producer::migrate(pool).await.expect("outbox again");
    outbox_inbox::migrate(pool).await.expect("inbox again");

    let all = tables(pool).await;
    for t in [
        "_inbox_migrations",
        "_outbox_migrations",
        "_sqlx_migrations",
        "inbox_entities",
        "inbox_events",
        "orders",
        "outbox_entity_sequences",
        "outbox_events",
    ] {
        assert!(all.iter().any(|x| x == t), "missing table {t} in {all:?}");
    }
    let host_versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY 1")
        .fetch_all(pool)
        .await
        .expect("host history");
    assert_eq!(host_versions, vec![1], "the host's history holds only its own migration");
    let outbox_versions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM _outbox_migrations").fetch_one(pool).await.expect("outbox history");
    assert_eq!(outbox_versions, i64::try_from(outbox_producer::migrator().iter().count()).expect("count"));

    std::fs::remove_dir_all(&dir).expect("rmdir");
    db.close().await.expect("drop db");
}

/// Every hot query is served by an index: the relay's "due rows" scan and the predecessor lookup
/// use the partial and unique indexes even when the table is large.
#[tokio::test]
async fn hot_queries_use_indexes() {
    let db = TestDb::new().await.expect("test db");
    let pool = db.pool();
    sqlx::query(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type, status, published_at)
         SELECT gen_random_uuid(), 't', 1, 'e' || (g % 100), g / 100 + 1, '\\x00', 'a/b',
                CASE WHEN g < 45000 THEN 'published' ELSE 'pending' END,
                CASE WHEN g < 45000 THEN now() END
         FROM generate_series(0, 49999) g",
    )
    .execute(pool)
    .await
    .expect("fill");
    sqlx::query("ANALYZE outbox_events").execute(pool).await.expect("analyze");
    let plan = |sql: &'static str| async move {
        let lines: Vec<String> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}"))).fetch_all(pool).await.expect("explain");
        lines.join("\n")
    };
    let due = plan("SELECT id FROM outbox_events WHERE status = 'pending' AND next_attempt_at <= now() ORDER BY position LIMIT 100").await;
    assert!(due.contains("outbox_events_queue") && !due.contains("Seq Scan"), "{due}");
    let pred = plan("SELECT status FROM outbox_events WHERE entity_key = 'e7' AND seq = 40").await;
    assert!(pred.contains("outbox_events_entity_seq"), "{pred}");
    db.close().await.expect("drop db");
}

/// The product's SQL writes the status names out (so that the partial indexes' predicates match);
/// they must be those of `outbox_types::Status`, and the schema must accept exactly those.
#[tokio::test]
async fn the_schema_accepts_exactly_the_status_names_of_the_core_type() {
    use outbox_types::Status;
    let db = TestDb::new().await.expect("test db");
    let check: String = sqlx::query_scalar(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
         WHERE c.conrelid = 'outbox_events'::regclass AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%status%'",
    )
    .fetch_one(db.pool())
    .await
    .expect("status check constraint");
    let accepted: Vec<&str> = check.split('\'').skip(1).step_by(2).collect();
    let ours = [Status::Pending, Status::Published, Status::Quarantined, Status::Skipped].map(Status::as_str);
    assert_eq!(accepted, ours, "{check}");
    for status in ours {
        assert_eq!(status.parse::<Status>().map(Status::as_str), Ok(status));
    }
}

/// Each migration's version and the first 16 hex digits of its checksum, as databases applied it:
/// outbox migrations, then inbox migrations. A new migration adds its line; a line never changes.
const APPLIED: &[(&str, i64, &str)] = &[
    ("outbox", 20261202000001, "15e22b646527c974"),
    ("outbox", 20261202000002, "ca81afca482e8d7d"),
    ("outbox", 20261202000003, "24fdbee847edfd1b"),
    ("outbox", 20261202000004, "ea4e5d30c34a70a2"),
    ("outbox", 20261203000004, "0e8dbdf83e34a4b2"),
    ("outbox", 20261205000001, "9d58cb1eded3edbf"),
    ("outbox", 20261205000002, "38e8bdb38a229702"),
    ("outbox", 20261205000003, "c54e23dfb7c4d849"),
    ("outbox", 20261206000001, "5c5e97fb2ff1f195"),
    ("outbox", 20261207000001, "fdf433e02fdb18fd"),
    ("outbox", 20261208000001, "5f4c4590236fdb9b"),
    ("outbox", 20261208000002, "ca137be33c2a08b4"),
    ("inbox", 20261202000001, "024b8114b146a624"),
    ("inbox", 20261205000001, "3a435ecfb25ff756"),
    ("inbox", 20261206000001, "e196d064f9935294"),
    ("inbox", 20261206000002, "8e698606b8b62ba4"),
];

/// A migration a database has applied is never edited: sqlx then refuses to start on that database
/// ("previously applied but has been modified"), in production as on a CI machine whose servers
/// keep their databases. Change the schema with a new migration instead.
#[test]
fn applied_migrations_are_never_edited() {
    let mut found = Vec::new();
    for (side, migrator) in [("outbox", outbox_producer::migrator()), ("inbox", outbox_inbox::migrator())] {
        for m in migrator.iter() {
            let hex: String = m.checksum.iter().take(8).map(|b| format!("{b:02x}")).collect();
            found.push((side, m.version, hex));
        }
    }
    let pinned: Vec<(&str, i64, String)> = APPLIED.iter().map(|(s, v, h)| (*s, *v, (*h).to_owned())).collect();
    for (i, pin) in pinned.iter().enumerate() {
        assert_eq!(found.get(i), Some(pin), "an applied migration was edited or removed; found: {found:#?}");
    }
    assert_eq!(found.len(), pinned.len(), "a new migration: add its line to APPLIED; found: {found:#?}");
}
