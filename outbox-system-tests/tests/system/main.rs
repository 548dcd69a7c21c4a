//! The system tests: the ten failure scenarios of docs/failure-scenarios.md, each through the whole
//! system with its fault injected, and the chaos soak (processes killed, connections cut, backends
//! terminated while a producer writes). Sizes from `outbox_system_tests::sizes`.

mod chaos;
mod pooler;
mod readme;
mod replay;
mod scenarios;
mod topology;
