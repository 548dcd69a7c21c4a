//! The commands an operator repairs with: looking at events, and the quarantine's list, show,
//! retry and skip.

use clap::Subcommand;
use clap::builder::RangedU64ValueParser;

/// At most 10,000 rows per listing: a screen or a script, not an export.
pub(crate) const MAX_LIMIT: u64 = 10_000;

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum EventsCommand {
    /// One event's record: status, attempts, last error and its kind, lease, its place in its
    /// entity. The payload only with --payload.
    Show {
        /// The event id (a UUID).
        #[arg(value_parser = event_id)]
        id: uuid::Uuid,
        /// Print the payload too (as text if it is UTF-8, else as hex).
        #[arg(long)]
        payload: bool,
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// An entity's events still in the outbox, in sequence order: the last --limit of them.
    List {
        /// The entity key.
        #[arg(long)]
        entity: String,
        /// How many of the entity's last events (1 to 10,000).
        #[arg(long, default_value = "50", value_parser = RangedU64ValueParser::<u64>::new().range(1..=MAX_LIMIT))]
        limit: u64,
        /// One JSON array instead of the table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum QuarantineCommand {
    /// The quarantined events, oldest quarantine first, with kind and reason.
    List {
        /// Only this failure kind (transient, contract, auth or rejected).
        #[arg(long, value_parser = failure_kind)]
        kind: Option<outbox_types::FailureKind>,
        /// At most this many (1 to 10,000; per database with many).
        #[arg(long, default_value = "100", value_parser = RangedU64ValueParser::<u64>::new().range(1..=MAX_LIMIT))]
        limit: u64,
        /// One JSON array instead of the table (with many databases, one object: each
        /// database's array and the total).
        #[arg(long)]
        json: bool,
    },
    /// One quarantined event's record (as `outbox events show`).
    Show {
        /// The event id (a UUID).
        #[arg(value_parser = event_id)]
        id: uuid::Uuid,
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Publish quarantined events again: the same row and the same event id, attempts reset; the
    /// events held behind them follow. Every id must be quarantined, or nothing is changed.
    Retry {
        /// Event ids (UUIDs).
        #[arg(value_parser = event_id, required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<uuid::Uuid>,
        /// Every quarantined event of --kind.
        #[arg(long, requires = "kind")]
        all: bool,
        /// With --all: the failure kind to retry.
        #[arg(long, value_parser = failure_kind, requires = "all")]
        kind: Option<outbox_types::FailureKind>,
    },
    /// Give up on quarantined events: recorded as skipped, never published; their entities' later
    /// events flow again. Asks for --yes, or a --reason that is recorded with the event.
    Skip {
        /// Event ids (UUIDs).
        #[arg(value_parser = event_id, required = true)]
        ids: Vec<uuid::Uuid>,
        /// Skip without recording a reason.
        #[arg(long, required_unless_present = "reason")]
        yes: bool,
        /// Why, recorded with the event's last error.
        #[arg(long)]
        reason: Option<String>,
    },
}

pub(crate) fn event_id(text: &str) -> Result<uuid::Uuid, String> {
    uuid::Uuid::parse_str(text.trim()).map_err(|_| "expected an event id (a UUID)".to_owned())
}

fn failure_kind(text: &str) -> Result<outbox_types::FailureKind, String> {
    text.trim().parse().map_err(|_| "expected transient, contract, auth or rejected".to_owned())
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum InboxCommand {
    /// A consumer's inbox at a glance: entities with a gap, parked and failed events, the oldest
    /// parked age, events processed in the last minute and hour.
    Status {
        /// The consumer name.
        consumer: String,
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The consumer's gaps: entities whose next event has not arrived while later ones are parked.
    Gaps {
        /// The consumer name.
        consumer: String,
        /// One JSON array instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The consumer's events that failed for good and wait for an operator.
    Failed {
        /// The consumer name.
        consumer: String,
        /// One JSON array instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Apply a failed event again: it is parked again, and the running consumer applies it (and
    /// the events parked behind it) at its next sweep, when it is its entity's next event.
    Retry {
        /// The consumer name.
        consumer: String,
        /// The event id (a UUID).
        #[arg(value_parser = event_id)]
        id: uuid::Uuid,
    },
    /// Give up on a failed event: recorded as skipped, never applied; the events parked behind it
    /// are applied by the running consumer. Asks for --yes, or a --reason that is recorded.
    Skip {
        /// The consumer name.
        consumer: String,
        /// The event id (a UUID).
        #[arg(value_parser = event_id)]
        id: uuid::Uuid,
        /// Skip without recording a reason.
        #[arg(long, required_unless_present = "reason")]
        yes: bool,
        /// Why, recorded with the event's last error.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Give up on the missing events of an entity: the running consumer then applies the events
    /// parked behind the gap, in order. Asks for --yes.
    SkipGap {
        /// The consumer name.
        consumer: String,
        /// The entity key.
        entity: String,
        /// Confirm giving up on the missing events.
        #[arg(long, required = true)]
        yes: bool,
    },
}

/// Arguments of `outbox cleanup`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CleanupArgs {
    /// Delete outbox rows published longer ago than this (`90m`, `12h`, `7d`; at least 1 s).
    #[arg(long, value_parser = age)]
    pub(crate) older_than: std::time::Duration,
    /// First clear the payload of rows published longer ago than this (shorter than
    /// --older-than), keeping the rows.
    #[arg(long, value_parser = age)]
    pub(crate) scrub_payload_after: Option<std::time::Duration>,
    /// Delete skipped rows too (given up by an operator), by the age of their quarantine.
    #[arg(long)]
    pub(crate) include_skipped: bool,
    /// Also delete this inbox consumer's processed event ids older than --dedup-window.
    #[arg(long, requires = "dedup_window")]
    pub(crate) inbox: Option<String>,
    /// With --inbox: how long the consumer's processed event ids are kept (`7d`, ...).
    #[arg(long, value_parser = age, requires = "inbox")]
    pub(crate) dedup_window: Option<std::time::Duration>,
    /// Rows per statement (1 to 100,000).
    #[arg(long, default_value = "5000", value_parser = RangedU64ValueParser::<u64>::new().range(1..=100_000))]
    pub(crate) batch_size: u64,
    /// Count what would be deleted, delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// One JSON object on standard output at the end (progress stays on standard error).
    #[arg(long)]
    pub(crate) json: bool,
}

/// An age such as `90s`, `30m`, `12h` or `7d`: a positive number and a unit, from 1 s to 10 years.
pub(crate) fn age(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_secs = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return Err("expected a number and a unit, s, m, h or d (for example 7d)".to_owned()),
    };
    let value: f64 =
        number.parse().map_err(|_| "expected a number and a unit, s, m, h or d (for example 7d)".to_owned())?;
    let secs = value * unit_secs;
    if !(1.0..=10.0 * 365.0 * 86_400.0).contains(&secs) {
        return Err("must be between 1 s and 3650 d".to_owned());
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// Arguments of `outbox reconcile`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ReconcileArgs {
    /// A file with one SQL query over your business tables returning either `(entity_key text,
    /// version bigint)` rows (the entity went through versions 1..=version) or one `uuid` column
    /// (the id of the event each change enqueued).
    #[arg(long)]
    pub(crate) changes_sql: std::path::PathBuf,
    /// Only what happened since: an age (`24h`, `7d`) or a time (RFC 3339). The query gets it as
    /// `$1` and returns the changes made since then (for entity versions, a row per version).
    #[arg(long, value_parser = since)]
    pub(crate) since: Option<chrono::DateTime<chrono::Utc>>,
    /// Also compare with this consumer's inbox in the same database.
    #[arg(long)]
    pub(crate) inbox: Option<String>,
    /// One JSON object instead of the report.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A start time: `now - age` for an age, or an RFC 3339 time.
fn since(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text.trim()) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let age = age(text).map_err(|_| "expected an age such as 24h or an RFC 3339 time".to_owned())?;
    let age = chrono::Duration::from_std(age).map_err(|e| e.to_string())?;
    Ok(chrono::Utc::now() - age)
}
