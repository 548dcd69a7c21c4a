//! The demo, run twice under one name: each run is clean (exit status 0) and logs no warning or
//! error, in particular none from its own broker set-up.

use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

use outbox_testkit::{TestBroker, TestDb};
use sqlx::ConnectOptions;

/// Drops the demo's databases at the end of the test or on a panic, over a connection of its own
/// to the testkit's database (which must still exist). If this test process is killed, the
/// testkit's sweep removes them later: their names start like the testkit's own.
struct DropDatabases {
    admin: sqlx::postgres::PgConnectOptions,
    names: Vec<String>,
}

impl Drop for DropDatabases {
    fn drop(&mut self) {
        let (admin, names) = (self.admin.clone(), self.names.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                let mut conn = admin.connect().await?;
                for name in names {
                    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await?;
                }
                Ok::<(), sqlx::Error>(())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop the databases {:?}", self.names);
        }
    }
}

fn run_demo(server_url: &str, name: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["300", "30"])
        .env("DATABASE_URL", server_url)
        .env("AMQP_URL", outbox_testkit::amqp_url())
        .env("DEMO_NAME", name)
        .env_remove("RUST_LOG")
        .output()
        .expect("run the demo")
}

/// Lines of tracing's fmt output at WARN or ERROR, with or without ANSI colours.
fn warnings_and_errors(text: &str) -> Vec<String> {
    text.lines().map(strip_ansi).filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... final letter
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn two_runs_are_clean_and_log_no_warning_or_error() {
    let admin = TestDb::empty().await.expect("db");
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let name = format!("outbox_t_{secs}_{}_demo", outbox_testkit::unique_suffix());
    let drop_dbs = DropDatabases {
        admin: admin.connect_options().clone(),
        names: vec![format!("{name}_orders"), format!("{name}_shipping")],
    };
    let broker = TestBroker::new().await.expect("broker");
    broker.remember_exchange(&format!("{name}.orders"));
    broker.remember_exchange(&format!("{name}.shipping.dlx"));
    for q in ["0", "1", "2", "3", "dead"] {
        broker.remember_queue(&format!("{name}.shipping.{q}"));
    }

    for run in 1..=2 {
        let output = tokio::task::spawn_blocking({
            let (url, name) = (admin.url(), name.clone());
            move || run_demo(&url, &name)
        })
        .await
        .expect("join");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "run {run}: {}\n{text}", output.status);
        assert!(text.contains("clean: every change"), "run {run} not clean:\n{text}");
        let noisy = warnings_and_errors(&text);
        assert!(noisy.is_empty(), "run {run} logged warnings or errors:\n{}", noisy.join("\n"));
    }

    broker.close().await.expect("broker cleanup");
    drop(drop_dbs);
    admin.close().await.expect("db cleanup");
}

#[test]
fn warn_and_error_lines_are_found_with_and_without_colours() {
    let plain = "2026-12-04T20:37:29.482684Z ERROR lapin::channels: Connection error\n\
                 2026-12-04T20:37:29.482684Z  WARN outbox: x\n2026-12-04T20:37:29.482684Z  INFO outbox: x";
    assert_eq!(warnings_and_errors(plain).len(), 2);
    let coloured = "\u{1b}[2m2026-12-04T20:37:29.482684Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m \u{1b}[2mlapin::channels\u{1b}[0m\n\
                    \u{1b}[2m2026-12-04T20:37:29.482684Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mx\u{1b}[0m";
    assert_eq!(warnings_and_errors(coloured).len(), 2);
}
