//! Least privilege, end to end: `outbox grant --apply` on a fresh database gives three new login
//! roles what migrations/roles.sql says; the application enqueues as the producer role, the real
//! `outbox relay` publishes as the relay role (with a clean log), and a consumer applies the
//! events into its business table as the consumer role; each role is refused the tables that are
//! not its own.

use std::time::Duration;

use crate::support::{Running, outbox};
use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, InboxRunner};
use outbox_producer::Outbox;
use outbox_system_tests::count;
use outbox_testkit::{Harness, TestDb, wait_for};
use outbox_types::NewEvent;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};
use tower::Layer;

const WAIT: Duration = Duration::from_secs(90);
/// Events per batch; two batches: one waiting before the relay starts, one sent while it idles.
const EVENTS: usize = 10;
/// Well within the relay's one-minute poll: what arrives sooner came by notification.
const NOTIFIED: Duration = Duration::from_secs(40);

/// Three login roles named with a random suffix, dropped when the guard goes, even if the test
/// failed: their privileges in the test database first (while it exists), then the roles.
struct Roles {
    relay: String,
    consumer: String,
    producer: String,
    admin: PgConnectOptions,
}

impl Roles {
    async fn create(db: &TestDb) -> Self {
        let suffix = outbox_testkit::unique_suffix();
        let roles = Self {
            relay: format!("outbox_t_relay_{suffix}"),
            consumer: format!("outbox_t_consumer_{suffix}"),
            producer: format!("outbox_t_producer_{suffix}"),
            admin: db.connect_options().clone(),
        };
        for name in roles.names() {
            execute(db.pool(), &format!("CREATE ROLE \"{name}\" LOGIN")).await;
        }
        roles
    }

    fn names(&self) -> [&str; 3] {
        [&self.relay, &self.consumer, &self.producer]
    }

    /// The test database's connection options, as `role`.
    fn options(&self, role: &str) -> PgConnectOptions {
        self.admin.clone().username(role)
    }

    async fn pool(&self, role: &str) -> PgPool {
        PgPoolOptions::new().max_connections(4).connect_with(self.options(role)).await.expect("pool")
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let names = self.names().map(str::to_owned).join("\", \"");
        let admin = self.admin.clone();
        // Drop runs inside the test's runtime, which cannot be blocked on: a thread of its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                // Gone already if the test closed its database.
                if let Ok(mut conn) = PgConnection::connect_with(&admin).await {
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP OWNED BY \"{names}\"")))
                        .execute(&mut conn)
                        .await;
                    let _ = conn.close().await;
                }
                let mut conn = PgConnection::connect_with(&admin.database("postgres")).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP ROLE IF EXISTS \"{names}\"")))
                    .execute(&mut conn)
                    .await?;
                conn.close().await
            })
        });
        if let Ok(Err(e)) = dropped.join() {
            eprintln!("could not drop the test roles: {e}");
        }
    }
}

