//! Three `shipping-service` processes started at once on a database that does not exist yet: each
//! creates it if missing, sets up its tables and the inbox migrations without tripping over the
//! others, comes up, and exits with status 0 on SIGTERM.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_testkit::{TestBroker, TestDb, wait_for};
use sqlx::ConnectOptions;

/// Generous: the host may be busy building something else.
const DEADLINE: Duration = Duration::from_secs(120);

/// One `shipping-service` process and everything it printed so far.
struct Service {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Service {
    fn spawn(database_url: &str, exchange: &str, queue_base: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shipping-service"))
            .env("DATABASE_URL", database_url)
            .env("AMQP_URL", outbox_testkit::amqp_url())
            .env("EXCHANGE", exchange)
            .env("QUEUE_BASE", queue_base)
            .env("PARTITIONS", "2")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn shipping-service");
        let output = Arc::new(Mutex::new(String::new()));
        if let Some(out) = child.stdout.take() {
            collect(out, Arc::clone(&output));
        }
        if let Some(err) = child.stderr.take() {
            collect(err, Arc::clone(&output));
        }
        Self { child, output }
    }

    fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    fn ready(&self) -> bool {
        self.output().contains("shipping-service ready")
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill -TERM");
        assert!(status.success(), "kill -TERM failed");
    }
}

/// Reads a pipe to its end on a thread of its own (so the child never blocks on a full pipe).
fn collect(pipe: impl Read + Send + 'static, into: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if let Ok(mut out) = into.lock() {
                out.push_str(&line);
                out.push('\n');
            }
        }
    });
}

/// Kills every process still running when the test ends, even on a panic.
struct Services(Vec<Service>);

impl Drop for Services {
    fn drop(&mut self) {
        for s in &mut self.0 {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}

/// Drops a database the test's processes created, at the end of the test or on a panic, over a
/// connection of its own to the testkit's database (which must still exist). If this test
/// process is killed, the testkit's sweep removes it later: its name starts like the testkit's own.
struct DropDatabase {
    admin: sqlx::postgres::PgConnectOptions,
    name: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                let mut conn = admin.connect().await?;
                let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.map(drop)
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop the database {}", self.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_start_at_once_on_a_missing_database_and_stop_on_sigterm() {
    // The testkit's database gives a unique name and an admin pool; the services get a database
    // next to it that nobody has created yet.
    let admin = TestDb::empty().await.expect("db");
    let name = format!("{}_svc", admin.name());
    let drop_db = DropDatabase { admin: admin.connect_options().clone(), name: name.clone() };
    let options = admin.connect_options().clone().database(&name);
    let url = options.to_url_lossy().to_string();

    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.name("orders");
    let base = broker.name("shipping");
    broker.remember_exchange(&exchange);
    broker.remember_exchange(&format!("{base}.dlx"));
    for q in ["0", "1", "dead"] {
        broker.remember_queue(&format!("{base}.{q}"));
    }

    let mut services = Services((0..3).map(|_| Service::spawn(&url, &exchange, &base)).collect());

    let started = wait_for("three shipping-services ready", DEADLINE, || {
        let verdict = services.0.iter_mut().enumerate().find_map(|(i, s)| {
            s.exited().map(|status| Err(format!("process {i} exited with {status}:\n{}", s.output())))
        });
        let all_ready = services.0.iter().all(Service::ready);
        async move { verdict.or(all_ready.then_some(Ok(()))) }
    })
    .await;
    let outputs: Vec<String> = services.0.iter().map(Service::output).collect();
    started.expect("start").unwrap_or_else(|e| panic!("{e}"));
    for (i, s) in services.0.iter_mut().enumerate() {
        assert!(s.exited().is_none(), "process {i} stopped after it was ready:\n{}", outputs[i]);
    }

    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect_with(options).await.expect("connect");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('shipments', 'inbox_events')",
    )
    .fetch_one(&pool)
    .await
    .expect("tables");
    assert_eq!(tables, 2, "shipments and the inbox tables exist");
    pool.close().await;

    for s in &services.0 {
        s.terminate();
    }
    let stopped = wait_for("three shipping-services stopped", DEADLINE, || {
        let statuses: Vec<Option<ExitStatus>> = services.0.iter_mut().map(Service::exited).collect();
        async move { statuses.into_iter().collect::<Option<Vec<_>>>() }
    })
    .await;
    let statuses = stopped.unwrap_or_else(|e| {
        panic!("{e}; outputs:\n{}", services.0.iter().map(Service::output).collect::<Vec<_>>().join("\n---\n"))
    });
    for (i, status) in statuses.iter().enumerate() {
        assert!(status.success(), "process {i} exited with {status} on SIGTERM:\n{}", services.0[i].output());
    }

    drop(services);
    broker.close().await.expect("broker cleanup");
    drop(drop_db);
    admin.close().await.expect("db cleanup");
}
