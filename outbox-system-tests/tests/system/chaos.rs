//! The chaos soak. A producer writes events over many entities, each with its business change in
//! the same transaction, while relay processes (two or more at once) are SIGKILLed and restarted,
//! the AMQP connections of relays and consumer are cut through a [`ChaosProxy`], the PostgreSQL
//! backends of relays and consumer are terminated, and the consumer process dies between a
//! handler's commit and its ack. After healing and draining: no event lost, no effect applied
//! twice, no entity applied out of order, and the reconciliation of business changes, outbox,
//! broker and inbox is clean.
//!
//! ```text
//! cargo test -p outbox-system-tests --test system chaos -- --nocapture
//! OUTBOX_CHAOS_EVENTS=100000 OUTBOX_CHAOS_ENTITIES=1000 OUTBOX_CHAOS_KILLS=10 \
//!   cargo test --release -p outbox-system-tests --test system chaos -- --ignored --nocapture
//! ```
//!
//! Sizes: by tier from `outbox_system_tests::sizes::CHAOS` (fast: 3,000 events over 100
//! entities, 2 faults of each kind; long: 10,000 over 200, 3), each overridden by a variable:
//! `OUTBOX_CHAOS_EVENTS`, `OUTBOX_CHAOS_ENTITIES`, `OUTBOX_CHAOS_KILLS` (faults of each kind), `OUTBOX_CHAOS_RELAYS` (relay processes at once, 2),
//! `OUTBOX_CHAOS_WRITERS` (producer tasks, 16), `OUTBOX_CHAOS_SEED` (the fault schedule and the
//! producer's choices; random by default and printed), `OUTBOX_CHAOS_LOG` (`RUST_LOG` of the child
//! processes, default `error,lapin=off`: lapin reports every cut connection as an error).
//!
//! The faults are placed at random points of the consumer's progress (2 % to 70 % of the events
//! applied), so they land while the producer writes and while the backlog drains, whatever the
//! machine's speed. Each fault is checked to have happened (a killed relay exited, a crashed
//! consumer exited with the crash point's code, backends were terminated).

use std::collections::HashMap;
use std::process::{ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use outbox_producer::Outbox;
use outbox_system_tests::{count, sizes};
use outbox_testkit::{ChaosProxy, Reconciliation, Recorder, RecorderDeliveries, TestBroker, TestDb, wait_for};
use outbox_types::NewEvent;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use uuid::Uuid;

/// Inbox consumer name of the soak's consumer.
const CONSUMER: &str = "chaos";
/// Exit code of the consumer process at its crash point (see `src/bin/outbox-chaos-consumer.rs`).
const CRASHED: i32 = 3;

fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name} must be a number")),
    }
}

/// How big the soak is.
#[derive(Debug, Clone, Copy)]
struct Size {
    events: u64,
    entities: i64,
    kills: usize,
    relays: usize,
    writers: u64,
    seed: u64,
}

