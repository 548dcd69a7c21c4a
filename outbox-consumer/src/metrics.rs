//! The consumer's metrics, through the `metrics` facade (the service picks the exporter): every
//! name and its description in one place. [`describe`] is called when an inbox layer or a runner
//! is built, so that an exporter installed before shows the descriptions.

use ::metrics::describe_counter;

/// Events handled by an inbox, labels `consumer` and `outcome` (`applied`, `duplicate`, `stale`,
/// `parked`, `applied_from_parking`, ...) (counter).
pub(crate) const EVENTS: &str = "inbox_events_total";
/// Deliveries that did not decode, label `reason` (counter).
pub(crate) const BAD_DELIVERIES: &str = "inbox_bad_deliveries_total";
/// Deliveries published to the dead-letter exchange, label `reason` (counter).
pub(crate) const DEAD_LETTERS: &str = "inbox_dead_letters_total";

/// Registers the description of every consumer metric with the installed recorder.
pub(crate) fn describe() {
    describe_counter!(EVENTS, "Events handled by an inbox (labels consumer, outcome).");
    describe_counter!(BAD_DELIVERIES, "Deliveries that did not decode (label reason).");
    describe_counter!(DEAD_LETTERS, "Deliveries dead-lettered (label reason).");
}
