//! TLS to the servers, on private ones started by the test with certificates from a CA made here.
//!
//! PostgreSQL (`ssl = on`): `outbox migrate` and `outbox status` reach it with
//! `sslmode=verify-full&sslrootcert=<ca.pem>` in DATABASE_URL (and the connection is encrypted);
//! a CA file that did not sign the server's certificate, or a host name the certificate is not
//! for, ends the command at once with exit status 1 and one line naming the certificate problem,
//! without the password.
//!
//! RabbitMQ (a TLS listener only): `outbox relay` publishes over `amqps://` with the CA in
//! `SSL_CERT_FILE`; with another CA there it publishes nothing and each retry's log line names
//! the certificate problem.
//!
//! Each server runs from the system's binaries on free ports with its data in a temporary folder
//! (as the `postgres` or `rabbitmq` user when the test runs as root: initdb refuses root), and is
//! stopped and its folder removed when its test ends, failed or not. Without the binaries a test
//! says so and passes. The two tests run one after the other.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::str::FromStr;
use std::time::Duration;

use crate::support::{AT_ONCE, Running, assert_failed_with, closed_port, outbox};
use lapin::options::{QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use outbox_system_tests::{Load, fill};
use outbox_testkit::{TestDb, wait_for};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const RABBIT: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const PASSWORD: &str = "tls-s3cret-pw";
/// One test at a time: each starts a server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Generous: initdb, or a RabbitMQ node's boot, and the server's start on a busy host.
const START: Duration = Duration::from_secs(120);

/// A CA certificate (PEM) and what signs with it.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("CA certificate");
    (cert.pem(), Issuer::new(params, key))
}

/// A server certificate for 127.0.0.1 and localhost signed by `issuer`, and its key (both PEM).
fn server_certificate(issuer: &Issuer<'static, KeyPair>) -> (String, String) {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let mut params = CertificateParams::new(names).expect("server parameters");
    params.distinguished_name.push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, issuer).expect("server certificate");
    (cert.pem(), key.serialize_pem())
}

/// Whether this process runs as root (then each server runs as its system user).
fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// A temporary folder of a server's files, owned by the user the server runs as, removed on drop.
struct Folder {
    path: PathBuf,
    /// The user to run the server's programs as, when the test runs as root.
    owner: Option<&'static str>,
}

impl Folder {
    fn new(prefix: &str, user: &'static str) -> Self {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", outbox_testkit::unique_suffix()));
        std::fs::create_dir(&path).expect("temporary folder");
        Self { path, owner: is_root().then_some(user) }
    }

    fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `name`, readable by its owner only (servers refuse a key others can read).
    fn write(&self, name: &str, contents: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.join(name);
        std::fs::write(&path, contents).expect(name);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }

    /// Gives everything written so far to the owner.
    fn hand_over(&self) {
        if let Some(user) = self.owner {
            set_up(Command::new("chown").args(["-R", &format!("{user}:{user}")]).arg(&self.path));
        }
    }

    /// `program`, run as the owner.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match self.owner {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", user, "--"]).arg(program);
                cmd
            }
            None => Command::new(program),
        }
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A private PostgreSQL with TLS, stopped (`-m immediate`) and its folder removed on drop.
struct PrivatePostgres {
    folder: Folder,
    port: u16,
}

