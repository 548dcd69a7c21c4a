//! The operator side's tests on the real PostgreSQL: the backlog read from a queue position,
//! retention (deletion in bounded batches, scrubbing, expired idempotency keys) and the read of
//! what holds back the xmin horizon, replay jobs' reads. One binary, one module per concern.

mod backlog;
mod horizon;
mod replay;
mod retention;
