//! The claim against a real database: its plan (an ordered walk of the queue index on a table
//! without statistics; a generic plan made on an empty table that stays within its scan window once
//! the table grew), and which rows one claim takes.
//!
//! Which rows a claim takes is read from the table after a relay claimed once and stopped at the
//! crash point right after its claim: the rows it leased. The plan is read with EXPLAIN of the
//! relay's own claim statement, in a session with the relay's settings
//! (`outbox_relayer::claim_plan`).

use outbox_relayer::claim_plan::{CLAIM, MARK_PUBLISHED, SESSION};
use outbox_relayer::{CrashPoint, Error, Relay};
use outbox_testkit::TestDb;
use outbox_types::{ConfirmFuture, OutgoingMessage, Publisher};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Row};
use uuid::Uuid;

/// A publisher the relay never calls: it stops right after its claim.
struct NoBroker;

impl Publisher for NoBroker {
    async fn publish(&self, _: Vec<OutgoingMessage>) -> Vec<ConfirmFuture> {
        unreachable!("the relay stops right after its claim")
    }
}

/// One claim by the relay `relay_id`, of up to `batch` rows and up to `per_entity` consecutive
/// events of an entity, after which the relay stops as if killed; returns the rows it leased as
/// sorted (entity, seq) pairs, an unordered row as ("-", 0).
async fn claim(db: &TestDb, relay_id: &str, batch: usize, per_entity: usize) -> Vec<(String, i64)> {
    let relay = Relay::builder(db.connect_options().clone(), NoBroker)
        .relay_id(relay_id)
        .batch_size(batch)
        .events_per_entity(per_entity)
        .crash_at(CrashPoint::AfterClaim)
        .build()
        .expect("relay");
    match relay.run_batch().await {
        Err(Error::Crashed) => {}
        Ok(report) => assert_eq!(report.claimed, 0, "a claim that takes rows stops at the crash point"),
        Err(e) => panic!("claim: {e}"),
    }
    let mut leased: Vec<(String, i64)> = sqlx::query_as(
        "SELECT coalesce(entity_key, '-'), coalesce(seq, 0) FROM outbox_events
         WHERE lease_owner = $1 AND claim_token IS NOT NULL",
    )
    .bind(relay_id)
    .fetch_all(db.pool())
    .await
    .expect("leased rows");
    leased.sort();
    leased
}

/// One connection to `db` with the relay's session settings.
async fn relay_session(db: &TestDb) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect_with(db.connect_options().clone().options(SESSION))
        .await
        .expect("relay session")
}

/// The relay's claim statement in `pool`'s session, bound as the relay binds it for a batch of 500
/// and runs of up to four events, from the start of the queue (see `CLAIM`'s parameters); returns the (entity, seq) of the rows
/// it claimed.
async fn claim_in(pool: &PgPool) -> Vec<(Option<String>, Option<i64>)> {
    let rows = sqlx::query(CLAIM)
        .bind(2000_i64)
        .bind(500_i64)
        .bind("relay-a")
        .bind(Uuid::new_v4())
        .bind(30.0_f64)
        .bind(4_i64)
        .bind(0_i64)
        .fetch_all(pool)
        .await
        .expect("claim");
    rows.iter().map(|r| (r.get("entity_key"), r.get("seq"))).collect()
}

