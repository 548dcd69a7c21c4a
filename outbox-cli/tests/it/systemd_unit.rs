//! The shipped systemd unit (`ops/systemd/outbox-relay.service`) passes `systemd-analyze verify`
//! with its `ExecStart` pointing at the binary this build made, with no warning (a misspelt
//! directive or signal is only a warning to systemd); without `systemd-analyze` the check is
//! skipped, and the test says so. Its command line parses as `outbox relay` flags.

use std::path::Path;
use std::process::Command;

const UNIT: &str = "ops/systemd/outbox-relay.service";

fn unit() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(UNIT);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_systemd_unit_verifies_and_runs_the_relay() {
    let unit = unit();
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("an ExecStart line");
    let (binary, flags) = exec.split_once(' ').expect("a binary and its arguments");
    assert_eq!(binary, "/usr/local/bin/outbox");
    assert!(flags.starts_with("relay "), "the unit runs `outbox relay`: {flags}");
    let help = Command::new(env!("CARGO_BIN_EXE_outbox")).args(["relay", "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in flags.split_whitespace().filter(|w| w.starts_with("--")) {
        assert!(help.contains(flag), "the unit's {flag} is an `outbox relay` flag");
    }

    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("systemd-analyze is not installed: `systemd-analyze verify` skipped");
        return;
    };
    assert!(probe.status.success());
    let dir = std::env::temp_dir().join(format!("outbox-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let copy = dir.join("outbox-relay.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/outbox", env!("CARGO_BIN_EXE_outbox"))).expect("copy");
    let out = Command::new("systemd-analyze").arg("verify").arg(&copy).output().expect("systemd-analyze");
    let _ = std::fs::remove_dir_all(&dir);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify:\n{said}");
}
