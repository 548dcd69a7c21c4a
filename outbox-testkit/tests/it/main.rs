//! The testkit's own tests: its faults, harness, proxy and reconciliation do what
//! docs/testing.md says. `user_flow/` holds the complete user test the crate documentation shows.

mod faults;
mod harness;
mod proxy;
mod reconcile;
