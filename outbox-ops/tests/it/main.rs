//! The operator side's tests on the real PostgreSQL: retention (deletion in bounded batches,
//! scrubbing, expired idempotency keys). One binary, one module per concern.

mod retention;
