//! `outbox relay` over fifty databases on the shared PostgreSQL (whose `max_connections` is the
//! default 100), two processes sharing them. Four databases are faulty for a while: one
//! unreachable (a proxy in front of it refuses connections), one not migrated, one whose outbox
//! table another session holds locked, one whose relay role has no privileges; the other 46's
//! events are all published once, in per-entity order, while the faults last; the four are
//! drained once repaired.
//! Then one process is killed and the other takes its databases over. The connections the fleet
//! holds are counted throughout. Its own binary: it takes half the server's connections.

#[path = "it/support.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_producer::Outbox;
use outbox_system_tests::Load;
use outbox_system_tests::sizes::FLEET_PER_DATABASE;
use outbox_testkit::{ChaosProxy, Recorder, TestBroker, wait_for};
use outbox_types::NewEvent;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use support::{Running, closed_port, http_get, sample};
use uuid::Uuid;

const DATABASES: usize = 50;
/// The database behind the proxy, the one left unmigrated, the one whose outbox table is locked,
/// and the one listed with a role that has no privileges on it.
const UNREACHABLE: usize = 13;
const UNMIGRATED: usize = 37;
const LOCKED: usize = 24;
const UNPRIVILEGED: usize = 42;
const FAULTY: [usize; 4] = [UNREACHABLE, UNMIGRATED, LOCKED, UNPRIVILEGED];
const WAIT: Duration = Duration::from_secs(180);

/// The fifty databases, created for the test and dropped after it.
struct Databases {
    admin: PgConnectOptions,
    prefix: String,
}

impl Databases {
    async fn create() -> Self {
        let admin: PgConnectOptions = admin_url().parse().expect("admin URL");
        let prefix = format!("outbox_fleet_{}", outbox_testkit::unique_suffix());
        let mut conn = PgConnection::connect_with(&admin).await.expect("admin connection");
        let template = format!("{prefix}_template");
        execute(&mut conn, &format!("CREATE DATABASE \"{template}\"")).await;
        let pool = sqlx::PgPool::connect_with(admin.clone().database(&template)).await.expect("template pool");
        outbox_producer::migrate(&pool).await.expect("migrate the template");
        pool.close().await;
        for i in 0..DATABASES {
            let from = if i == UNMIGRATED { "template0".to_owned() } else { template.clone() };
            execute(&mut conn, &format!("CREATE DATABASE \"{prefix}_{i}\" TEMPLATE \"{from}\"")).await;
        }
        execute(&mut conn, &format!("CREATE ROLE \"{prefix}_relay\" LOGIN")).await;
        Self { admin, prefix }
    }

    /// The login role of the unprivileged database's relay (the others' relays log in as the
    /// test's superuser), and the roles `outbox grant` creates beside it.
    fn role(&self, of: &str) -> String {
        format!("{}_{of}", self.prefix)
    }

    fn options(&self, i: usize) -> PgConnectOptions {
        self.admin.clone().database(&format!("{}_{i}", self.prefix))
    }

    async fn drop_all(admin: PgConnectOptions, prefix: String) {
        let mut conn = PgConnection::connect_with(&admin).await.expect("admin connection");
        for i in (0..DATABASES).map(|i| i.to_string()).chain(["template".to_owned()]) {
            execute(&mut conn, &format!("DROP DATABASE IF EXISTS \"{prefix}_{i}\" WITH (FORCE)")).await;
        }
        for role in ["relay", "consumer", "producer"] {
            execute(&mut conn, &format!("DROP ROLE IF EXISTS \"{prefix}_{role}\"")).await;
        }
    }
}

impl Drop for Databases {
    /// Drops the databases, whether the test passed or not: on a thread of its own, since the
    /// test's runtime cannot be blocked on.
    fn drop(&mut self) {
        let (admin, prefix) = (self.admin.clone(), std::mem::take(&mut self.prefix));
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(Self::drop_all(admin, prefix));
        });
        let _ = dropped.join();
    }
}

/// The two tests of this binary each take half the server's connections: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn admin_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

async fn execute(conn: &mut PgConnection, sql: &str) {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(conn).await.expect(sql);
}

