//! Shared helpers of the `outbox` process tests: the command with a clean environment, its
//! stderr read as it comes, exits awaited with deadlines, a closed port.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_testkit::wait_for;

/// How long a command that should fail "at once" may take on a busy host.
pub const AT_ONCE: Duration = Duration::from_secs(20);

/// The `outbox` binary with none of the variables it reads inherited from the test's environment.
pub fn outbox() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    cmd.env_remove("DATABASE_URL")
        .env_remove("AMQP_URL")
        .env_remove("OUTBOX_PAYLOAD_KEYS")
        .env_remove("RUST_BACKTRACE");
    cmd.env("RUST_LOG", "info");
    cmd
}

/// A running `outbox` process whose stderr is collected line by line.
pub struct Running {
    pub child: Child,
    pub started: Instant,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Starts `cmd` with stdout discarded and stderr collected.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn outbox");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().expect("lines").push(line);
            }
        });
        Self { child, started: Instant::now(), lines, reader: Some(reader) }
    }

    /// The stderr lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    /// Waits until at least `n` stderr lines satisfy `matches`.
    pub async fn wait_for_lines(&self, what: &str, n: usize, deadline: Duration, matches: impl Fn(&str) -> bool) {
        let found = wait_for(what, deadline, || {
            let count = self.lines().iter().filter(|l| matches(l)).count();
            async move { outbox_testkit::at_least(count, n) }
        })
        .await;
        if let Err(e) = found {
            panic!("{e}; stderr so far:\n{}", self.lines().join("\n"));
        }
    }

    /// Sends `sig` (`-TERM`, `-INT`, `-KILL`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill").args([sig, &self.child.id().to_string()]).status().expect("kill");
        assert!(status.success());
    }

    /// Waits for the exit (killing the process if the deadline passes first); the status and every
    /// stderr line.
    pub async fn finish(mut self, deadline: Duration) -> (ExitStatus, Vec<String>) {
        let exited = wait_for("the outbox process to exit", deadline, || {
            let status = self.child.try_wait().expect("try_wait");
            async move { status }
        })
        .await;
        let status = match exited {
            Ok(status) => status,
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{e}; stderr:\n{}", self.lines().join("\n"));
            }
        };
        // The process has exited, so its stderr is at its end: the reader returns at once.
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let lines = self.lines.lock().expect("lines").clone();
        (status, lines)
    }
}

/// A test that fails (or forgets) leaves no process behind: the child is killed and reaped.
impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `cmd` to its end (at most `deadline`): the status, stderr lines and how long it took.
pub async fn run(cmd: Command, deadline: Duration) -> (ExitStatus, Vec<String>, Duration) {
    let running = Running::spawn(cmd);
    let started = running.started;
    let (status, lines) = running.finish(deadline).await;
    (status, lines, started.elapsed())
}

/// A local port with nothing listening on it.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// A database URL on a closed port.
pub fn closed_database_url() -> String {
    format!("postgres://postgres@127.0.0.1:{}/test", closed_port())
}

/// Checks the output of a command that failed at run time: exit status 1, and exactly one stderr
/// line `outbox: error: ...`, containing `needle` (library threads may still log around it);
/// returns that line.
pub fn assert_failed_with(status: ExitStatus, lines: &[String], needle: &str) -> String {
    let all = lines.join("\n");
    assert_eq!(status.code(), Some(1), "exit status 1 expected, got {status}; stderr:\n{all}");
    let errors: Vec<&String> = lines.iter().filter(|l| l.starts_with("outbox: error: ")).collect();
    assert_eq!(errors.len(), 1, "one error line expected:\n{all}");
    assert!(errors[0].contains(needle), "{needle:?} missing from the error line: {}", errors[0]);
    assert!(!all.contains("panicked") && !all.contains(" at line "), "panic or source position:\n{all}");
    errors[0].clone()
}

/// A plain HTTP/1.1 GET of `path` on `127.0.0.1:port`: the status code and the body, or `None`
/// if nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// Runs `outbox ARGS` against the database `url` to its end, on a blocking thread: its exit
/// status, stdout and stderr.
pub async fn output(url: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = outbox();
    cmd.args(args).env("DATABASE_URL", url);
    tokio::task::spawn_blocking(move || cmd.output().expect("run outbox")).await.expect("join")
}

/// Waits until `path` on `127.0.0.1:port` answers `status`; returns the body.
pub async fn wait_status(port: u16, path: &str, status: u16, deadline: Duration) -> String {
    wait_for(&format!("{path} to answer {status}"), deadline, || async {
        match http_get(port, path).await {
            Some((got, body)) if got == status => Ok(body),
            Some((got, _)) => Err(format!("status {got}")),
            None => Err("no answer".to_owned()),
        }
    })
    .await
    .expect("status")
}

/// The value of an unlabelled sample `name` in a Prometheus text page.
pub fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
