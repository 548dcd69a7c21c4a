//! The consumer's metrics, through the `metrics` facade (the service picks the exporter): every
//! name and its description in one place. [`describe`] is called when an inbox layer or a runner
//! is built, so that an exporter installed before shows the descriptions.

use ::metrics::{Unit, counter, describe_counter, describe_gauge};

/// Events handled by an inbox, labels `consumer` and `outcome` (`applied`, `duplicate`, `stale`,
/// `parked`, `applied_from_parking`, ...) (counter).
pub(crate) const EVENTS: &str = "inbox_events_total";
/// Deliveries that did not decode, labels `consumer` and `reason` (counter).
pub(crate) const BAD_DELIVERIES: &str = "inbox_bad_deliveries_total";
/// Deliveries published to the dead-letter exchange, labels `consumer` and `reason` (counter).
pub(crate) const DEAD_LETTERS: &str = "inbox_dead_letters_total";

/// Processed event ids deleted by inbox retention, label `consumer` (counter).
pub(crate) const PRUNED: &str = "inbox_retention_deleted_total";

/// Entities with a parked gap, label `consumer` (gauge).
pub(crate) const ENTITIES_WITH_GAP: &str = "inbox_entities_with_gap";
/// Events parked, label `consumer` (gauge).
pub(crate) const PARKED: &str = "inbox_events_parked";
/// Age of the oldest parked event, label `consumer` (gauge, seconds).
pub(crate) const OLDEST_PARKED: &str = "inbox_oldest_parked_age_seconds";
/// Events that failed for good and wait for an operator, label `consumer` (gauge).
pub(crate) const FAILED: &str = "inbox_events_failed";

/// Registers the description of every consumer metric with the installed recorder.
pub(crate) fn describe() {
    describe_counter!(EVENTS, "Events handled by an inbox (labels consumer, outcome).");
    describe_counter!(BAD_DELIVERIES, "Deliveries that did not decode (labels consumer, reason).");
    describe_counter!(DEAD_LETTERS, "Deliveries dead-lettered (labels consumer, reason).");
    describe_counter!(PRUNED, "Processed event ids deleted by inbox retention (label consumer).");
    describe_gauge!(ENTITIES_WITH_GAP, "Entities with a parked gap (label consumer).");
    describe_gauge!(PARKED, "Events parked ahead of a gap (label consumer).");
    describe_gauge!(OLDEST_PARKED, Unit::Seconds, "Age of the oldest parked event (label consumer).");
    describe_gauge!(FAILED, "Events that failed for good and wait for an operator (label consumer).");
}

/// What the runner dead-letters for, besides a delivery that does not decode.
const HANDLER_REASONS: [&str; 3] = ["handler_failed", "attempts_exhausted", "unknown_tenant"];
/// Why a delivery does not decode, besides a breach of the wire contract (whose codes are many).
const DECODE_REASONS: [&str; 5] =
    ["unknown_content_type", "unparsable_payload", "payload_too_large", "headers_too_large", "sealed_payload"];

/// Creates the counters of `consumer` with each label value known in advance (outcomes, the
/// runner's dead-letter reasons) when a runner starts, so that a fresh deployment's `/metrics`
/// shows zeros and its alerts read 0 instead of "no data". The gauges are set by the first
/// reading of the inbox, at start.
pub(crate) fn initialise(consumer: &str) {
    for outcome in ["applied", "duplicate", "stale", "parked", "applied_from_parking"] {
        counter!(EVENTS, "consumer" => consumer.to_owned(), "outcome" => outcome).increment(0);
    }
    for reason in DECODE_REASONS {
        counter!(BAD_DELIVERIES, "consumer" => consumer.to_owned(), "reason" => reason).increment(0);
    }
    for reason in HANDLER_REASONS.into_iter().chain(DECODE_REASONS) {
        counter!(DEAD_LETTERS, "consumer" => consumer.to_owned(), "reason" => reason).increment(0);
    }
    counter!(PRUNED, "consumer" => consumer.to_owned()).increment(0);
}