/// Commits `load` in database `i` (entities `d<i>-e<n>`, so that no two databases share one), in
/// one transaction on a connection of its own; the ids.
async fn enqueue(options: &PgConnectOptions, i: usize, load: Load, wave: usize) -> Vec<Uuid> {
    let mut conn = PgConnection::connect_with(options).await.expect("connect to enqueue");
    let events = (0..load.per_entity).flat_map(|round| {
        (0..load.entities).map(move |e| {
            NewEvent::json("tenant.changed", &serde_json::json!({ "wave": wave, "round": round }))
                .expect("payload")
                .entity(format!("d{i}-e{e}"))
        })
    });
    let mut tx = conn.begin().await.expect("begin");
    let ids = Outbox::new().enqueue_many(&mut tx, events).await.expect("enqueue");
    tx.commit().await.expect("commit");
    conn.close().await.expect("close");
    ids.into_iter().map(|id| *id.as_uuid()).collect()
}

/// Waits until no database holds an event still to be published: every outcome is recorded.
async fn recorded(databases: &Databases) {
    wait_for("every outcome recorded in the fifty databases", WAIT, || async {
        for i in 0..DATABASES {
            let mut conn = PgConnection::connect_with(&databases.options(i)).await.ok()?;
            let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'pending'")
                .fetch_one(&mut conn)
                .await
                .ok()?;
            let _ = conn.close().await;
            if pending > 0 {
                return None;
            }
        }
        Some(())
    })
    .await
    .expect("recorded");
}

/// The list file: every database by name, the unreachable one through the proxy, the
/// unprivileged one with its role.
fn list(databases: &Databases, proxy: &ChaosProxy) -> String {
    (0..DATABASES)
        .map(|i| {
            let mut options = databases.options(i);
            if i == UNREACHABLE {
                options = options.host(&proxy.addr().ip().to_string()).port(proxy.addr().port());
            }
            if i == UNPRIVILEGED {
                options = options.username(&databases.role("relay"));
            }
            format!("tenant-{i} {}\n", options.to_url_lossy())
        })
        .collect()
}

