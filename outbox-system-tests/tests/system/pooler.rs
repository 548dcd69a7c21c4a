//! The producer and the inbox behind a real PgBouncer in transaction mode, started by the test on
//! its own port with fewer server connections than clients, so that consecutive transactions of
//! one client land on different server connections. With `persistent_statements(false)` every
//! enqueue and every applied event goes through, the sequences stay gapless and each event is
//! applied once. Without `pgbouncer` installed (`.ci/run` installs it) the test says so and
//! passes.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, Outcome};
use outbox_producer::Outbox;
use outbox_testkit::{TestDb, wait_for};
use outbox_types::{Event, NewEvent};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tower::Layer;

const WRITERS: usize = 8;
const PER_WRITER: usize = 100;
const ENTITIES: usize = 10;

/// A PgBouncer of this test: transaction pooling, any user, two server connections per database.
struct Bouncer {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Bouncer {
    fn start() -> Option<Self> {
        let binary =
            ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"].into_iter().find(|p| std::path::Path::new(p).exists())?;
        if nix_is_root() && !Command::new("id").arg("postgres").output().is_ok_and(|o| o.status.success()) {
            eprintln!("pgbouncer refuses to run as root and there is no user postgres to run it as");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let dir = std::env::temp_dir().join(format!("outbox-pgbouncer-{port}"));
        std::fs::create_dir_all(&dir).expect("pgbouncer dir");
        let ini = format!(
            "[databases]\n* = host=127.0.0.1 port=5432 user=postgres\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = any\npool_mode = transaction\n\
             default_pool_size = 2\nmax_client_conn = 200\nignore_startup_parameters = extra_float_digits\n\
             logfile = {log}\n{prepared}",
            log = dir.join("pgbouncer.log").display(),
            prepared = prepared_statements_off(binary),
        );
        let config = dir.join("pgbouncer.ini");
        std::fs::write(&config, ini).expect("pgbouncer.ini");
        // PgBouncer refuses to run as root; the postgres user must read its files.
        let _ = Command::new("chmod").args(["-R", "a+rwX"]).arg(&dir).status();
        let mut command = Command::new(binary);
        if nix_is_root() {
            command.args(["-u", "postgres"]);
        }
        let child = command.arg(&config).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start pgbouncer");
        Some(Self { child, port, dir })
    }

    fn options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new().host("127.0.0.1").port(self.port).username("postgres").database(database)
    }
}

/// PgBouncer 1.21 and later can track named statements (`max_prepared_statements`, on by default
/// from 1.22): turned off, so that the test proves the unnamed ones, as a pooler without it needs.
fn prepared_statements_off(binary: &str) -> &'static str {
    let version =
        Command::new(binary).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let minor = version.ok().and_then(|v| {
        let numbers = v.split_whitespace().find(|w| w.starts_with("1."))?.to_owned();
        numbers.split('.').nth(1)?.parse::<u32>().ok()
    });
    if minor.is_some_and(|m| m >= 21) { "max_prepared_statements = 0\n" } else { "" }
}

fn nix_is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A pool through the bouncer, waiting until it answers.
async fn pool_through(bouncer: &Bouncer, db: &TestDb) -> sqlx::PgPool {
    let pool = PgPoolOptions::new().max_connections(WRITERS as u32).connect_lazy_with(bouncer.options(db.name()));
    wait_for("PgBouncer to answer", Duration::from_secs(30), || async {
        sqlx::query("SELECT 1").persistent(false).execute(&pool).await.ok()
    })
    .await
    .expect("pgbouncer up");
    pool
}