impl PrivatePostgres {
    /// A new server, its certificate signed by `issuer`; the CA's certificate is `ca.pem` in its
    /// folder.
    fn start(ca_pem: &str, issuer: &Issuer<'static, KeyPair>) -> Self {
        let server = Self { folder: Folder::new("outbox-tls-pg", "postgres"), port: closed_port() };
        let (cert, key) = server_certificate(issuer);
        server.folder.write("ca.pem", ca_pem);
        server.folder.write("server.crt", &cert);
        server.folder.write("server.key", &key);
        server.folder.hand_over();
        let data = server.folder.join("data");
        set_up(
            server.pg("initdb").args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "-D"]).arg(&data),
        );
        set_up(
            server
                .pg("pg_ctl")
                .args(["-w", "-t", &START.as_secs().to_string(), "-D"])
                .arg(&data)
                .arg("-l")
                .arg(server.folder.join("server.log"))
                .args(["-o", &server.settings(), "start"]),
        );
        server
    }

    /// The server's settings: its own port and socket folder, TLS on with the test's certificate.
    fn settings(&self) -> String {
        let d = self.folder.path.display();
        format!(
            "-c port={} -c listen_addresses=127.0.0.1,127.0.0.2 -c unix_socket_directories={d} -c ssl=on \
             -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key -c fsync=off",
            self.port
        )
    }

    fn pg(&self, program: &str) -> Command {
        self.folder.command(Path::new(PG_BIN).join(program))
    }

    /// A URL of the server's `postgres` database, with a password (which trust ignores) and the
    /// TLS parameters `tls`.
    fn url(&self, host: &str, tls: &str) -> String {
        format!("postgres://postgres:{PASSWORD}@{host}:{}/postgres?{tls}", self.port)
    }

    /// `sslmode=verify-full` with `ca` (a file in the server's folder) as the root certificate.
    fn verified(&self, ca: &str) -> String {
        format!("sslmode=verify-full&sslrootcert={}", self.folder.join(ca).display())
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.folder.join("data");
        let stopped = self.pg("pg_ctl").args(["-m", "immediate", "-D"]).arg(&data).arg("stop").output();
        if let Ok(out) = &stopped
            && !out.status.success()
            && data.join("postmaster.pid").exists()
        {
            eprintln!("pg_ctl stop failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// A private RabbitMQ node with a TLS listener only, stopped and its folder removed on drop.
struct PrivateRabbit {
    folder: Folder,
    port: u16,
    node: Child,
}

impl PrivateRabbit {
    /// A new node named after a random suffix, its certificate signed by `issuer`; the CA's
    /// certificate is `ca.pem` in its folder. Returns once it listens.
    async fn start(ca_pem: &str, issuer: &Issuer<'static, KeyPair>) -> Self {
        let folder = Folder::new("outbox-tls-rabbit", "rabbitmq");
        let port = closed_port();
        let (cert, key) = server_certificate(issuer);
        folder.write("ca.pem", ca_pem);
        folder.write("server.pem", &cert);
        folder.write("server.key", &key);
        folder.write("enabled_plugins", "[].");
        folder.write("rabbitmq.conf", &rabbit_config(&folder, port));
        folder.hand_over();
        let log = std::fs::File::create(folder.join("node.log")).expect("log file");
        let node = folder
            .command(RABBIT)
            .envs(rabbit_environment(&folder))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start rabbitmq-server");
        let rabbit = Self { folder, port, node };
        let listening = wait_for("the private RabbitMQ node to listen", START, || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(drop)
        })
        .await;
        if let Err(e) = listening {
            let log = std::fs::read_to_string(rabbit.folder.join("node.log")).unwrap_or_default();
            panic!("{e}; the node's output:\n{log}");
        }
        rabbit
    }

    /// `amqps://` with the guest account (allowed from the loopback).
    fn url(&self) -> String {
        format!("amqps://guest:guest@localhost:{}/%2f", self.port)
    }
}

/// A TLS listener on `port` with the folder's certificate and key, and no plain listener.
fn rabbit_config(folder: &Folder, port: u16) -> String {
    let d = folder.path.display();
    format!(
        "listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:{port}\n\
         ssl_options.cacertfile = {d}/ca.pem\nssl_options.certfile = {d}/server.pem\n\
         ssl_options.keyfile = {d}/server.key\nssl_options.verify = verify_none\n\
         ssl_options.fail_if_no_peer_cert = false\n"
    )
}

/// Everything the node writes in the folder, a node name and distribution port of its own, and
/// nothing from the system's RabbitMQ configuration.
fn rabbit_environment(folder: &Folder) -> Vec<(String, String)> {
    let path = |name: &str| folder.join(name).display().to_string();
    let name = format!("outbox_tls_{}@localhost", outbox_testkit::unique_suffix());
    [
        ("RABBITMQ_NODENAME", name),
        ("RABBITMQ_NODE_PORT", closed_port().to_string()),
        ("RABBITMQ_DIST_PORT", closed_port().to_string()),
        ("RABBITMQ_CONF_ENV_FILE", "/dev/null".to_owned()),
        ("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf")),
        ("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config")),
        ("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins")),
        ("RABBITMQ_MNESIA_BASE", path("mnesia")),
        ("RABBITMQ_LOG_BASE", path("log")),
        ("RABBITMQ_PID_FILE", path("node.pid")),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .to_vec()
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        // The Erlang VM (its pid in the pid file) stops on SIGTERM, and the processes above it
        // (runuser, the start script) with it; SIGKILL if it has not within the deadline.
        let pid = std::fs::read_to_string(self.folder.join("node.pid")).unwrap_or_default();
        let pid = pid.trim();
        if !pid.is_empty() {
            let _ = Command::new("kill").args(["-TERM", pid]).status();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while matches!(self.node.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(self.node.try_wait(), Ok(None)) {
            if !pid.is_empty() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
            let _ = self.node.kill();
            let _ = self.node.wait();
        }
    }
}

/// Runs a set-up step; panics with its output if it fails.
fn set_up(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn outbox_with(url: &str, args: &[&str]) -> Output {
    let mut cmd = outbox();
    cmd.args(args).env("DATABASE_URL", url);
    tokio::task::spawn_blocking(move || cmd.output().expect("run outbox")).await.expect("join")
}

fn assert_succeeded(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {stderr}");
    assert!(!stderr.contains(PASSWORD) && !String::from_utf8_lossy(&out.stdout).contains(PASSWORD), "{what}");
}

/// Whether a connection made with `url` is encrypted, as the server sees it.
async fn encrypted(url: &str) -> bool {
    let options = PgConnectOptions::from_str(url).expect("options");
    let mut conn = options.connect().await.expect("connect with TLS");
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .expect("pg_stat_ssl");
    conn.close().await.expect("close");
    ssl
}

#[tokio::test]
async fn the_commands_verify_the_servers_certificate() {
    let _serial = SERIAL.lock().await;
    if !Path::new(PG_BIN).join("initdb").exists() || !Path::new(PG_BIN).join("pg_ctl").exists() {
        eprintln!("SKIPPED: no PostgreSQL server binaries in {PG_BIN}; this test needs initdb and pg_ctl");
        return;
    }
    let (ca_pem, issuer) = ca("outbox test CA");
    let started = std::time::Instant::now();
    let server = PrivatePostgres::start(&ca_pem, &issuer);
    eprintln!("private PostgreSQL with TLS ready in {:.1} s", started.elapsed().as_secs_f64());
    let (other_ca, _) = ca("some other CA");
    server.folder.write("other-ca.pem", &other_ca);

    let verified = server.url("127.0.0.1", &server.verified("ca.pem"));
    assert!(encrypted(&verified).await, "the connection is encrypted");
    assert_succeeded(&outbox_with(&verified, &["migrate"]).await, "migrate over verified TLS");
    let status = outbox_with(&verified, &["status"]).await;
    assert_succeeded(&status, "status over verified TLS");
    assert!(String::from_utf8_lossy(&status.stdout).contains("waiting"), "the status table");
    let by_name = server.url("localhost", &server.verified("ca.pem"));
    assert_succeeded(&outbox_with(&by_name, &["status", "--json"]).await, "status by host name");
    let unverified = server.url("127.0.0.1", "sslmode=require");
    assert_succeeded(&outbox_with(&unverified, &["status"]).await, "status over unverified TLS");

    // Signed by another CA; for another host name (127.0.0.2 reaches the same server). Not worth
    // retrying: refused at once, well before --connect-timeout-secs.
    let untrusted = server.url("127.0.0.1", &server.verified("other-ca.pem"));
    let misnamed = server.url("127.0.0.2", &server.verified("ca.pem"));
    for (url, problem) in [(untrusted, "UnknownIssuer"), (misnamed, "certificate")] {
        let started = std::time::Instant::now();
        let out = outbox_with(&url, &["status", "--connect-timeout-secs", "60"]).await;
        let lines: Vec<String> = String::from_utf8_lossy(&out.stderr).lines().map(str::to_owned).collect();
        let line = assert_failed_with(out.status, &lines, "TLS with the database failed: invalid peer certificate");
        assert!(line.contains(problem), "{line}");
        assert!(!line.contains(PASSWORD), "{line}");
        assert!(started.elapsed() < AT_ONCE, "refused at once, took {:?}", started.elapsed());
        assert!(out.stdout.is_empty(), "nothing on stdout");
        eprintln!("refused as expected: {line}");
    }
    drop(server);
}

/// Events the relay publishes over TLS.
const EVENTS: usize = 5;
const WAIT: Duration = Duration::from_secs(90);

/// `outbox relay` to the private node, trusting the CA file `ca` of its folder (`SSL_CERT_FILE`).
fn relay_over_tls(db: &TestDb, rabbit: &PrivateRabbit, ca: &str) -> Command {
    let mut cmd = outbox();
    cmd.args(["relay", "--exchange", "orders", "--no-declare-exchange"])
        .env("DATABASE_URL", db.url())
        .env("AMQP_URL", rabbit.url())
        .env("SSL_CERT_FILE", rabbit.folder.join(ca));
    cmd
}

async fn published(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE status = 'published'")
        .fetch_one(db.pool())
        .await
        .expect("count")
}

/// The test's own connection to the node, trusting the CA through lapin's TLS configuration; an
/// exchange `orders` with a queue `recorded` bound to every key.
async fn declare(rabbit: &PrivateRabbit, ca_pem: &str) -> (lapin::Connection, lapin::Channel) {
    let tls = lapin::tcp::OwnedTLSConfig { identity: None, cert_chain: Some(ca_pem.to_owned()) };
    let builder = lapin::DefaultConnectionBuilder::new().expect("lapin runtime");
    let connection = builder.with_uri_str(rabbit.url()).with_tls_config(tls).connect().await.expect("amqps");
    let channel = connection.create_channel().await.expect("channel");
    let none = FieldTable::default;
    let kind = lapin::ExchangeKind::Topic;
    channel.exchange_declare("orders".into(), kind, Default::default(), none()).await.expect("exchange");
    channel.queue_declare("recorded".into(), Default::default(), none()).await.expect("queue");
    let bind = QueueBindOptions::default();
    channel.queue_bind("recorded".into(), "orders".into(), "#".into(), bind, none()).await.expect("bind");
    (connection, channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_publishes_over_amqps_trusting_the_ca_in_ssl_cert_file() {
    let _serial = SERIAL.lock().await;
    if !Path::new(RABBIT).exists() {
        eprintln!("SKIPPED: no {RABBIT}; this test needs a RabbitMQ installation");
        return;
    }
    let db = TestDb::new().await.expect("db");
    fill(db.pool(), Load { entities: EVENTS, per_entity: 1 }).await;
    let (ca_pem, issuer) = ca("outbox test CA");
    let started = std::time::Instant::now();
    let rabbit = PrivateRabbit::start(&ca_pem, &issuer).await;
    eprintln!("private RabbitMQ node with TLS ready in {:.1} s", started.elapsed().as_secs_f64());
    let (other_ca, _) = ca("some other CA");
    rabbit.folder.write("other-ca.pem", &other_ca);
    let (connection, channel) = declare(&rabbit, &ca_pem).await;

    // Another CA: nothing is sent, and every attempt's line names the problem.
    let running = Running::spawn(relay_over_tls(&db, &rabbit, "other-ca.pem"));
    let untrusted = |l: &str| l.contains("WARN") && l.contains("invalid peer certificate: UnknownIssuer");
    running.wait_for_lines("the certificate problem", 2, WAIT, untrusted).await;
    running.signal("-TERM");
    let (status, lines) = running.finish(WAIT).await;
    assert_eq!(status.code(), Some(0), "clean exit on SIGTERM:\n{}", lines.join("\n"));
    assert_eq!(published(&db).await, 0);

    // The CA that signed the node's certificate: every event published and in the queue.
    let running = Running::spawn(relay_over_tls(&db, &rabbit, "ca.pem"));
    wait_for("the events published over TLS", WAIT, || async {
        outbox_testkit::equal(published(&db).await, EVENTS as i64)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; the relay's log:\n{}", running.lines().join("\n")));
    let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    let queue = channel.queue_declare("recorded".into(), passive, FieldTable::default()).await.expect("queue");
    assert_eq!(queue.message_count() as usize, EVENTS, "every event in the bound queue");
    running.signal("-TERM");
    let (status, lines) = running.finish(WAIT).await;
    assert_eq!(status.code(), Some(0), "clean exit on SIGTERM:\n{}", lines.join("\n"));

    let _ = connection.close(200, "test done".into()).await;
    drop(rabbit);
    db.close().await.expect("cleanup");
}