fn relay(file: &std::path::Path, exchange: &str, port: u16) -> Running {
    let mut cmd = support::outbox();
    cmd.arg("relay")
        .args(["--exchange", exchange, "--no-declare-exchange", "--databases-file"])
        .arg(file)
        .args(["--fleet-database", "tenant-0"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("AMQP_URL", outbox_testkit::amqp_url())
        .env("RUST_LOG", "info");
    Running::spawn(cmd)
}

/// `outbox grant --apply` on the unprivileged database: its relay's role gets what it needs.
async fn grant(databases: &Databases) {
    let mut cmd = support::outbox();
    cmd.args(["grant", "--apply", "--relay-role", &databases.role("relay")])
        .args(["--consumer-role", &databases.role("consumer"), "--producer-role", &databases.role("producer")])
        .env("DATABASE_URL", databases.options(UNPRIVILEGED).to_url_lossy().to_string());
    let (status, lines, _) = support::run(cmd, Duration::from_secs(60)).await;
    assert!(status.success(), "outbox grant: {lines:#?}");
}

/// The sample `name` on the `/metrics` page of the process serving `port`.
async fn failing(port: u16, name: &str) -> Option<f64> {
    let (_, page) = http_get(port, "/metrics").await?;
    sample(&page, name)
}

/// How many databases the process serving `port` relays, once it saw `members` processes.
async fn relayed(port: u16, members: f64) -> Option<u64> {
    let (_, page) = http_get(port, "/metrics").await?;
    (sample(&page, "outbox_fleet_members")? == members)
        .then_some(sample(&page, "outbox_fleet_databases_relayed")? as u64)
}

/// Connections to the databases named `<prefix>_...` now, on the whole server.
async fn connections(prefix: &str, conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname LIKE $1 || '\\_%'")
        .bind(prefix)
        .fetch_one(conn)
        .await
        .expect("count connections")
}

/// The most connections to the fleet's databases seen in each phase of the test, sampled every
/// 100 ms.
#[derive(Clone, Default)]
struct Connections {
    phase: Arc<Mutex<&'static str>>,
    most: Arc<Mutex<Vec<(&'static str, i64)>>>,
}

impl Connections {
    fn sample(&self, databases: &Databases) -> tokio::task::JoinHandle<()> {
        let (admin, prefix, this) = (databases.admin.clone(), databases.prefix.clone(), self.clone());
        tokio::spawn(async move {
            let mut conn = PgConnection::connect_with(&admin).await.expect("admin connection");
            loop {
                let now = connections(&prefix, &mut conn).await;
                this.record(now);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    fn record(&self, now: i64) {
        let phase = *self.phase.lock().expect("phase");
        let mut most = self.most.lock().expect("most");
        match most.iter_mut().find(|(p, _)| *p == phase) {
            Some((_, n)) => *n = (*n).max(now),
            None => most.push((phase, now)),
        }
    }

    fn enter(&self, phase: &'static str) {
        *self.phase.lock().expect("phase") = phase;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_databases_two_relays_a_fault_stalls_only_its_own_database() {
    fleet(FLEET_PER_DATABASE.fast).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long tier"]
async fn fifty_databases_two_relays_a_fault_stalls_only_its_own_database_long_tier() {
    fleet(FLEET_PER_DATABASE.long).await;
}

async fn fleet(load: Load) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let databases = Databases::create().await;
    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("tenants", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue = broker.declare_queue("all").await.expect("queue");
    broker.bind(&queue, &exchange, "#").await.expect("bind");
    let recorder = Recorder::start(&queue).await.expect("recorder");
    let upstream = format!("{}:{}", databases.admin.get_host(), databases.admin.get_port());
    let proxy = ChaosProxy::start(upstream.parse().expect("server address")).await.expect("proxy");
    proxy.refuse();
    let dir = std::env::temp_dir().join(format!("outbox-fleet-{}", outbox_testkit::unique_suffix()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("databases");
    std::fs::write(&file, list(&databases, &proxy)).expect("write the list");
    // The locked database's events are committed before the relays start, then another session
    // takes the table's strongest lock and holds it until the repair.
    let locked = enqueue(&databases.options(LOCKED), LOCKED, load, 1).await;
    let mut locker = PgConnection::connect_with(&databases.options(LOCKED)).await.expect("connect the locker");
    execute(&mut locker, "BEGIN").await;
    execute(&mut locker, "LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE").await;
    let connections = Connections::default();
    connections.enter("two processes start");
    let sampler = connections.sample(&databases);

    // Two processes; both must see each other and share the fifty before events come.
    let (port_a, port_b) = (closed_port(), closed_port());
    let a = relay(&file, &exchange, port_a);
    let mut b = relay(&file, &exchange, port_b);
    let shares = wait_for("two processes sharing the fifty databases", WAIT, || async {
        let (x, y) = (relayed(port_a, 2.0).await?, relayed(port_b, 2.0).await?);
        (x + y == DATABASES as u64 && x > 0 && y > 0).then_some((x, y))
    })
    .await
    .expect("shared");

    // The first wave, the four faults in place: the 46 others drain completely.
    connections.enter("the first wave");
    let healthy: Vec<usize> = (0..DATABASES).filter(|i| !FAULTY.contains(i)).collect();
    let mut first = Vec::new();
    for &i in &healthy {
        first.extend(enqueue(&databases.options(i), i, load, 1).await);
    }
    let mut stuck = enqueue(&databases.options(UNREACHABLE), UNREACHABLE, load, 1).await;
    stuck.extend(enqueue(&databases.options(UNPRIVILEGED), UNPRIVILEGED, load, 1).await);
    stuck.extend(&locked);
    recorder.wait_all_delivered(first.iter().copied(), WAIT).await.expect("the 46 healthy databases drained");
    assert!(
        stuck.iter().all(|id| !recorder.ids().contains(id)),
        "nothing of the unreachable, locked or unprivileged databases went out while they were"
    );
    // Each faulty database is reported failing by the process that relays it: the locked one too,
    // once its claims give up waiting for the lock.
    for i in FAULTY {
        let name = format!("outbox_fleet_database_failing{{database=\"tenant-{i}\"}}");
        wait_for(&format!("tenant-{i} reported failing"), WAIT, || async {
            let (x, y) = (failing(port_a, &name).await, failing(port_b, &name).await);
            (x == Some(1.0) || y == Some(1.0)).then_some(())
        })
        .await
        .expect("a faulty database reported");
    }

    // Repaired: the proxy heals, the lock goes, the relay's role gets its privileges (`outbox
    // grant`), the unmigrated database is migrated and gets its events.
    connections.enter("repaired");
    proxy.heal();
    execute(&mut locker, "ROLLBACK").await;
    locker.close().await.expect("close the locker");
    grant(&databases).await;
    let pool = sqlx::PgPool::connect_with(databases.options(UNMIGRATED)).await.expect("pool");
    outbox_producer::migrate(&pool).await.expect("migrate the repaired database");
    pool.close().await;
    let repaired = enqueue(&databases.options(UNMIGRATED), UNMIGRATED, load, 1).await;
    let both: Vec<Uuid> = stuck.iter().chain(&repaired).copied().collect();
    recorder.wait_all_delivered(both.iter().copied(), WAIT).await.expect("the repaired databases drained");

    // One process killed, once every outcome is recorded (a process killed between a confirm and
    // its record has the event published again: at least once, by design, and not this test's
    // subject): the other takes its databases and publishes the second wave of all.
    recorded(&databases).await;
    connections.enter("a process killed");
    let b_lines = b.lines();
    b.child.kill().expect("kill");
    let _ = b.child.wait();
    wait_for("one process relaying all fifty", WAIT, || async {
        (relayed(port_a, 1.0).await? == DATABASES as u64).then_some(())
    })
    .await
    .expect("taken over");
    connections.enter("the second wave");
    let mut second = Vec::new();
    for i in 0..DATABASES {
        second.extend(enqueue(&databases.options(i), i, load, 2).await);
    }
    recorder.wait_all_delivered(second.iter().copied(), WAIT).await.expect("the second wave drained");

    let total = first.len() + both.len() + second.len();
    let duplicates = recorder.duplicates();
    let warnings: Vec<String> =
        a.lines().into_iter().filter(|l| l.contains("WARN") || l.contains("ERROR")).take(20).collect();
    assert_eq!(
        recorder.count(),
        total,
        "every event once: {} duplicated; the first warnings: {warnings:#?}",
        duplicates.len()
    );
    recorder.in_entity_order().expect("per-entity order in every database");
    sampler.abort();
    let most = connections.most.lock().expect("most").clone();
    eprintln!("fleet: shares {shares:?}, {total} events, the most connections to the 50 databases: {most:?}");
    // At the start, a process that registered late finds the other relaying everything, and the
    // handover overlaps for a moment: bounded, not 1 per database.
    assert!(
        most.iter().all(|(phase, n)| *n <= 60 || (*phase == "two processes start" && *n <= 80)),
        "the fleet held more connections than 1 per database and 1 per process: {most:?}"
    );

    a.signal("-TERM");
    let (status, lines) = a.finish(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}: {lines:?}");
    let faults: Vec<&String> =
        lines.iter().chain(&b_lines).filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    let names: Vec<String> = FAULTY.iter().map(|i| format!("\"tenant-{i}\"")).collect();
    for name in &names {
        assert!(
            faults.iter().any(|l| l.contains(name.as_str())),
            "{name} is faulty and no warning says so: {faults:#?}"
        );
        let resumed =
            lines.iter().chain(&b_lines).any(|l| l.contains(name.as_str()) && l.contains("the database answers again"));
        assert!(resumed, "{name} was repaired and no line says that its claims resumed");
        let first = faults.iter().find(|l| l.contains(name.as_str()));
        eprintln!(
            "fleet: {name}: {} warnings, the first: {first:?}",
            faults.iter().filter(|l| l.contains(name.as_str())).count()
        );
    }
    assert!(
        faults.iter().all(|l| names.iter().any(|n| l.contains(n.as_str())) || l.contains("members")),
        "every warning names a faulty database: {faults:?}"
    );
    // A fault is reported, not repeated at every retry: each relay says each trouble once.
    let mut said = std::collections::BTreeMap::<(&str, &str), usize>::new();
    for line in &faults {
        if let (Some(relay), Some(message)) = (field(line, "relay_id"), message(line)) {
            *said.entry((relay, message)).or_default() += 1;
        }
    }
    assert!(!said.is_empty() && said.values().all(|n| *n == 1), "a relay repeated a warning: {said:#?}");
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
    drop(recorder);
    broker.close().await.expect("broker cleanup");
    drop(databases);
}

/// The value of the field `name` of a log line's span (`relay_id=relay-1-ab12`).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = &line[line.find(&format!("{name}="))? + name.len() + 1..];
    Some(&rest[..rest.find([' ', '}']).unwrap_or(rest.len())])
}

/// The message of a log line: after its target (`outbox_relayer::relay::tasks: `), before its
/// first field (` error=...`).
fn message(line: &str) -> Option<&str> {
    let rest = &line[line.find("outbox_relayer::")?..];
    let rest = &rest[rest.find(": ")? + 2..];
    let is_field = |w: &str| {
        w.split_once('=').is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
    };
    let end = rest.match_indices(' ').map(|(i, _)| i).find(|&i| is_field(&rest[i + 1..])).unwrap_or(rest.len());
    Some(&rest[..end])
}
