//! Benchmark children: this program run again with a hidden command (`relay-process`,
//! `consumer-process`), so that the peak RSS measured is the relay's or the consumer's own.
//!
//! The child gets its URLs through the environment (never its command line, which every user of
//! the machine can read), says [`READY`] on standard output when it is about to run, may answer
//! one-line requests on standard input, and shuts down gracefully at the end of its standard input.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::error::BoxError;
use crate::wait::{secs, within};

/// Environment variables that carry the URLs to a child.
pub(crate) const ENV_DATABASE_URL: &str = "OUTBOX_BENCH_DATABASE_URL";
pub(crate) const ENV_AMQP_URL: &str = "OUTBOX_BENCH_AMQP_URL";
/// The line a child prints when it is about to run.
pub(crate) const READY: &str = "ready";
/// How long a child may take to get ready, to answer a request, or to shut down.
const PATIENCE: Duration = crate::wait::FLOOR;

/// The URLs of a child, from the environment, where [`Subprocess::spawn`] puts them.
#[derive(Debug, clap::Args)]
pub(crate) struct Urls {
    /// PostgreSQL URL.
    #[arg(long, env = ENV_DATABASE_URL, hide_env_values = true)]
    pub(crate) database_url: String,
    /// RabbitMQ URL.
    #[arg(long, env = ENV_AMQP_URL, hide_env_values = true)]
    pub(crate) amqp_url: String,
}

/// A running child.
pub(crate) struct Subprocess {
    /// What it is, for error messages ("the relay process").
    what: &'static str,
    pub(crate) child: Child,
    /// Closed to ask the child to shut down.
    stdin: Option<ChildStdin>,
    /// Kept open until the child ends, so that it never writes into a closed pipe.
    stdout: BufReader<ChildStdout>,
}

impl Subprocess {
    /// Runs `outbox-bench <args>` with the URLs in its environment and waits until it is ready.
    pub(crate) async fn spawn(
        what: &'static str,
        args: &[&str],
        database_url: &str,
        amqp_url: &str,
    ) -> Result<Self, BoxError> {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(args)
            .env(ENV_DATABASE_URL, database_url)
            .env(ENV_AMQP_URL, amqp_url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| format!("{what} has no standard output"))?;
        let mut process = Self { what, child, stdin, stdout: BufReader::new(stdout) };
        let line = process.read_line().await?;
        if line != READY {
            return Err(format!("{what} did not get ready (said {line:?})").into());
        }
        Ok(process)
    }

    /// Reads the child's next line of output, without its line break.
    async fn read_line(&mut self) -> Result<String, BoxError> {
        let mut line = String::new();
        let read =
            within(format_args!("{} to say a line", self.what), PATIENCE, self.stdout.read_line(&mut line)).await?;
        if read == 0 {
            return Err(format!("{} closed its standard output", self.what).into());
        }
        Ok(line.trim_end().to_owned())
    }

    /// Sends one request line and returns the child's one-line answer.
    pub(crate) async fn request(&mut self, request: &str) -> Result<String, BoxError> {
        let stdin = self.stdin.as_mut().ok_or_else(|| format!("{} is shutting down", self.what))?;
        let sent = async {
            stdin.write_all(format!("{request}\n").as_bytes()).await?;
            stdin.flush().await
        };
        within(format_args!("{} to take the request {request:?}", self.what), PATIENCE, sent).await?;
        self.read_line().await
    }

    /// Fails if the child has ended.
    pub(crate) fn check_alive(&mut self) -> Result<(), BoxError> {
        match self.child.try_wait()? {
            Some(status) => Err(format!("{} ended early: {status}", self.what).into()),
            None => Ok(()),
        }
    }

    /// Peak and current resident set size of the child, in kB (`VmHWM`, `VmRSS`).
    pub(crate) async fn memory(&self) -> Result<(u64, u64), BoxError> {
        let pid = self.child.id().ok_or_else(|| format!("{} has ended", self.what))?;
        let status = tokio::fs::read_to_string(format!("/proc/{pid}/status")).await?;
        let field = |name: &str| status_kib(&status, name).ok_or_else(|| format!("no {name} in /proc/{pid}/status"));
        Ok((field("VmHWM")?, field("VmRSS")?))
    }

    /// Closes the child's standard input, its signal to shut down gracefully, and waits for it.
    pub(crate) async fn stop(mut self) -> Result<(), BoxError> {
        drop(self.stdin.take());
        match tokio::time::timeout(PATIENCE, self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if status.success() { Ok(()) } else { Err(format!("{} failed: {status}", self.what).into()) }
            }
            Err(_) => {
                self.child.kill().await?;
                Err(format!("waited {} for {} to shut down, without an answer (killed)", secs(PATIENCE), self.what)
                    .into())
            }
        }
    }
}

/// The value in kB of the field `name` of a `/proc/<pid>/status` or `/proc/meminfo` text (`VmHWM`,
/// `MemTotal`).
pub(crate) fn status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
}

/// The child's side: the request lines of standard input, then `None` at its end (the signal to
/// shut down). Read on a plain thread: a blocking read must not hold up the runtime's shutdown.
pub(crate) fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Initialises logging of a child to standard error (`RUST_LOG`, warnings by default); standard
/// output is for the parent.
pub(crate) fn init_child_logging() {
    outbox_testkit::init_logging("warn");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\toutbox-bench\nVmPeak:\t  300000 kB\nVmHWM:\t   23040 kB\nVmRSS:\t   20480 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(23_040));
        assert_eq!(status_kib(status, "VmRSS"), Some(20_480));
        assert_eq!(status_kib(status, "VmSwap"), None);
        assert_eq!(status_kib("VmHWMX:\t1 kB\n", "VmHWM"), None);
    }
}
