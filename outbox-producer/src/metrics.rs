//! The producer side's metrics, through the `metrics` facade: every name and its description in
//! one place. [`describe`] is called when an `Outbox` is built.

use ::metrics::describe_counter;

/// Events written by `enqueue` / `enqueue_many` in this process, counted when written in the
/// caller's transaction (a transaction rolled back afterwards counted too) (counter).
pub(crate) const CREATED: &str = "outbox_events_created_total";

/// Registers the description of every producer-side metric with the installed recorder.
pub(crate) fn describe() {
    describe_counter!(CREATED, "Events enqueued by this process (counted in the caller's transaction).");
}