#[tokio::test]
async fn the_producer_and_the_inbox_work_behind_a_transaction_pooler() {
    let Some(bouncer) = Bouncer::start() else {
        eprintln!("pgbouncer is not installed: the pooler test is skipped (.ci/run installs it)");
        return;
    };
    let db = TestDb::new().await.expect("database (migrated directly, not through the pooler)");
    sqlx::raw_sql("CREATE TABLE applied (event_id uuid PRIMARY KEY, entity text, seq bigint)")
        .execute(db.pool())
        .await
        .expect("applied table");
    let pool = pool_through(&bouncer, &db).await;

    let outbox = Outbox::builder().persistent_statements(false).build();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (pool, outbox) = (pool.clone(), outbox.clone());
        writers.spawn(async move {
            let mut failures = 0;
            for n in 0..PER_WRITER {
                let event = NewEvent::json("item.changed", &serde_json::json!({ "w": w, "n": n })).expect("event");
                let event = event.entity(format!("item-{}", (w + n) % ENTITIES));
                let done: Result<(), Box<dyn std::error::Error + Send + Sync>> = async {
                    let mut tx = pool.begin().await?;
                    outbox.enqueue(&mut *tx, event).await?;
                    tx.commit().await?;
                    Ok(())
                }
                .await;
                if let Err(e) = done {
                    failures += 1;
                    eprintln!("enqueue through the pooler failed: {e}");
                }
            }
            failures
        });
    }
    let failures: usize = writers.join_all().await.into_iter().sum();
    assert_eq!(failures, 0, "every enqueue through the pooler commits");
    let gaps: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY entity_key ORDER BY seq) AS n
                              FROM outbox_events) s WHERE seq <> n",
    )
    .fetch_one(db.pool())
    .await
    .expect("gaps");
    let total: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_events").fetch_one(db.pool()).await.expect("count");
    assert_eq!(
        (total, gaps),
        ((WRITERS * PER_WRITER) as i64, 0),
        "every event written, each entity's sequence gapless"
    );

    apply_through(&pool, &db).await;
    drop(pool);
    drop(bouncer);
    db.close().await.expect("cleanup");
}

async fn record(mut req: InboxRequest) -> Result<InboxRequest, HandlerError> {
    let event = req.event();
    let (id, entity, seq) =
        (event.id, event.entity.as_ref().map(|e| e.key.clone()), event.entity.as_ref().map(|e| e.seq as i64));
    sqlx::query("INSERT INTO applied (event_id, entity, seq) VALUES ($1, $2, $3)")
        .persistent(false)
        .bind(uuid::Uuid::from(id))
        .bind(entity)
        .bind(seq)
        .execute(req.conn())
        .await?;
    Ok(req)
}

/// Applies the written events through the inbox on the pooled connections: two tasks at once,
/// each with half the entities, in batches of one event per entity (the n-th of each), each batch
/// twice: every event applied once, in order.
async fn apply_through(pool: &sqlx::PgPool, db: &TestDb) {
    let layer = InboxLayer::new(pool.clone(), "pooled").persistent_statements(false);
    let service = layer.layer(tower::service_fn(record));
    let rows: Vec<(uuid::Uuid, String, i64)> =
        sqlx::query_as("SELECT id, entity_key, seq FROM outbox_events ORDER BY seq, entity_key")
            .fetch_all(db.pool())
            .await
            .expect("events");
    let mut tasks = tokio::task::JoinSet::new();
    for half in 0..2 {
        let mine: Vec<Event> = rows
            .iter()
            .filter(|(_, key, _)| key.trim_start_matches("item-").parse::<usize>().is_ok_and(|e| e % 2 == half))
            .map(|(id, key, seq)| {
                let event = NewEvent::json("item.changed", &serde_json::json!({})).expect("event");
                let event = event.id((*id).into()).entity(key.clone());
                event.into_event(Some(u64::try_from(*seq).expect("seq")), std::time::SystemTime::now())
            })
            .collect();
        let service = service.clone();
        tasks.spawn(async move {
            // Ordered by sequence, then entity: each run of ENTITIES / 2 holds one event per entity.
            for batch in mine.chunks(ENTITIES / 2) {
                for _ in 0..2 {
                    let outcomes = service.call_batch(batch.to_vec()).await.expect("a batch through the pooler");
                    assert!(outcomes.iter().all(|o| !matches!(o, Outcome::Parked)), "in order: nothing parked");
                }
            }
        });
    }
    tasks.join_all().await;
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM applied").fetch_one(db.pool()).await.expect("applied");
    assert_eq!(applied, (WRITERS * PER_WRITER) as i64, "each event applied once, the repeats dropped");
}
