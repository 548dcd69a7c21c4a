//! No command shows a password: every command, its successes and its failures, and the help of
//! every command with DATABASE_URL and AMQP_URL set, at `RUST_LOG=trace`, with a password in the
//! database URL (trust authentication ignores it) and a wrong one in the broker URL (RabbitMQ
//! checks it: the relay must refuse to start, and say so without quoting it).

use std::process::{Command, ExitStatus};
use std::time::Duration;

use crate::support::{Running, assert_failed_with, closed_port, outbox};
use clap::CommandFactory;
use outbox_testkit::{TestBroker, TestDb};
use sqlx::ConnectOptions;

use crate::args::Cli;

const WAIT: Duration = Duration::from_secs(90);

/// A password no output may hold.
fn secret() -> String {
    format!("s3cr3t-{}", outbox_testkit::unique_suffix())
}

/// `url` (`postgres://user@...` or `amqp://user:password@...`) with `password` as its password.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let (info, host) = rest.split_once('@').expect("user");
    let user = info.split(':').next().unwrap_or(info);
    format!("{scheme}://{user}:{password}@{host}")
}

/// Runs `cmd` at trace level to its end; asserts that neither stdout nor stderr holds `secrets`.
/// Returns the exit status and stderr lines.
async fn without(secrets: &[&str], mut cmd: Command, what: &str) -> (ExitStatus, Vec<String>) {
    cmd.env("RUST_LOG", "trace");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run outbox")).await.expect("join");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    for secret in secrets {
        assert!(!stdout.contains(secret), "{what}: the password on stdout:\n{stdout}");
        assert!(!stderr.contains(secret), "{what}: the password on stderr:\n{stderr}");
    }
    (out.status, stderr.lines().map(str::to_owned).collect())
}

/// `outbox ARGS` with both URLs in the environment.
fn command(database_url: &str, amqp_url: &str, args: &[&str]) -> Command {
    let mut cmd = outbox();
    cmd.args(args).env("DATABASE_URL", database_url).env("AMQP_URL", amqp_url);
    cmd
}

/// Every command path (`["events", "list"]`, ...), at any depth.
fn command_paths(cmd: &clap::Command, path: &[String], found: &mut Vec<Vec<String>>) {
    found.push(path.to_vec());
    for sub in cmd.get_subcommands() {
        let mut deeper = path.to_vec();
        deeper.push(sub.get_name().to_owned());
        command_paths(sub, &deeper, found);
    }
}

#[tokio::test]
async fn the_help_of_every_command_and_usage_errors_show_no_url() {
    let (db_secret, amqp_secret) = (secret(), secret());
    let db_url = format!("postgres://postgres:{db_secret}@127.0.0.1:{}/app", closed_port());
    let amqp_url = format!("amqp://guest:{amqp_secret}@127.0.0.1:{}/%2f", closed_port());
    let mut paths = Vec::new();
    command_paths(&Cli::command(), &[], &mut paths);
    assert!(paths.len() > 10, "the walk finds the commands: {paths:?}");
    for path in paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let what = args.join(" ");
        let (status, _) = without(&[&db_secret, &amqp_secret], command(&db_url, &amqp_url, &args), &what).await;
        assert!(status.success(), "{what}: {status}");
    }
    // Usage errors, the URLs given as flags.
    for args in [
        vec!["--database-url", &db_url, "status", "--bogus"],
        vec!["relay", "--amqp-url", &amqp_url, "--batch-size", "0"],
        vec!["--database-url", &db_url, "grant", "--relay-role", "pg_relay"],
    ] {
        let what = args.join(" ");
        let (status, _) = without(&[&db_secret, &amqp_secret], outbox_with_args(&args), &what).await;
        assert_eq!(status.code(), Some(2), "{what}");
    }
}

fn outbox_with_args(args: &[&str]) -> Command {
    let mut cmd = outbox();
    cmd.args(args);
    cmd
}

#[tokio::test]
async fn no_command_shows_the_database_password() {
    let db = TestDb::new().await.expect("db");
    let password = secret();
    let url = with_password(&db.url(), &password);
    assert!(url.contains(&password));
    let amqp = outbox_testkit::amqp_url();
    for args in [
        &["migrate"][..],
        &["status"],
        &["status", "--json"],
        &["events", "list", "--entity", "x"],
        &["quarantine", "list"],
        &["inbox", "status", "c"],
        &["cleanup", "--older-than", "30d", "--dry-run"],
        &["grant"],
        &["events", "show", "00000000-0000-0000-0000-000000000001"],
    ] {
        let what = args.join(" ");
        let (status, lines) = without(&[&password], command(&url, &amqp, args), &what).await;
        let expected = if args.starts_with(&["events", "show"]) { 1 } else { 0 };
        assert_eq!(status.code(), Some(expected), "{what}:\n{}", lines.join("\n"));
    }

    // Failures: an unknown database, a server that does not answer.
    let gone = db.connect_options().clone().database(&format!("{}_gone", db.name()));
    let unknown = with_password(gone.to_url_lossy().as_str(), &password);
    let (status, lines) = without(&[&password], command(&unknown, &amqp, &["status"]), "unknown database").await;
    assert_failed_with(status, &lines, "does not exist");
    let closed = format!("postgres://postgres:{password}@127.0.0.1:{}/test", closed_port());
    let cmd = command(&closed, &amqp, &["status", "--connect-timeout-secs", "0.5"]);
    let (status, lines) = without(&[&password], cmd, "closed port").await;
    assert_failed_with(status, &lines, "cannot connect");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn the_relay_shows_neither_password() {
    let db = TestDb::new().await.expect("db");
    let password = secret();
    let url = with_password(&db.url(), &password);

    let broker = TestBroker::new().await.expect("broker");
    let exchange = broker.declare_exchange("secrets", lapin::ExchangeKind::Topic).await.expect("exchange");

    // Until ready and claiming, then SIGTERM.
    let args = ["relay", "--exchange", &exchange, "--no-declare-exchange", "--poll-interval-ms", "100"];
    let mut cmd = command(&url, &outbox_testkit::amqp_url(), &args);
    cmd.env("RUST_LOG", "trace");
    let running = Running::spawn(cmd);
    running.wait_for_lines("the relay to start", 1, WAIT, |l| l.contains("relay started")).await;
    running.wait_for_lines("three claims", 3, WAIT, |l| l.contains("sqlx::query") && l.contains("WITH scanned")).await;
    running.signal("-TERM");
    let (status, lines) = running.finish(WAIT).await;
    let log = lines.join("\n");
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(!log.contains(&password), "the database password in the relay's log:\n{log}");

    // A wrong broker password: refused at once, without quoting it.
    let wrong = secret();
    let amqp = with_password(&outbox_testkit::amqp_url(), &wrong);
    let args = ["relay", "--exchange", &exchange, "--no-declare-exchange"];
    let (status, lines) = without(&[&password, &wrong], command(&url, &amqp, &args), "wrong AMQP password").await;
    assert_failed_with(status, &lines, "refused");
    broker.close().await.expect("broker cleanup");
    db.close().await.expect("cleanup");
}
