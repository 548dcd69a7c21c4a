//! Every operator command on a database it cannot use: a malformed URL and a server that does not
//! answer each end the command with one line, exit status 1, and never the password.

use std::time::Duration;

use crate::support::{assert_failed_with, closed_port, outbox, run};

const ID: &str = "00000000-0000-0000-0000-000000000001";

/// Every command that needs the database, with the arguments it requires.
fn commands(dir: &std::path::Path) -> Vec<Vec<String>> {
    let changes = dir.join("changes.sql");
    std::fs::write(&changes, "SELECT 'order-1', 1").expect("query file");
    let changes = changes.display().to_string();
    [
        vec!["migrate"],
        vec!["status"],
        vec!["events", "show", ID],
        vec!["events", "list", "--entity", "order-1"],
        vec!["quarantine", "list"],
        vec!["quarantine", "show", ID],
        vec!["quarantine", "retry", ID],
        vec!["quarantine", "skip", ID, "--yes"],
        vec!["inbox", "status", "shipping"],
        vec!["inbox", "gaps", "shipping"],
        vec!["inbox", "failed", "shipping"],
        vec!["inbox", "retry", "shipping", ID],
        vec!["inbox", "skip", "shipping", ID, "--yes"],
        vec!["inbox", "skip-gap", "shipping", "order-1", "--yes"],
        vec!["cleanup", "--older-than", "7d"],
        vec!["reconcile", "--changes-sql", &changes],
        vec!["grant", "--apply"],
    ]
    .into_iter()
    .map(|args| args.into_iter().map(str::to_owned).collect())
    .collect()
}

#[tokio::test]
async fn every_command_says_why_it_cannot_use_the_database_in_one_line() {
    let dir = std::env::temp_dir().join(format!("outbox-failures-{}", outbox_testkit::unique_suffix()));
    std::fs::create_dir_all(&dir).expect("dir");
    let closed = format!("postgres://postgres:s3cr3t-pw@127.0.0.1:{}/app", closed_port());
    for args in commands(&dir) {
        for (url, needle) in [
            ("postgres://postgres:s3cr3t-pw@127.0.0.1:notaport/app", "DATABASE_URL is not a valid PostgreSQL URL"),
            (closed.as_str(), "cannot connect"),
        ] {
            let mut cmd = outbox();
            cmd.args(&args).args(["--connect-timeout-secs", "0.5"]).env("DATABASE_URL", url);
            let (status, lines, _) = run(cmd, Duration::from_secs(60)).await;
            let line = assert_failed_with(status, &lines, needle);
            assert!(!lines.join("\n").contains("s3cr3t-pw"), "{args:?}: the password is shown: {line}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