impl Size {
    /// The tier's size, each field overridden by its variable if set.
    fn from_env(tier: sizes::Chaos) -> Self {
        Self {
            events: env_or("OUTBOX_CHAOS_EVENTS", tier.events),
            entities: env_or("OUTBOX_CHAOS_ENTITIES", tier.entities).max(1),
            kills: env_or("OUTBOX_CHAOS_KILLS", tier.kills),
            relays: env_or("OUTBOX_CHAOS_RELAYS", 2).max(2),
            writers: env_or("OUTBOX_CHAOS_WRITERS", 16).max(1),
            seed: env_or("OUTBOX_CHAOS_SEED", rand::rng().random()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Fault {
    /// SIGKILL one relay process, start a new one.
    RelayKill,
    /// Cut every AMQP connection through the proxy (sometimes refusing new ones for a moment).
    AmqpCut,
    /// `pg_terminate_backend` every backend of the relays and the consumer.
    PgTerminate,
    /// Kill the consumer process between a handler's commit and the ack, start a new one.
    ConsumerCrash,
}

const FAULTS: [Fault; 4] = [Fault::RelayKill, Fault::AmqpCut, Fault::PgTerminate, Fault::ConsumerCrash];

/// The runner counts one consumer process printed last (`stats applied=.. duplicates=.. ...`).
#[derive(Debug, Clone, Copy, Default)]
struct ConsumerStats {
    applied: u64,
    duplicates: u64,
    stale: u64,
    parked: u64,
    retried: u64,
    dead_lettered: u64,
}

impl ConsumerStats {
    fn parse(line: &str) -> Option<Self> {
        let mut s = Self::default();
        for field in line.strip_prefix("stats ")?.split_whitespace() {
            let (name, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            match name {
                "applied" => s.applied = value,
                "duplicates" => s.duplicates = value,
                "stale" => s.stale = value,
                "parked" => s.parked = value,
                "retried" => s.retried = value,
                "dead_lettered" => s.dead_lettered = value,
                _ => {}
            }
        }
        Some(s)
    }

    fn add(self, o: Self) -> Self {
        Self {
            applied: self.applied + o.applied,
            duplicates: self.duplicates + o.duplicates,
            stale: self.stale + o.stale,
            parked: self.parked + o.parked,
            retried: self.retried + o.retried,
            dead_lettered: self.dead_lettered + o.dead_lettered,
        }
    }
}

/// Starts the child processes: relays on the producer's database, the consumer on its own
/// database, all speaking AMQP through the proxy.
struct Spawner {
    prefix: String,
    producer_url: String,
    consumer_url: String,
    amqp_url: String,
    exchange: String,
    queue: String,
    log: String,
    spawned: u64,
    /// The last counts of every consumer process ever started (`None` until its first line,
    /// printed once its signal handlers are installed).
    stats: Arc<Mutex<Vec<Option<ConsumerStats>>>>,
}

impl Spawner {
    fn name(&mut self, role: &str) -> String {
        self.spawned += 1;
        format!("{}-{role}-{}", self.prefix, self.spawned)
    }

    fn spawn_relay(&mut self) -> Child {
        let name = self.name("relay");
        Command::new(env!("CARGO_BIN_EXE_outbox-chaos-relay"))
            .env("DATABASE_URL", &self.producer_url)
            .env("AMQP_URL", &self.amqp_url)
            .env("CHAOS_NAME", name)
            .env("CHAOS_EXCHANGE", &self.exchange)
            .env("RUST_LOG", &self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn outbox-chaos-relay")
    }

    /// The process and its slot in `stats`.
    fn spawn_consumer(&mut self) -> (Child, usize) {
        let name = self.name("consumer");
        let mut child = Command::new(env!("CARGO_BIN_EXE_outbox-chaos-consumer"))
            .env("DATABASE_URL", &self.consumer_url)
            .env("AMQP_URL", &self.amqp_url)
            .env("CHAOS_NAME", name)
            .env("CHAOS_QUEUE", &self.queue)
            .env("CHAOS_CONSUMER", CONSUMER)
            .env("RUST_LOG", &self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn outbox-chaos-consumer");
        let stdout = child.stdout.take().expect("piped stdout");
        let stats = self.stats.clone();
        let slot = {
            let mut all = stats.lock().expect("stats");
            all.push(None);
            all.len() - 1
        };
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(s) = ConsumerStats::parse(&line) {
                    stats.lock().expect("stats")[slot] = Some(s);
                }
            }
        });
        (child, slot)
    }

    fn consumer_ready(&self, slot: usize) -> bool {
        self.stats.lock().expect("stats")[slot].is_some()
    }
}

/// The running processes.
struct Fleet {
    spawner: Spawner,
    relays: Vec<Child>,
    consumer: Child,
    consumer_slot: usize,
    unexpected_exits: Vec<String>,
}

impl Fleet {
    fn start(mut spawner: Spawner, relays: usize) -> Self {
        let (consumer, consumer_slot) = spawner.spawn_consumer();
        let relays = (0..relays).map(|_| spawner.spawn_relay()).collect();
        Self { spawner, relays, consumer, consumer_slot, unexpected_exits: Vec::new() }
    }

    /// Restarts any process that exited without being told to, and remembers it.
    fn revive(&mut self) {
        for i in 0..self.relays.len() {
            if let Ok(Some(status)) = self.relays[i].try_wait() {
                self.unexpected_exits.push(format!("relay exited: {status}"));
                self.relays[i] = self.spawner.spawn_relay();
            }
        }
        if let Ok(Some(status)) = self.consumer.try_wait() {
            self.unexpected_exits.push(format!("consumer exited: {status}"));
            (self.consumer, self.consumer_slot) = self.spawner.spawn_consumer();
        }
    }

    async fn kill_relay(&mut self, i: usize) {
        let child = &mut self.relays[i];
        child.kill().await.expect("SIGKILL a relay");
        self.relays[i] = self.spawner.spawn_relay();
    }

    /// Makes the consumer die at its crash point; `Ok` once it did, with the crash point's code.
    async fn crash_consumer(&mut self) -> Result<(), String> {
        // A signal that arrives before the handler is installed would kill it the default way.
        wait_for("the consumer to install its signal handlers", Duration::from_secs(30), || async {
            self.spawner.consumer_ready(self.consumer_slot).then_some(())
        })
        .await
        .map_err(|e| e.to_string())?;
        signal(&self.consumer, "-USR1").await;
        let status = tokio::time::timeout(Duration::from_secs(60), self.consumer.wait())
            .await
            .map_err(|_| "the consumer did not reach its crash point within 60 s".to_owned())?
            .expect("wait for the consumer");
        (self.consumer, self.consumer_slot) = self.spawner.spawn_consumer();
        if status.code() == Some(CRASHED) { Ok(()) } else { Err(format!("the consumer exited with {status}")) }
    }

    /// SIGTERM to every process; each must exit cleanly in time.
    async fn stop(mut self) -> Vec<(String, ExitStatus)> {
        let mut children: Vec<(String, Child)> = self.relays.drain(..).map(|c| ("relay".to_owned(), c)).collect();
        children.push(("consumer".to_owned(), self.consumer));
        for (_, child) in &children {
            signal(child, "-TERM").await;
        }
        let mut statuses = Vec::new();
        for (role, mut child) in children {
            let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
                .await
                .unwrap_or_else(|_| panic!("the {role} did not stop within 30 s of SIGTERM"))
                .expect("wait");
            statuses.push((role, status));
        }
        statuses
    }
}

async fn signal(child: &Child, sig: &str) {
    let Some(pid) = child.id() else { return };
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status().await;
}

/// The AMQP URL with its host and port replaced by `addr` (the proxy's).
fn via(url: &str, addr: std::net::SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("an AMQP URL");
    let (userinfo, hostpath) = match rest.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), rest),
    };
    let path = hostpath.find('/').map(|i| &hostpath[i..]).unwrap_or("");
    format!("{scheme}://{userinfo}{addr}{path}")
}

/// The broker's address, as the test's AMQP URL names it.
async fn broker_addr(url: &str) -> std::net::SocketAddr {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let hostpath = rest.rsplit_once('@').map(|(_, h)| h).unwrap_or(rest);
    let authority = hostpath.split('/').next().unwrap_or(hostpath);
    let authority = if authority.contains(':') { authority.to_owned() } else { format!("{authority}:5672") };
    tokio::net::lookup_host(authority).await.expect("resolve the broker").next().expect("an address")
}

/// One producer task: `n` transactions, each bumping a random account's version and enqueueing
/// the event of that change.
async fn produce(pool: PgPool, entities: i64, n: u64, seed: u64, committed: Arc<AtomicU64>) -> Duration {
    let started = Instant::now();
    let outbox = Outbox::new();
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..n {
        let account: i64 = rng.random_range(1..=entities);
        let mut tx = pool.begin().await.expect("begin");
        let version: i64 =
            sqlx::query_scalar("UPDATE chaos_accounts SET version = version + 1 WHERE id = $1 RETURNING version")
                .bind(account)
                .fetch_one(&mut *tx)
                .await
                .expect("business change");
        let event = NewEvent::json("account.changed", &serde_json::json!({ "account": account, "version": version }))
            .expect("json")
            .entity(format!("acct-{account}"));
        outbox.enqueue(&mut *tx, event).await.expect("enqueue");
        tx.commit().await.expect("commit");
        committed.fetch_add(1, Ordering::Relaxed);
    }
    started.elapsed()
}

/// What was injected, for the summary.
#[derive(Debug, Default)]
struct Injected {
    done: HashMap<Fault, usize>,
    refused_windows: usize,
    backends_terminated: i64,
}

struct Chaos<'a> {
    fleet: Fleet,
    /// Prefix of every child process's name (PostgreSQL `application_name`).
    prefix: String,
    proxy: &'a ChaosProxy,
    admin: &'a PgPool,
    databases: Vec<String>,
    rng: StdRng,
    injected: Injected,
}

