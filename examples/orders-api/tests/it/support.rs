//! The running `orders-api` process, the shipping service beside it, and HTTP through curl.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use outbox_testkit::{TestBroker, TestDb, wait_for};

/// How long a start, a request or a delivery may take on a busy host.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

/// The API process on its own port and database, with the shipping service consuming its events
/// from their own database.
pub(crate) struct Running {
    child: Process,
    pub(crate) port: u16,
    pub(crate) orders: TestDb,
    pub(crate) shipping: TestDb,
    pub(crate) broker: TestBroker,
    pub(crate) consumer: outbox_inbox::RunnerHandle,
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

impl Running {
    /// Starts the shipping service, then the API, and waits until the API is ready.
    pub(crate) async fn start() -> Self {
        let (orders, shipping) =
            (TestDb::empty().await.expect("orders db"), TestDb::empty().await.expect("shipping db"));
        let broker = TestBroker::new().await.expect("broker");
        let (exchange, base) = (broker.name("orders"), broker.name("shipping"));
        let topology = outbox_relayer::Topology::partitioned(exchange.clone(), &base, 2);
        broker.remember_topology(&topology);
        shipping_service::migrate(shipping.pool()).await.expect("shipping tables");
        let amqp = outbox_testkit::amqp_url();
        let (consumer, _) =
            shipping_service::start(shipping.pool(), &amqp, &exchange, &base, 2, None).await.expect("shipping service");
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_orders-api"))
            .env("DATABASE_URL", orders.url())
            .env("AMQP_URL", &amqp)
            .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
            .env("EXCHANGE", &exchange)
            .env("QUEUE_BASE", &base)
            .env("PARTITIONS", "2")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::from(std::fs::File::create(log_path(port)).expect("log file")))
            .spawn()
            .expect("spawn orders-api");
        let running = Self { child: Process(child), port, orders, shipping, broker, consumer };
        let ready = || async { running.request("GET", "/readyz", &[], None).await.ok().filter(|r| r.status == 200) };
        wait_for("orders-api ready", DEADLINE, ready).await.expect("ready");
        running
    }

    /// One HTTP request with curl: method, path, headers, JSON body.
    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[&str],
        body: Option<&str>,
    ) -> Result<Reply, String> {
        let mut curl = tokio::process::Command::new("curl");
        curl.args(["-s", "-i", "--max-time", "30", "-X", method]).arg(format!("http://127.0.0.1:{}{path}", self.port));
        for header in headers {
            curl.args(["-H", header]);
        }
        if let Some(body) = body {
            curl.args(["-H", "content-type: application/json", "--data", body]);
        }
        let out = curl.output().await.map_err(|e| format!("curl: {e}"))?;
        Reply::parse(&String::from_utf8_lossy(&out.stdout))
            .ok_or_else(|| format!("no HTTP answer (curl exit {})", out.status))
    }

    /// Sends SIGTERM and waits for the exit; returns the exit code and what it logged.
    pub(crate) fn terminate(self) -> (Option<i32>, String, Rest) {
        let Self { mut child, port, orders, shipping, broker, consumer } = self;
        let pid = child.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        let code = wait_exit(&mut child.0);
        let log = std::fs::read_to_string(log_path(port)).unwrap_or_default();
        let _ = std::fs::remove_file(log_path(port));
        (code, log, Rest { orders, shipping, broker, consumer })
    }
}

/// The process, killed when dropped: a test that failed before `terminate` leaves none behind.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What outlives the process: the databases, the broker's names, the consumer.
pub(crate) struct Rest {
    pub(crate) orders: TestDb,
    pub(crate) shipping: TestDb,
    pub(crate) broker: TestBroker,
    pub(crate) consumer: outbox_inbox::RunnerHandle,
}

impl Rest {
    pub(crate) async fn close(self) {
        self.consumer.shutdown().await.expect("consumer");
        self.broker.close().await.expect("broker cleanup");
        self.orders.close().await.expect("orders db cleanup");
        self.shipping.close().await.expect("shipping db cleanup");
    }
}

/// Where the process on `port` logs.
fn log_path(port: u16) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("orders-api-{port}.log"))
}

/// Waits (up to [`DEADLINE`]) for `child` to exit; its exit code.
fn wait_exit(child: &mut Child) -> Option<i32> {
    let until = std::time::Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > until {
            let _ = child.kill();
            panic!("orders-api did not exit within {DEADLINE:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    status.code()
}

/// An HTTP answer: status, headers (lower-case names), body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Reply {
    fn parse(raw: &str) -> Option<Self> {
        let (head, body) = raw.split_once("\r\n\r\n")?;
        let mut lines = head.lines();
        let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Some(Self { status, headers, body: body.to_owned() })
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("JSON body ({e}): {}", self.body))
    }
}
