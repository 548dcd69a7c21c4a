//! Start-up of the `outbox` command against servers that are down, misconfigured or unmigrated:
//! the real cause, at once when retrying cannot help, one line, exit status 1, never a password;
//! the relay waits for a server that is down, with a log line per attempt, and stops on SIGTERM.

use std::time::Duration;

use outbox_testkit::TestDb;

use crate::support::{AT_ONCE, Running, assert_failed_with, closed_database_url, closed_port, outbox, run};

/// A relay command on `database_url` and `amqp_url`.
fn relay(database_url: &str, amqp_url: &str) -> std::process::Command {
    let mut cmd = outbox();
    cmd.args(["relay", "--exchange", "outbox.cli.startup", "--no-declare-exchange"])
        .env("DATABASE_URL", database_url)
        .env("AMQP_URL", amqp_url);
    cmd
}

#[tokio::test]
async fn status_and_migrate_show_a_refused_connection_within_their_connect_timeout() {
    // `status` with the default timeout (5 s), `migrate` with a shorter one.
    for (args, limit) in [(&["status"][..], 5.0), (&["migrate", "--connect-timeout-secs", "1"][..], 1.0)] {
        let mut cmd = outbox();
        cmd.args(args).env("DATABASE_URL", closed_database_url());
        let (status, lines, took) = run(cmd, Duration::from_secs(60)).await;
        let line = assert_failed_with(status, &lines, "refused");
        assert!(line.contains("cannot connect to the database"), "{line}");
        // It tried for its timeout, and not much longer (a generous margin for a busy host).
        assert!(took >= Duration::from_secs_f64(limit), "{args:?} gave up after {took:?}");
        assert!(took < Duration::from_secs_f64(limit + 15.0), "{args:?} took {took:?}");
    }
}

#[tokio::test]
async fn malformed_database_urls_and_refused_roles_fail_at_once() {
    let unknown_role = TestDb::new().await.expect("db");
    let role_url = unknown_role.url().replacen("postgres://postgres", "postgres://no_such_role_x:s3cr3t-pw", 1);
    assert!(role_url.contains("no_such_role_x"), "unexpected test database URL shape");
    let cases = [
        ("mysql://u:s3cr3t-pw@127.0.0.1/app", "DATABASE_URL is not a valid PostgreSQL URL"),
        ("postgres://u:s3cr3t-pw@127.0.0.1:abc/app", "DATABASE_URL is not a valid PostgreSQL URL"),
        (role_url.as_str(), "the database refused the connection"),
    ];
    for (url, expected) in cases {
        for command in ["status", "relay"] {
            let mut cmd = relay(url, "amqp://guest:guest@127.0.0.1:5672/%2f");
            if command == "status" {
                cmd = outbox();
                cmd.arg("status").env("DATABASE_URL", url);
            }
            let (status, lines, took) = run(cmd, AT_ONCE).await;
            assert_failed_with(status, &lines, expected);
            assert!(!lines.join("\n").contains("s3cr3t-pw"), "the password is shown: {lines:?}");
            assert!(took < AT_ONCE, "{command} on {expected}: {took:?}");
        }
    }
    unknown_role.close().await.expect("cleanup");
}

#[tokio::test]
async fn an_unmigrated_database_gets_the_migrate_hint() {
    let db = TestDb::empty().await.expect("db");
    let mut status_cmd = outbox();
    status_cmd.arg("status").env("DATABASE_URL", db.url());
    let (status, lines, _) = run(status_cmd, AT_ONCE).await;
    assert_failed_with(status, &lines, "run `outbox migrate`");
    let (status, lines, _) = run(relay(&db.url(), &outbox_testkit::amqp_url()), AT_ONCE).await;
    assert_failed_with(status, &lines, "run `outbox migrate`");
    db.close().await.expect("cleanup");
}

#[tokio::test]
async fn malformed_amqp_urls_fail_at_once_without_the_password() {
    // The database is down: a malformed URL must be refused before any wait for it.
    let database_url = closed_database_url();
    for url in [
        "amqp:guest:s3cr3t-pw@127.0.0.1:5672/%2f",
        "http://guest:s3cr3t-pw@127.0.0.1:5672/",
        "amqp://guest:s3cr3t-pw@127.0.0.1:abc/%2f",
    ] {
        let (status, lines, _) = run(relay(&database_url, url), AT_ONCE).await;
        assert_failed_with(status, &lines, "invalid AMQP URL");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(!lines[0].contains("s3cr3t-pw"), "{}", lines[0]);
    }
    // A cluster's nodes, the second malformed: named by its place in the list.
    let nodes = "amqp://guest:guest@127.0.0.1:5672/%2f,http://guest:s3cr3t-pw@127.0.0.1:5673/";
    let (status, lines, _) = run(relay(&database_url, nodes), AT_ONCE).await;
    assert_failed_with(status, &lines, "invalid AMQP URL");
    assert!(lines[0].contains("node 2") && !lines[0].contains("s3cr3t-pw"), "{}", lines[0]);
}

#[tokio::test]
async fn wrong_broker_credentials_fail_at_once() {
    let db = TestDb::new().await.expect("db");
    let (status, lines, _) = run(relay(&db.url(), "amqp://guest:wrong-pw-x@127.0.0.1:5672/%2f"), AT_ONCE).await;
    assert_failed_with(status, &lines, "the broker refused the connection");
    assert!(!lines.join("\n").contains("wrong-pw-x"), "{lines:?}");
    db.close().await.expect("cleanup");
}

/// The relay logs one line with the cause per attempt while `server` is down, then exits 0 on
/// SIGTERM.
async fn waits_then_stops_on_sigterm(relay: Running, server: &str) {
    let waiting = format!("{server} is not reachable; retrying until it answers");
    relay
        .wait_for_lines("three attempts logged", 3, Duration::from_secs(60), |l| {
            l.contains(&waiting) && l.contains("refused")
        })
        .await;
    let attempts: Vec<String> = relay.lines().into_iter().filter(|l| l.contains(&waiting)).collect();
    for (n, line) in attempts.iter().enumerate().take(3) {
        assert!(line.contains(&format!("attempt={}", n + 1)), "attempt {} expected: {line}", n + 1);
    }
    relay.signal("-TERM");
    let (status, lines) = relay.finish(Duration::from_secs(30)).await;
    assert!(status.success(), "clean exit expected, got {status}; stderr:\n{}", lines.join("\n"));
    assert!(!lines.iter().any(|l| l.starts_with("outbox: error:") || l.contains("relay started")), "{lines:?}");
}

#[tokio::test]
async fn a_relay_waits_for_a_database_that_is_down_and_stops_on_sigterm() {
    let relay = Running::spawn(relay(&closed_database_url(), &outbox_testkit::amqp_url()));
    waits_then_stops_on_sigterm(relay, "the database").await;
}

#[tokio::test]
async fn a_relay_waits_for_a_broker_that_is_down_and_stops_on_sigterm() {
    let db = TestDb::new().await.expect("db");
    let amqp_url = format!("amqp://guest:guest@127.0.0.1:{}/%2f", closed_port());
    let relay = Running::spawn(relay(&db.url(), &amqp_url));
    waits_then_stops_on_sigterm(relay, "the broker").await;
    db.close().await.expect("cleanup");
}
