//! The relay's metrics, through the `metrics` facade (the service picks the exporter): every name
//! and its description in one place. [`describe`] is called when a relay is built, so that an
//! exporter installed before shows the descriptions.

use ::metrics::{Label, Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use outbox_types::FailureKind;

/// Events the broker confirmed and the relay recorded as published (counter).
pub(crate) const PUBLISHED: &str = "outbox_published_total";
/// Events quarantined, by the retry policy or as corrupt rows (counter).
pub(crate) const QUARANTINED: &str = "outbox_quarantined_total";
/// Batches whose claim another relay took over before their outcome was recorded (counter).
pub(crate) const LOST_CLAIMS: &str = "outbox_lost_claims_total";
/// Failed publishes by classified kind, label `kind` (counter).
pub(crate) const PUBLISH_FAILURES: &str = "outbox_publish_failures_total";
/// Messages handed to the broker, first attempts and retries alike (counter).
pub(crate) const PUBLISH_ATTEMPTS: &str = "outbox_publish_attempts_total";
/// Failed publishes the retry policy scheduled for another attempt, label `kind` (counter).
pub(crate) const PUBLISH_RETRIES: &str = "outbox_publish_retries_total";
/// Claimed rows whose lease had expired in another claim, taken over by this relay (counter).
pub(crate) const TAKEOVERS: &str = "outbox_lease_takeovers_total";
/// Claims, label `found` = `rows` or `none` (counter).
pub(crate) const CLAIMS: &str = "outbox_relay_claims_total";
/// Vacuums of `outbox_events` the relay ran itself (counter).
pub(crate) const VACUUMS: &str = "outbox_relay_vacuums_total";
/// Vacuums the relay left out because the horizon had not moved since its last one (counter).
pub(crate) const VACUUMS_SKIPPED: &str = "outbox_relay_vacuums_skipped_total";
/// From an event's commit to its confirm (histogram, seconds).
pub(crate) const COMMIT_TO_CONFIRM: &str = "outbox_commit_to_confirm_seconds";
/// From a message's publish to its confirm (histogram, seconds).
pub(crate) const PUBLISH_TO_CONFIRM: &str = "outbox_publish_to_confirm_seconds";
/// An event's age when it was claimed (histogram, seconds).
pub(crate) const AGE_AT_CLAIM: &str = "outbox_event_age_at_claim_seconds";
/// How long a claim statement took (histogram, seconds).
pub(crate) const CLAIM_SECONDS: &str = "outbox_relay_claim_seconds";
/// How long recording a batch's outcomes took (histogram, seconds).
pub(crate) const RECORD_SECONDS: &str = "outbox_relay_record_seconds";
/// How long a vacuum took (histogram, seconds).
pub(crate) const VACUUM_SECONDS: &str = "outbox_relay_vacuum_seconds";

/// Events a replay job sent again, label `outcome` = `sent` (confirmed) or `passed_over`
/// (scrubbed payload, key not held) (counter).
pub(crate) const REPLAYED: &str = "outbox_replay_events_total";
/// Events the replay job this process runs has still to go through (gauge; 0 when it ends).
pub(crate) const REPLAY_REMAINING: &str = "outbox_replay_events_remaining";

/// The processes of the fleet this process belongs to, as it last saw them (gauge).
pub(crate) const FLEET_MEMBERS: &str = "outbox_fleet_members";
/// The databases in the fleet's list (gauge).
pub(crate) const FLEET_DATABASES: &str = "outbox_fleet_databases";
/// The databases this process relays now (gauge).
pub(crate) const FLEET_RELAYING: &str = "outbox_fleet_databases_relayed";
/// Whether this process relays the database, label `database` (gauge, 1 or 0).
pub(crate) const FLEET_RELAYED: &str = "outbox_fleet_database_relayed";
/// Whether a database this process relays fails its claims, label `database` (gauge, 1 or 0).
pub(crate) const FLEET_FAILING: &str = "outbox_fleet_database_failing";

/// Events waiting to be published, held ones included (gauge; exact up to 100,000).
pub(crate) const WAITING: &str = "outbox_events_waiting";
/// Events held behind a quarantined event of their entity (gauge).
pub(crate) const HELD: &str = "outbox_events_held";
/// Age of the oldest waiting event (gauge, seconds).
pub(crate) const OLDEST_WAITING: &str = "outbox_oldest_waiting_age_seconds";
/// Age of the oldest held event (gauge, seconds).
pub(crate) const OLDEST_HELD: &str = "outbox_oldest_held_age_seconds";
/// Events quarantined now, label `kind` (gauge).
pub(crate) const QUARANTINED_NOW: &str = "outbox_events_quarantined";
/// Rows claimed now whose lease has expired: a relay died or stalls with them (gauge).
pub(crate) const EXPIRED_LEASES: &str = "outbox_expired_leases";
/// Entities with events written and not yet published (gauge).
pub(crate) const ENTITIES_BEHIND: &str = "outbox_entities_behind";
/// The largest gap between an entity's last written and last published sequence (gauge).
pub(crate) const LARGEST_GAP: &str = "outbox_largest_entity_gap";
/// How long the oldest snapshot held by another session of the database has been held: vacuum
/// keeps every row version that died since (gauge, seconds; 0 when none).
pub(crate) const OLDEST_SNAPSHOT: &str = "outbox_oldest_snapshot_seconds";
/// How many transactions old the database's xmin horizon is, held by a session or a replication
/// slot (gauge; 0 when nothing holds it).
pub(crate) const HORIZON_XID_AGE: &str = "outbox_horizon_xid_age";

/// Registers the description and unit of every relay metric with the installed recorder.
pub(crate) fn describe() {
    describe_counter!(PUBLISHED, "Events the broker confirmed and the relay recorded as published.");
    describe_counter!(QUARANTINED, "Events quarantined (retry policy gave up, or a corrupt row).");
    describe_counter!(LOST_CLAIMS, "Batches whose claim another relay took over before their outcome was recorded.");
    describe_counter!(PUBLISH_FAILURES, "Failed publishes by classified kind (label kind).");
    describe_counter!(PUBLISH_ATTEMPTS, "Messages handed to the broker, first attempts and retries alike.");
    describe_counter!(
        PUBLISH_RETRIES,
        "Failed publishes scheduled for another attempt, by classified kind (label kind)."
    );
    describe_counter!(TAKEOVERS, "Claimed rows whose lease had expired, taken over from another claim.");
    describe_counter!(CLAIMS, "Claims of the relay (label found: rows or none).");
    describe_counter!(VACUUMS, "Vacuums of outbox_events run by the relay.");
    describe_counter!(
        VACUUMS_SKIPPED,
        "Vacuums of outbox_events the relay left out: the xmin horizon had not moved since its last one."
    );
    describe_counter!(
        REPLAYED,
        "Events replay jobs sent again (label outcome: sent, or passed_over for a scrubbed payload or a key not held)."
    );
    describe_gauge!(REPLAY_REMAINING, "Events the replay job this process runs has still to go through.");
    describe_gauge!(FLEET_MEMBERS, "Processes of the fleet, as this one last saw them.");
    describe_gauge!(FLEET_DATABASES, "Databases in the fleet's list.");
    describe_gauge!(FLEET_RELAYING, "Databases this process relays now.");
    describe_gauge!(FLEET_RELAYED, "Whether this process relays the database (label database): 1 or 0.");
    describe_gauge!(FLEET_FAILING, "Whether a database this process relays fails its claims (label database): 1 or 0.");
    describe_gauge!(WAITING, "Events waiting to be published, held ones included (exact up to 100,000).");
    describe_gauge!(HELD, "Events held behind a quarantined event of their entity.");
    describe_gauge!(OLDEST_WAITING, Unit::Seconds, "Age of the oldest waiting event.");
    describe_gauge!(OLDEST_HELD, Unit::Seconds, "Age of the oldest held event.");
    describe_gauge!(QUARANTINED_NOW, "Events quarantined now, by failure kind (label kind).");
    describe_gauge!(EXPIRED_LEASES, "Rows claimed now whose lease has expired.");
    describe_gauge!(ENTITIES_BEHIND, "Entities with events written and not yet published.");
    describe_gauge!(LARGEST_GAP, "Largest gap between an entity's last written and last published sequence.");
    describe_gauge!(
        OLDEST_SNAPSHOT,
        Unit::Seconds,
        "Age of the oldest snapshot another session of the database holds (vacuum keeps what died since)."
    );
    describe_gauge!(
        HORIZON_XID_AGE,
        "Transactions since the xmin horizon held back by a session's snapshot or a replication slot."
    );
    describe_histogram!(COMMIT_TO_CONFIRM, Unit::Seconds, "From an event's commit to the broker's confirm.");
    describe_histogram!(PUBLISH_TO_CONFIRM, Unit::Seconds, "From a message's publish to its confirm.");
    describe_histogram!(AGE_AT_CLAIM, Unit::Seconds, "An event's age when a relay claimed it.");
    describe_histogram!(CLAIM_SECONDS, Unit::Seconds, "Duration of a claim statement.");
    describe_histogram!(RECORD_SECONDS, Unit::Seconds, "Duration of recording a batch's outcomes.");
    describe_histogram!(VACUUM_SECONDS, Unit::Seconds, "Duration of a vacuum of outbox_events.");
}

/// Creates every counter and histogram the relay owns, with each label value known in advance
/// (failure kinds, claim results), when a relay starts: a fresh deployment's `/metrics` then shows
/// zeros, and its dashboards and alerts read 0 instead of "no data". The gauges are set by the
/// first reading of the backlog, at start.
pub(crate) fn initialise(labels: &[Label]) {
    let and = |key: &'static str, value: &'static str| {
        let mut all = labels.to_vec();
        all.push(Label::new(key, value));
        all
    };
    for name in [PUBLISHED, QUARANTINED, LOST_CLAIMS, PUBLISH_ATTEMPTS, TAKEOVERS, VACUUMS, VACUUMS_SKIPPED] {
        counter!(name, labels.to_vec()).increment(0);
    }
    for found in ["rows", "none"] {
        counter!(CLAIMS, and("found", found)).increment(0);
    }
    for kind in FailureKind::ALL {
        counter!(PUBLISH_FAILURES, and("kind", kind.as_str())).increment(0);
        counter!(PUBLISH_RETRIES, and("kind", kind.as_str())).increment(0);
    }
    for name in [COMMIT_TO_CONFIRM, PUBLISH_TO_CONFIRM, AGE_AT_CLAIM, CLAIM_SECONDS, RECORD_SECONDS, VACUUM_SECONDS] {
        // Registering the handle is what creates the series; nothing is recorded.
        drop(histogram!(name, labels.to_vec()));
    }
}

/// The labels of a relay's metrics: `database` with its database's name, if it has one (every
/// relay of a fleet); none otherwise.
pub(crate) fn database_labels(database: Option<&str>) -> Vec<Label> {
    database.map(|name| Label::new("database", name.to_owned())).into_iter().collect()
}

/// Counts a replay batch: `sent` confirmed, `passed_over` not sendable; `remaining` events to go.
pub(crate) fn replayed(sent: u64, passed_over: u64, remaining: u64) {
    counter!(REPLAYED, "outcome" => "sent").increment(sent);
    counter!(REPLAYED, "outcome" => "passed_over").increment(passed_over);
    gauge!(REPLAY_REMAINING).set(remaining as f64);
}