async fn execute(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Asserts that `sql`, run as the pool's role, is refused for want of a privilege.
async fn assert_denied(pool: &PgPool, sql: &str) {
    match sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(pool).await {
        Err(sqlx::Error::Database(e)) => {
            assert_eq!(e.code().as_deref(), Some("42501"), "{sql}: {e}");
            assert!(e.message().contains("permission denied"), "{sql}: {e}");
        }
        other => panic!("{sql}: expected permission denied, got {other:?}"),
    }
}

/// `outbox grant --apply` with the roles' names, as the owner of the tables.
async fn grant(db: &TestDb, roles: &Roles) {
    let mut cmd = outbox();
    cmd.args(["grant", "--apply", "--relay-role", &roles.relay, "--consumer-role", &roles.consumer])
        .args(["--producer-role", &roles.producer])
        .env("DATABASE_URL", db.url());
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run outbox grant")).await.expect("join");
    assert!(out.status.success(), "outbox grant --apply: {}", String::from_utf8_lossy(&out.stderr));
}

/// `EVENTS` events of as many orders, enqueued in one transaction of the producer role.
async fn enqueue(producer: &PgPool, batch: usize) {
    let events = (0..EVENTS).map(|i| {
        NewEvent::json("order.placed", &serde_json::json!({ "batch": batch, "i": i }))
            .expect("json")
            .entity(format!("order-{batch}-{i}"))
            .idempotency_key(format!("request-{batch}-{i}"))
    });
    let mut tx = producer.begin().await.expect("begin");
    Outbox::new().enqueue_many(&mut *tx, events).await.expect("enqueue as the producer role");
    tx.commit().await.expect("commit");
}

/// Retention, as the relay role, deletes the `2 * EVENTS` published rows and keeps each entity's
/// last sequence; the producer role's next event of an entity whose rows are all gone continues
/// after it.
async fn retention_continues_each_entity(relay: &PgPool, producer: &PgPool, owner: &PgPool) {
    let retention = outbox_ops::Retention::builder(Duration::ZERO).build().expect("retention");
    assert_eq!(retention.run(relay).await.expect("retention as the relay role"), 2 * EVENTS as u64);
    assert_eq!(count(owner, "SELECT count(*) FROM outbox_events").await, 0);
    let mut tx = producer.begin().await.expect("begin");
    let next = NewEvent::json("order.placed", &0).expect("json").entity("order-1-0");
    let id = Outbox::new().enqueue(&mut *tx, next).await.expect("enqueue after retention");
    tx.commit().await.expect("commit");
    let seq: i64 = sqlx::query_scalar("SELECT seq FROM outbox_events WHERE id = $1")
        .bind(id.as_uuid())
        .fetch_one(owner)
        .await
        .expect("the new event");
    assert_eq!(seq, 2, "order-1-0 had sequence 1, deleted by retention");
}

/// A batch with a fresh key and a taken one, as the producer role: refused, committed anyway,
/// it writes no event and leaves the fresh key free.
async fn refused_batch_gives_back_its_keys(producer: &PgPool, owner: &PgPool) {
    let batch = ["request-fresh", "request-2-1"]
        .map(|key| NewEvent::json("order.placed", &1).expect("json").idempotency_key(key));
    let mut tx = producer.begin().await.expect("begin");
    let refused = Outbox::new().enqueue_many(&mut *tx, batch).await;
    assert!(matches!(refused, Err(outbox_producer::Error::AlreadyEnqueued { index: Some(1), .. })), "{refused:?}");
    tx.commit().await.expect("commit");
    let key = "SELECT count(*) FROM outbox_idempotency_keys WHERE idempotency_key = 'request-fresh'";
    assert_eq!(count(owner, key).await, 0, "the fresh key given back");
    assert_eq!(count(owner, "SELECT count(*) FROM outbox_events").await, 2 * EVENTS as i64, "no event written");
}

/// The consumer's handler: one shipment per order, in the inbox's transaction.
async fn ship(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let entity = req.event().entity.clone().ok_or_else(|| HandlerError::permanent("no entity"))?;
    sqlx::query("INSERT INTO shipments (order_key) VALUES ($1)")
        .bind(&entity.key)
        .execute(req.conn())
        .await
        .map_err(|e| HandlerError::transient(e.to_string()))?;
    Ok(req)
}

fn relay(h: &Harness, roles: &Roles) -> std::process::Command {
    let url = roles.options(&roles.relay).to_url_lossy().to_string();
    let mut cmd = outbox();
    cmd.arg("relay")
        .args(["--exchange", h.exchange(), "--no-declare-exchange", "--vacuum-after-rows", "0"])
        .args(["--gauge-interval-secs", "0.2", "--poll-interval-ms", "60000"])
        .env("RUST_LOG", "info,outbox_relayer=debug")
        .env("DATABASE_URL", url)
        .env("AMQP_URL", outbox_testkit::amqp_url());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_does_its_part_and_nothing_else() {
    let h = Harness::builder().defer_relay().start().await.expect("harness");
    let roles = Roles::create(h.db()).await;
    execute(h.pool(), "CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL)").await;
    execute(h.pool(), "CREATE TABLE shipments (id bigserial PRIMARY KEY, order_key text NOT NULL)").await;
    grant(h.db(), &roles).await;
    // Again, after a privilege too many: idempotent, and it takes that one back.
    execute(h.pool(), &format!("GRANT INSERT ON outbox_events TO \"{}\"", roles.relay)).await;
    grant(h.db(), &roles).await;
    let business = format!(
        "GRANT SELECT, INSERT ON shipments TO \"{0}\"; GRANT USAGE ON SEQUENCE shipments_id_seq TO \"{0}\"",
        roles.consumer
    );
    execute(h.pool(), &business).await;
    // The relay sees how old other roles' snapshots are (outbox_oldest_snapshot_seconds).
    let monitors: bool = sqlx::query_scalar("SELECT pg_has_role($1, 'pg_read_all_stats', 'MEMBER')")
        .bind(&roles.relay)
        .fetch_one(h.pool())
        .await
        .expect("pg_has_role");
    assert!(monitors, "the relay role is a member of pg_read_all_stats");

    let producer = roles.pool(&roles.producer).await;
    enqueue(&producer, 1).await;
    assert_denied(&producer, "SELECT count(*) FROM outbox_events").await;

    let running = Running::spawn(relay(&h, &roles));
    h.recorder().wait_for_count(EVENTS, WAIT).await.expect("the waiting batch published by the relay role");
    // Once the relay waits for a notification (it polls only every minute), the producer's
    // commit must wake it.
    wait_for("the relay to wait for notifications", WAIT, || async {
        let n = count(h.pool(), "SELECT outbox_relays_waiting()").await;
        (n > 0).then_some(())
    })
    .await
    .expect("registered as a listener");
    enqueue(&producer, 2).await;
    let again = NewEvent::json("order.placed", &1).expect("json").idempotency_key("request-2-0");
    let mut tx = producer.begin().await.expect("begin");
    let refused = Outbox::new().enqueue(&mut *tx, again).await;
    assert!(matches!(refused, Err(outbox_producer::Error::AlreadyEnqueued { .. })), "{refused:?}");
    tx.commit().await.expect("commit");
    refused_batch_gives_back_its_keys(&producer, h.pool()).await;
    h.recorder().wait_for_count(2 * EVENTS, NOTIFIED).await.expect("the second batch published on notification");

    let relay_pool = roles.pool(&roles.relay).await;
    assert_denied(&relay_pool, "SELECT * FROM orders").await;
    assert_denied(&relay_pool, "SELECT * FROM inbox_events").await;
    assert_denied(&relay_pool, "INSERT INTO outbox_events (id, event_type, event_version, payload, content_type) VALUES (gen_random_uuid(), 'x', 1, '', 'x')").await;

    let consumer = roles.pool(&roles.consumer).await;
    let service = InboxLayer::new(consumer.clone(), "shipping").layer(tower::service_fn(ship));
    let runner = InboxRunner::builder(outbox_testkit::amqp_url(), service)
        .topology(h.topology())
        .build()
        .expect("runner")
        .spawn();
    wait_for("every order shipped by the consumer role", WAIT, || async {
        outbox_testkit::equal(count(h.pool(), "SELECT count(*) FROM shipments").await, 2 * EVENTS as i64)
    })
    .await
    .expect("shipments");
    assert_eq!(
        count(h.pool(), "SELECT count(*) FROM inbox_events WHERE status = 'processed'").await,
        2 * EVENTS as i64
    );
    assert_denied(&consumer, "SELECT * FROM outbox_events").await;
    assert_denied(&consumer, "SELECT * FROM orders").await;
    runner.shutdown().await.expect("consumer shutdown");
    retention_continues_each_entity(&relay_pool, &producer, h.pool()).await;

    running.signal("-TERM");
    let (status, lines) = running.finish(WAIT).await;
    let log = lines.join("\n");
    assert_eq!(status.code(), Some(0), "clean exit on SIGTERM:\n{log}");
    assert!(
        !lines.iter().any(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.contains("permission denied")),
        "a clean log under least privilege:\n{log}"
    );
    for pool in [producer, relay_pool, consumer] {
        pool.close().await;
    }
    h.close().await.expect("cleanup");
}
