//! The outbox project's own system tests and the support its crates' tests share. Not published:
//! users test their flows with `outbox-testkit`.
//!
//! - [`sizes`]: how big each test's workload is in the fast tier (`cargo test --workspace`) and in
//!   the long tier (`cargo test --workspace -- --ignored`), in one place.
//! - [`count`] and [`fill`]: the scalar query and the committed backlog most tests start from.
//!
//! The tests themselves are in `tests/`: `system` (the ten failure scenarios and the chaos soak),
//! `cluster` (a three-node RabbitMQ cluster), and `logs`, `traces` and `close`, each in a binary of
//! its own because it installs a process-wide log subscriber.

mod backlog;
pub mod sizes;

pub use backlog::{Load, fill};

/// The single `bigint` that `sql` returns (a count, a sum), or a panic naming the query.
pub async fn count(pool: &sqlx::PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}