/// The claim's plan on a table the planner knows nothing about (never analyzed), with the dead
/// index entries a busy relay leaves behind: an ordered scan of the queue index, no bitmap scan,
/// no sequential scan; and the claim takes every pending head.
#[tokio::test]
async fn the_claim_walks_the_queue_index_in_order_on_a_table_without_statistics() {
    let db = TestDb::new().await.expect("database");
    // 100 events for each of 50 entities; all but the last of each published.
    sqlx::raw_sql(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
         SELECT gen_random_uuid(), 'order.placed', 1, 'order-' || (g % 50), g / 50 + 1, '\\x7b7d', 'application/json'
         FROM generate_series(0, 4999) g;
         UPDATE outbox_events SET status = 'published', published_at = now() WHERE seq < 100;",
    )
    .execute(db.pool())
    .await
    .expect("fill");
    let pool = relay_session(&db).await;
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {CLAIM}")))
        .bind(2000_i64)
        .bind(500_i64)
        .bind("relay-a")
        .bind(Uuid::new_v4())
        .bind(30.0_f64)
        .bind(4_i64)
        .bind(0_i64)
        .fetch_all(&pool)
        .await
        .expect("explain");
    let plan = plan.join("\n");
    assert!(plan.contains("Index Scan using outbox_events_queue on outbox_events e"), "{plan}");
    assert!(!plan.contains("Bitmap"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
    pool.close().await;

    let heads = claim(&db, "relay-a", 500, 1).await;
    let mut expected: Vec<(String, i64)> = (0..50).map(|n| (format!("order-{n}"), 100)).collect();
    expected.sort();
    assert_eq!(heads, expected);
    db.close().await.expect("drop database");
}

/// The most rows one step of a plan (`EXPLAIN (ANALYZE, FORMAT JSON)`) read: what it returned and
/// what its filters removed, over all its loops.
fn widest_step(node: &serde_json::Value) -> u64 {
    let n = |key: &str| node[key].as_u64().unwrap_or(0);
    let own = (n("Actual Rows") + n("Rows Removed by Filter") + n("Rows Removed by Join Filter")) * n("Actual Loops");
    let children = node["Plans"].as_array().map_or(0, |plans| plans.iter().map(widest_step).max().unwrap_or(0));
    own.max(children)
}

/// A claim prepared and run while the table was empty keeps PostgreSQL's generic plan of an empty
/// table; once 20,000 rows have arrived (without statistics: autovacuum has not run yet) no step of
/// that plan reads more rows than the claim's scan window, and it still claims the first events of
/// every entity.
#[tokio::test]
async fn a_claim_planned_on_an_empty_table_reads_only_its_window_once_the_table_grew() {
    let db = TestDb::new().await.expect("database");
    sqlx::raw_sql("ALTER TABLE outbox_events SET (autovacuum_enabled = off)")
        .execute(db.pool())
        .await
        .expect("autovacuum off");
    let pool = relay_session(&db).await;
    for _ in 0..8 {
        assert!(claim_in(&pool).await.is_empty());
    }
    let (name, generic): (String, i64) = sqlx::query_as(
        "SELECT name, generic_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH scanned AS%'",
    )
    .fetch_one(&pool)
    .await
    .expect("the claim is a prepared statement of this session");
    assert!(generic > 0, "PostgreSQL keeps a generic plan of the claim after five executions");
    // 100 events for each of 200 entities, interleaved in queue order.
    sqlx::raw_sql(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
         SELECT gen_random_uuid(), 'order.placed', 1, 'order-' || (g % 200), g / 200 + 1, '\\x7b7d', 'application/json'
         FROM generate_series(0, 19999) g",
    )
    .execute(db.pool())
    .await
    .expect("fill");

    let mut tx = pool.begin().await.expect("begin");
    let explain =
        format!("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}(2000, 500, 'relay-a', '{}', 30, 4, 0)", Uuid::new_v4());
    let plan: serde_json::Value =
        sqlx::query_scalar(sqlx::AssertSqlSafe(explain)).fetch_one(&mut *tx).await.expect("explain");
    tx.rollback().await.expect("rollback");
    let widest = widest_step(&plan[0]["Plan"]);
    assert!(widest <= 2000, "a step of the claim read {widest} rows:\n{plan:#}");
    assert_eq!(queue_scans(&plan[0]["Plan"]), 1, "only the scan reads the queue index:\n{plan:#}");

    let claimed = claim_in(&pool).await;
    let firsts = claimed.iter().filter(|(_, seq)| *seq == Some(1)).count();
    assert_eq!((claimed.len(), firsts), (500, 200), "the first two or three events of each entity");
    pool.close().await;
    db.close().await.expect("drop database");
}

/// How many steps of a plan read the queue index (`outbox_events_queue`).
fn queue_scans(node: &serde_json::Value) -> usize {
    let own = usize::from(node["Index Name"] == "outbox_events_queue");
    own + node["Plans"].as_array().map_or(0, |plans| plans.iter().map(queue_scans).sum())
}

/// The mark, prepared and run while the table held ten rows, keeps a generic plan that finds its rows
/// by tuple id once the table grew: never by a walk of the queue index, which, while another
/// session holds an old snapshot, holds an entry for every row published since.
#[tokio::test]
async fn a_mark_planned_on_a_nearly_empty_table_finds_its_rows_by_tuple_id() {
    let db = TestDb::new().await.expect("database");
    let fill = "INSERT INTO outbox_events (id, event_type, event_version, payload, content_type)
         SELECT gen_random_uuid(), 'audit.logged', 1, '\\x7b7d', 'application/json' FROM generate_series(1, 10)";
    sqlx::raw_sql(fill).execute(db.pool()).await.expect("a few rows");
    let tids: Vec<String> =
        sqlx::query_scalar("SELECT ctid::text FROM outbox_events").fetch_all(db.pool()).await.expect("tids");
    let pool = relay_session(&db).await;
    for _ in 0..8 {
        sqlx::query(MARK_PUBLISHED).bind(&tids).bind(Uuid::new_v4()).execute(&pool).await.expect("mark");
    }
    sqlx::raw_sql(
        "INSERT INTO outbox_events (id, event_type, event_version, payload, content_type)
         SELECT gen_random_uuid(), 'audit.logged', 1, '\\x7b7d', 'application/json' FROM generate_series(1, 5000)",
    )
    .execute(db.pool())
    .await
    .expect("fill");
    let name: String = sqlx::query_scalar("SELECT name FROM pg_prepared_statements WHERE statement LIKE 'UPDATE%'")
        .fetch_one(&pool)
        .await
        .expect("the mark is a prepared statement of this session");
    let explain = format!("EXPLAIN (FORMAT JSON) EXECUTE {name}('{{\"(0,1)\"}}', '{}')", Uuid::new_v4());
    let plan: serde_json::Value =
        sqlx::query_scalar(sqlx::AssertSqlSafe(explain)).fetch_one(&pool).await.expect("explain");
    assert_eq!(queue_scans(&plan[0]["Plan"]), 0, "{plan:#}");
    assert!(plan.to_string().contains("Tid Scan"), "{plan:#}");
    pool.close().await;
    db.close().await.expect("drop database");
}

/// One claim over every case a head can be in: in flight, behind a quarantined or retrying
/// predecessor, ready, and unordered rows; later rows of every entity stay where they are.
#[tokio::test]
async fn the_claim_takes_ready_heads_and_unordered_rows_only() {
    let db = TestDb::new().await.expect("database");
    // Entities a..e with three events each, interleaved in queue order, and two unordered.
    sqlx::raw_sql(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
         SELECT gen_random_uuid(), 'order.placed', 1, k, n, '\\x7b7d', 'application/json'
         FROM generate_series(1, 3) n, unnest(ARRAY['a', 'b', 'c', 'd', 'e']) k ORDER BY n, k;
         INSERT INTO outbox_events (id, event_type, event_version, payload, content_type)
         SELECT gen_random_uuid(), 'audit.logged', 1, '\\x7b7d', 'application/json' FROM generate_series(1, 2);
         -- a: 1 in flight. b: 1 quarantined. c: 1 waits for a retry. d: 1 published. e: untouched.
         UPDATE outbox_events SET lease_owner = 'relay-b', claim_token = gen_random_uuid(), attempts = 1,
             lease_until = now() + interval '30 seconds' WHERE entity_key = 'a' AND seq = 1;
         UPDATE outbox_events SET status = 'quarantined', quarantined_at = now() WHERE entity_key = 'b' AND seq = 1;
         UPDATE outbox_events SET next_attempt_at = now() + interval '1 hour' WHERE entity_key = 'c' AND seq = 1;
         UPDATE outbox_events SET status = 'published', published_at = now() WHERE entity_key = 'd' AND seq = 1;",
    )
    .execute(db.pool())
    .await
    .expect("fill");

    let got = claim(&db, "relay-a", 500, 1).await;
    assert_eq!(got, [("-".to_owned(), 0), ("-".to_owned(), 0), ("d".to_owned(), 2), ("e".to_owned(), 1)]);

    // The successors of the quarantined and the retrying event were deferred, nothing else.
    let deferred: Vec<(String, i64, bool)> = sqlx::query_as(
        "SELECT entity_key, seq, next_attempt_at = 'infinity' FROM outbox_events
         WHERE status = 'pending' AND next_attempt_at > now() ORDER BY entity_key, seq",
    )
    .fetch_all(db.pool())
    .await
    .expect("deferred");
    assert_eq!(deferred, [("b".to_owned(), 2, true), ("c".to_owned(), 1, false), ("c".to_owned(), 2, false)]);

    // Nothing more is ready until a predecessor is done.
    let again = claim(&db, "relay-c", 500, 1).await;
    assert!(again.is_empty(), "{again:?}");
    db.close().await.expect("drop database");
}

/// A claim takes up to `run` consecutive events of each ready entity, and never a later event
/// without every earlier one: not past a row that is not due, nor past a row another transaction
/// holds locked (an event whose predecessor went to someone else would be published before that
/// predecessor is confirmed).
#[tokio::test]
async fn the_claim_takes_runs_of_consecutive_events_and_never_skips_one() {
    let db = TestDb::new().await.expect("database");
    // Entities a..f with six events each, interleaved in queue order, and two unordered.
    sqlx::raw_sql(
        "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
         SELECT gen_random_uuid(), 'order.placed', 1, k, n, '\\x7b7d', 'application/json'
         FROM generate_series(1, 6) n, unnest(ARRAY['a', 'b', 'c', 'd', 'e', 'f']) k ORDER BY n, k;
         INSERT INTO outbox_events (id, event_type, event_version, payload, content_type)
         SELECT gen_random_uuid(), 'audit.logged', 1, '\\x7b7d', 'application/json' FROM generate_series(1, 2);
         -- a: 1 in flight. b: untouched. c: 1 published (3 locked below). d: 3 waits for a retry.
         -- e: 1 locked below. f: untouched.
         UPDATE outbox_events SET lease_owner = 'relay-b', claim_token = gen_random_uuid(), attempts = 1,
             lease_until = now() + interval '30 seconds' WHERE entity_key = 'a' AND seq = 1;
         UPDATE outbox_events SET status = 'published', published_at = now() WHERE entity_key = 'c' AND seq = 1;
         UPDATE outbox_events SET next_attempt_at = now() + interval '1 hour' WHERE entity_key = 'd' AND seq = 3;",
    )
    .execute(db.pool())
    .await
    .expect("fill");
    // Another relay's claim statement, caught while it holds its row locks.
    let mut other = db.pool().begin().await.expect("begin");
    sqlx::query(
        "SELECT 1 FROM outbox_events WHERE (entity_key = 'c' AND seq = 3) OR (entity_key = 'e' AND seq = 1)
         FOR UPDATE",
    )
    .execute(&mut *other)
    .await
    .expect("lock");

    let got = claim(&db, "relay-a", 500, 4).await;
    let expected: Vec<(String, i64)> = [("-", 0), ("-", 0), ("b", 1), ("b", 2), ("b", 3), ("b", 4), ("c", 2)]
        .into_iter()
        .chain([("d", 1), ("d", 2), ("f", 1), ("f", 2), ("f", 3), ("f", 4)])
        .map(|(k, n)| (k.to_owned(), n))
        .collect();
    assert_eq!(got, expected);

    // Released by the other transaction, e is ready; a batch limit of three cuts its run to its
    // first three events. (c's next event waits behind c 2, claimed above.)
    other.rollback().await.expect("rollback");
    let got = claim(&db, "relay-c", 3, 4).await;
    assert_eq!(got, [("e".to_owned(), 1), ("e".to_owned(), 2), ("e".to_owned(), 3)]);
    db.close().await.expect("drop database");
}

/// The shared buffers the scan of one claim from queue position `low_water` touches, read with
/// `EXPLAIN (ANALYZE, BUFFERS)` in a transaction rolled back after it.
async fn claim_buffers(pool: &PgPool, low_water: i64) -> u64 {
    let mut tx = pool.begin().await.expect("begin");
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {CLAIM}");
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .bind(2000_i64)
        .bind(500_i64)
        .bind("relay-a")
        .bind(Uuid::new_v4())
        .bind(30.0_f64)
        .bind(4_i64)
        .bind(low_water)
        .fetch_one(&mut *tx)
        .await
        .expect("explain");
    tx.rollback().await.expect("rollback");
    scan_buffers(&plan[0]["Plan"]).expect("the claim scans the queue index")
}

/// The shared buffers the claim's scan of the queue index touched, in a plan's `node`.
fn scan_buffers(node: &serde_json::Value) -> Option<u64> {
    if node["Index Name"] == "outbox_events_queue" && node["Alias"] == "e" {
        let n = |key: &str| node[key].as_u64().unwrap_or(0);
        return Some(n("Shared Hit Blocks") + n("Shared Read Blocks"));
    }
    node["Plans"].as_array()?.iter().find_map(scan_buffers)
}

/// While another session holds a snapshot older than 20,000 published events, vacuum cannot remove
/// their entries from the queue index: a claim from the start of the queue walks every one of them,
/// a claim from the low water (the first pending row) touches a few pages, whatever the history.
#[tokio::test]
async fn under_a_held_snapshot_a_claim_from_the_low_water_does_not_walk_the_published_history() {
    let db = TestDb::new().await.expect("database");
    let mut holder = db.pool().begin().await.expect("begin");
    sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM outbox_events")
        .execute(&mut *holder)
        .await
        .expect("hold a snapshot");
    let fill = "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
         SELECT gen_random_uuid(), 'order.placed', 1, 'order-' || (g % 100), g / 100 + 1, '\\x7b7d', 'application/json'
         FROM generate_series(0, 20099) g;
         UPDATE outbox_events SET status = 'published', published_at = now() WHERE seq <= 200;";
    sqlx::raw_sql(fill).execute(db.pool()).await.expect("fill and publish");
    sqlx::raw_sql("VACUUM outbox_events").execute(db.pool()).await.expect("vacuum, which the snapshot holds back");
    let first_pending: i64 = sqlx::query_scalar("SELECT min(position) FROM outbox_events WHERE status = 'pending'")
        .fetch_one(db.pool())
        .await
        .expect("first pending");
    let pool = relay_session(&db).await;
    let from_low_water = claim_buffers(&pool, first_pending).await;
    let from_start = claim_buffers(&pool, 0).await;
    assert!(
        from_start > 300 && from_low_water < 50,
        "buffers touched by the scan of a claim from the start: {from_start}, from the low water: {from_low_water}"
    );
    holder.rollback().await.expect("release the snapshot");
    pool.close().await;
    db.close().await.expect("drop database");
}