impl Chaos<'_> {
    async fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::RelayKill => {
                let i = self.rng.random_range(0..self.fleet.relays.len());
                self.fleet.kill_relay(i).await;
            }
            Fault::AmqpCut => {
                self.proxy.cut();
                if self.rng.random_bool(0.5) {
                    // The broker "is down" for a moment: reconnections are refused, then heal.
                    self.proxy.refuse();
                    tokio::time::sleep(Duration::from_millis(self.rng.random_range(100..600))).await;
                    self.proxy.heal();
                    self.injected.refused_windows += 1;
                }
            }
            Fault::PgTerminate => {
                // Two terminations can fall into one tick of the schedule, or follow a kill: the
                // processes may not have reconnected yet, so wait for a backend to terminate.
                let pattern = format!("{}-%", self.prefix);
                let terminated =
                    wait_for("a backend of the relays or the consumer", Duration::from_secs(10), || async {
                        let n: i64 = sqlx::query_scalar(
                            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE datname = ANY($1) AND application_name LIKE $2) t",
                        )
                        .bind(&self.databases)
                        .bind(&pattern)
                        .fetch_one(self.admin)
                        .await
                        .expect("terminate backends");
                        (n > 0).then_some(n)
                    })
                    .await
                    .expect("no backend of the relays or the consumer to terminate");
                self.injected.backends_terminated += terminated;
            }
            Fault::ConsumerCrash => {
                if let Err(e) = self.fleet.crash_consumer().await {
                    panic!("consumer crash point: {e}");
                }
            }
        }
        *self.injected.done.entry(fault).or_default() += 1;
    }
}

