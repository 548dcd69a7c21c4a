//! The operator side's metrics, through the `metrics` facade: every name and its description in
//! one place. [`describe`] is called when a retention job is built.

use ::metrics::describe_counter;

/// Rows deleted by retention (counter).
pub(crate) const RETENTION_DELETED: &str = "outbox_retention_deleted_total";

/// Payloads of published rows cleared by retention; the rows stay (counter).
pub(crate) const RETENTION_SCRUBBED: &str = "outbox_retention_scrubbed_total";

/// Registers the description of every operator-side metric with the installed recorder.
pub(crate) fn describe() {
    describe_counter!(RETENTION_DELETED, "Outbox rows deleted by retention.");
    describe_counter!(RETENTION_SCRUBBED, "Payloads of published outbox rows cleared by retention.");
}
