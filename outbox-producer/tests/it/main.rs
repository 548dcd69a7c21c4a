//! The producer's tests on the real PostgreSQL: enqueueing in the caller's transaction,
//! idempotency keys, migrations and metrics. One binary, one module per concern.

mod enqueue;
mod enqueue_strings;
mod idempotent;
mod metrics;
mod migrate;
mod plans;