/// Per entity, the sequence numbers in the order the consumer applied them.
async fn applied_order(consumer: &PgPool) -> HashMap<String, Vec<i64>> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT entity, seq FROM chaos_effects ORDER BY n").fetch_all(consumer).await.expect("effects");
    let mut map: HashMap<String, Vec<i64>> = HashMap::new();
    for (entity, seq) in rows {
        map.entry(entity).or_default().push(seq);
    }
    map
}

/// Applications out of order: an effect whose sequence number is not its predecessor's plus one.
fn order_violations(applied: &HashMap<String, Vec<i64>>) -> usize {
    applied
        .values()
        .map(|seqs| seqs.iter().zip(std::iter::once(&0).chain(seqs)).filter(|(s, p)| **s != **p + 1).count())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_loses_nothing_applies_once_in_order() {
    soak(sizes::CHAOS.fast).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long tier"]
async fn chaos_soak_loses_nothing_applies_once_in_order_long_tier() {
    soak(sizes::CHAOS.long).await;
}

async fn soak(tier: sizes::Chaos) {
    let size = Size::from_env(tier);
    let started = Instant::now();
    let producer_db = TestDb::new().await.expect("producer db");
    let consumer_db = TestDb::new().await.expect("consumer db");
    let (producer, consumer) = (producer_db.pool().clone(), consumer_db.pool().clone());
    sqlx::query("CREATE TABLE chaos_accounts (id bigint PRIMARY KEY, version bigint NOT NULL)")
        .execute(&producer)
        .await
        .expect("accounts");
    sqlx::query("INSERT INTO chaos_accounts SELECT g, 0 FROM generate_series(1, $1) g")
        .bind(size.entities)
        .execute(&producer)
        .await
        .expect("seed accounts");
    sqlx::query(
        "CREATE TABLE chaos_effects (n bigserial PRIMARY KEY, event_id uuid NOT NULL, entity text NOT NULL,
                                     seq bigint NOT NULL, version bigint)",
    )
    .execute(&consumer)
    .await
    .expect("effects");

    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("chaos", lapin::ExchangeKind::Topic).await.expect("exchange");
    let queue = broker.name("chaos.consumer");
    let topology = outbox_inbox::declare_queue(broker.channel(), &exchange, &queue, &["#"]).await.expect("queue");
    broker.remember_queue(&queue);
    broker.remember_queue(&topology.dead_letter_queue);
    broker.remember_exchange(&topology.dead_letter_exchange);
    // The broker's view: every publish, read beside the consumer on a direct connection.
    let watched = broker.declare_queue("chaos.recorder").await.expect("recorder queue");
    broker.bind(&watched, &exchange, "#").await.expect("bind");
    let recorder = Recorder::start(&watched).await.expect("recorder");

    let amqp = outbox_testkit::amqp_url();
    let proxy = ChaosProxy::start(broker_addr(&amqp).await).await.expect("proxy");
    let spawner = Spawner {
        prefix: format!("chaos-{}", outbox_testkit::unique_suffix()),
        producer_url: producer_db.url(),
        consumer_url: consumer_db.url(),
        amqp_url: via(&amqp, proxy.addr()),
        exchange: exchange.clone(),
        queue: queue.clone(),
        log: std::env::var("OUTBOX_CHAOS_LOG").unwrap_or_else(|_| "error,lapin=off".to_owned()),
        spawned: 0,
        stats: Arc::new(Mutex::new(Vec::new())),
    };
    let prefix = spawner.prefix.clone();
    let stats = spawner.stats.clone();
    let fleet = Fleet::start(spawner, size.relays);

    // The fault schedule: `kills` faults of each kind at random points of the consumer's progress.
    let mut rng = StdRng::seed_from_u64(size.seed);
    let mut schedule: Vec<(i64, Fault)> = FAULTS
        .iter()
        .flat_map(|f| std::iter::repeat_n(*f, size.kills))
        .map(|f| (rng.random_range(size.events * 2 / 100..=size.events * 70 / 100) as i64, f))
        .collect();
    schedule.sort_unstable_by(|a, b| b.cmp(a));

    // The producer: concurrent writers, as a service under load has; each commit waits for its WAL
    // flush, and concurrent commits share flushes.
    let writer_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(size.writers as u32)
        .connect_with(producer_db.connect_options().clone())
        .await
        .expect("writer pool");
    let committed = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..size.writers)
        .map(|w| {
            let n = size.events / size.writers + u64::from(w < size.events % size.writers);
            let seed = size.seed.wrapping_add(w + 1);
            tokio::spawn(produce(writer_pool.clone(), size.entities, n, seed, committed.clone()))
        })
        .collect();

    let mut chaos = Chaos {
        fleet,
        prefix,
        proxy: &proxy,
        admin: &producer,
        databases: vec![producer_db.name().to_owned(), consumer_db.name().to_owned()],
        rng,
        injected: Injected::default(),
    };
    let chaos_deadline = Duration::from_secs(60) + Duration::from_millis(10 * size.events);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while !(schedule.is_empty() && writers.iter().all(|w| w.is_finished())) {
        tick.tick().await;
        chaos.fleet.revive();
        // Progress: the highest effect number (close to the effects applied; cheap to read).
        let progress = count(&consumer, "SELECT coalesce(max(n), 0) FROM chaos_effects").await;
        while let Some(&(at, fault)) = schedule.last()
            && at <= progress
        {
            schedule.pop();
            chaos.inject(fault).await;
        }
        assert!(
            started.elapsed() < chaos_deadline,
            "no progress: {progress} effects after {:?}, faults left {schedule:?}",
            started.elapsed()
        );
    }
    let mut produced_at = Duration::ZERO;
    for w in writers {
        produced_at = produced_at.max(w.await.expect("producer"));
    }
    writer_pool.close().await;
    let produced = committed.load(Ordering::Relaxed);
    let chaos_done = started.elapsed();

    // Heal and drain.
    proxy.heal();
    let drain_deadline = Duration::from_secs(60) + Duration::from_millis(5 * size.events);
    // Drained when the inbox has processed every event (its own record, committed with the
    // handler's effect); what the effects say is checked below, not here.
    let drained = wait_for("the inbox to process every event", drain_deadline, || {
        let consumer = consumer.clone();
        async move {
            let processed: i64 =
                sqlx::query_scalar("SELECT count(*) FROM inbox_events WHERE consumer = $1 AND status = 'processed'")
                    .bind(CONSUMER)
                    .fetch_one(&consumer)
                    .await
                    .expect("processed");
            outbox_testkit::at_least(processed, produced as i64)
        }
    })
    .await;
    if let Err(e) = &drained {
        let outbox: Vec<(String, i64)> = sqlx::query_as("SELECT status, count(*) FROM outbox_events GROUP BY 1")
            .fetch_all(&producer)
            .await
            .expect("diag");
        let inbox: Vec<(String, i64)> = sqlx::query_as("SELECT status, count(*) FROM inbox_events GROUP BY 1")
            .fetch_all(&consumer)
            .await
            .expect("diag");
        println!("chaos: {e}: outbox by status {outbox:?}, inbox by status {inbox:?}");
    }
    let all_published = wait_for("every outbox row marked published", Duration::from_secs(60), || {
        let producer = producer.clone();
        async move {
            (count(&producer, "SELECT count(*) FROM outbox_events WHERE status = 'published'").await == produced as i64)
                .then_some(())
        }
    })
    .await;
    let ids: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM outbox_events").fetch_all(&producer).await.expect("outbox ids");
    let broker_saw_all = wait_for("every event at the broker", Duration::from_secs(60), || async {
        recorder.all_delivered(ids.iter().copied()).map_err(|missing| format!("{} missing", missing.len()))
    })
    .await;
    let drain_done = started.elapsed();
    chaos.fleet.revive();
    let unexpected_exits = std::mem::take(&mut chaos.fleet.unexpected_exits);
    let stopped = chaos.fleet.stop().await;

    // The figures.
    let effects: Vec<(Uuid, String, i64, Option<i64>)> =
        sqlx::query_as("SELECT event_id, entity, seq, version FROM chaos_effects")
            .fetch_all(&consumer)
            .await
            .expect("effects");
    let mut times: HashMap<Uuid, usize> = HashMap::new();
    for (id, ..) in &effects {
        *times.entry(*id).or_default() += 1;
    }
    let lost = ids.iter().filter(|id| !times.contains_key(id)).count();
    let double_effects: usize = times.values().map(|n| n.saturating_sub(1)).sum();
    let order = applied_order(&consumer).await;
    let consumer_order_violations = order_violations(&order);
    let broker_order_violations = recorder.in_entity_order().err().map_or(0, |v| v.len());
    let broker_deliveries = recorder.count();
    let republished = broker_deliveries.saturating_sub(recorder.ids().len());
    let consumer_stats = stats.lock().expect("stats").iter().flatten().fold(ConsumerStats::default(), |a, s| a.add(*s));

    // Reconciliation: business changes ⇄ outbox ⇄ broker ⇄ inbox ⇄ effects.
    let report = Reconciliation::new(&producer)
        .entity_versions("SELECT 'acct-' || id, version FROM chaos_accounts")
        .broker(&recorder)
        .inbox(&consumer, CONSUMER)
        .effects("SELECT event_id FROM chaos_effects")
        .run()
        .await
        .expect("reconciliation");
    // Beyond the report: every effect carries the business version its event was written with,
    // and nothing was dead-lettered.
    let payload_mismatches = effects.iter().filter(|(_, _, seq, version)| Some(*seq) != *version).count();
    let dead_letters = broker
        .channel()
        .queue_declare(
            topology.dead_letter_queue.as_str().into(),
            QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() },
            FieldTable::default(),
        )
        .await
        .expect("dead-letter queue")
        .message_count();
    let kills = |f: Fault| chaos.injected.done.get(&f).copied().unwrap_or(0);
    println!("chaos: seed = {}", size.seed);
    println!("chaos: events = {produced} over {} entities ({} writers)", size.entities, size.writers);
    println!("chaos: relay processes at once = {}", size.relays);
    println!("chaos: relay SIGKILLs = {}", kills(Fault::RelayKill));
    println!(
        "chaos: AMQP cuts = {} (with refused reconnections: {})",
        kills(Fault::AmqpCut),
        chaos.injected.refused_windows
    );
    println!(
        "chaos: PostgreSQL terminations = {} ({} backends)",
        kills(Fault::PgTerminate),
        chaos.injected.backends_terminated
    );
    println!("chaos: consumer crashes between commit and ack = {}", kills(Fault::ConsumerCrash));
    println!("chaos: broker deliveries = {broker_deliveries} (republished = {republished})");
    println!(
        "chaos: consumer duplicates dropped = {} (stale {}, parked {}, retried {}, dead-lettered {})",
        consumer_stats.duplicates,
        consumer_stats.stale,
        consumer_stats.parked,
        consumer_stats.retried,
        consumer_stats.dead_lettered
    );
    println!("chaos: lost = {lost}");
    println!("chaos: double effects = {double_effects}");
    println!("chaos: order violations = {consumer_order_violations} (consumer), {broker_order_violations} (broker)");
    println!("chaos: effects with another version than their event = {payload_mismatches}");
    println!("chaos: dead letters = {dead_letters}");
    println!(
        "chaos: reconciliation = {} ({} business changes, {} outbox events, {} published)",
        if report.is_clean() { "clean" } else { "NOT clean" },
        report.business_changes,
        report.outbox_events,
        report.published
    );
    println!(
        "chaos: wall time = {:.1} s (produced in {:.1} s, faults over {:.1} s, drained at {:.1} s)",
        started.elapsed().as_secs_f64(),
        produced_at.as_secs_f64(),
        chaos_done.as_secs_f64(),
        drain_done.as_secs_f64()
    );

    drained.expect("drained");
    all_published.expect("every row published");
    broker_saw_all.expect("every event reached the broker");
    assert!(unexpected_exits.is_empty(), "processes died on their own: {unexpected_exits:?}");
    for (role, status) in &stopped {
        assert!(status.success(), "the {role} did not stop cleanly: {status}");
    }
    for f in FAULTS {
        assert_eq!(kills(f), size.kills, "{f:?} injected");
    }
    assert_eq!(produced, size.events);
    assert_eq!(ids.len() as u64, produced, "one outbox row per committed change");
    assert_eq!(lost, 0, "events lost");
    assert_eq!(double_effects, 0, "effects applied twice");
    assert_eq!(consumer_order_violations, 0, "effects applied out of order");
    assert_eq!(broker_order_violations, 0, "events published out of order");
    assert_eq!(payload_mismatches, 0, "effects that do not match their business change");
    assert_eq!(dead_letters, 0, "dead letters");
    assert!(report.is_clean(), "{report}");

    drop(recorder);
    drop(proxy);
    broker.close().await.expect("broker cleanup");
    producer_db.close().await.expect("db cleanup");
    consumer_db.close().await.expect("db cleanup");
}
