//! The `outbox` binary's tests: each runs the real binary against the real servers and checks
//! what an operator sees (output, exit status, logs, metrics). One binary, one module per
//! command or concern; `acceptance` has a binary of its own because it installs a process-wide
//! metrics recorder.

#[allow(dead_code, unreachable_pub)]
#[path = "../../src/args.rs"]
mod args;
mod cleanup;
mod flags;
mod inbox;
mod log_redaction;
mod many_databases;
mod many_repairs;
mod metrics_endpoint;
mod operator_failures;
mod ops_files;
mod reconcile;
mod relay_process;
mod repair;
mod replay;
mod roles;
mod sealed;
mod secrets;
mod startup;
mod status;
mod support;
mod systemd_unit;
mod tls;
