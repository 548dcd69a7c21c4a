//! `outbox replay`: published events sent again, as recorded jobs.

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Subcommand;
use clap::builder::RangedU64ValueParser;

/// At most 1,000,000 events a second: more than any broker confirms, so a larger rate is a typo.
pub(crate) const MAX_RATE: u64 = 1_000_000;

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum ReplayCommand {
    /// Record a replay job and run it: the selected published events sent again, each entity's in
    /// sequence order, with their ids, sequences, headers and payloads and the header
    /// x-outbox-replay. Says first what it cannot send (scrubbed payloads, histories cut by
    /// retention); exit status 1 if anything. SIGTERM stops it once the batches out are confirmed;
    /// `outbox replay resume` continues it.
    Start(Box<StartArgs>),
    /// The latest jobs, newest first: state, progress, target, who asked.
    List {
        /// Finished jobs too (done, cancelled).
        #[arg(long)]
        all: bool,
        /// One JSON array instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// One job's record: what it selects, where it sends, how far it got.
    Show {
        /// The job id (a UUID).
        #[arg(value_parser = job_id)]
        id: uuid::Uuid,
        /// One JSON object instead of the text.
        #[arg(long)]
        json: bool,
    },
    /// Pause a running job: the process running it stops once its batches out are confirmed.
    Pause {
        /// The job id (a UUID).
        #[arg(value_parser = job_id)]
        id: uuid::Uuid,
    },
    /// Run a job from where it stopped (paused, failed, or its process died), in this process. A
    /// job already done exits 0 at once, so an orchestrator may run this again until it succeeds.
    Resume(Box<ResumeArgs>),
    /// Cancel a job: nothing more of it is sent.
    Cancel {
        /// The job id (a UUID).
        #[arg(value_parser = job_id)]
        id: uuid::Uuid,
    },
}

/// Which events a job selects; each given part must match (an event of one of the --entity keys
/// AND one of the --type patterns AND in the time range AND one of the --id ids).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SelectionArgs {
    /// Every published event (asked explicitly, so that a forgotten filter does not replay the
    /// whole outbox).
    #[arg(long, conflicts_with_all = ["entity", "event_type", "since", "until", "id"])]
    pub(crate) all: bool,
    /// An entity key (repeat the flag for several).
    #[arg(long, value_name = "KEY", required_unless_present_any = ["all", "event_type", "since", "until", "id"])]
    pub(crate) entity: Vec<String>,
    /// An event type, exact or with `*` as a wildcard (`order.*`; repeat the flag for several).
    #[arg(long = "type", value_name = "TYPE")]
    pub(crate) event_type: Vec<String>,
    /// Events created at or after this time: RFC 3339 (`2026-12-07T08:00:00Z`) or an age (`2h`,
    /// `1d`: that long ago).
    #[arg(long, value_parser = time_or_age)]
    pub(crate) since: Option<DateTime<Utc>>,
    /// Events created before this time: RFC 3339 or an age, as --since.
    #[arg(long, value_parser = time_or_age)]
    pub(crate) until: Option<DateTime<Utc>>,
    /// An event id (repeat the flag for several).
    #[arg(long, value_parser = super::repair::event_id)]
    pub(crate) id: Vec<uuid::Uuid>,
}

/// Where a job sends: the relay's exchange and routing (default), a fixed routing key, or one
/// queue.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TargetArgs {
    /// The exchange the events went to (the relay's --exchange).
    #[arg(long, default_value = outbox_relayer::defaults::EXCHANGE)]
    pub(crate) exchange: String,
    /// The relay's --partitions: route by a stable hash of the entity key into this many
    /// partitions (`partition.<n>`), as the relay did. 1 to 10,000.
    #[arg(long, value_parser = RangedU64ValueParser::<u32>::new().range(1..=super::values::MAX_PARTITIONS), conflicts_with_all = ["routing_key", "to_queue"])]
    pub(crate) partitions: Option<u32>,
    /// Send every event with this routing key on --exchange (one consumer's binding).
    #[arg(long, value_name = "KEY", conflicts_with = "to_queue")]
    pub(crate) routing_key: Option<String>,
    /// Send straight into this queue (the default exchange): only its consumer sees the replay.
    #[arg(long, value_name = "QUEUE")]
    pub(crate) to_queue: Option<String>,
}

/// How a job is sent: the broker, the keys, the pace.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SendArgs {
    /// RabbitMQ URL(s), as `outbox relay --amqp-url`.
    #[arg(long, env = "AMQP_URL", hide_env_values = true, value_delimiter = ',')]
    pub(crate) amqp_url: Vec<String>,
    /// Events per batch (one read, one publish, one progress record; two batches are out at a time,
    /// so at most two batches are sent twice if the process dies). 1 to 100,000.
    #[arg(long, default_value_t = outbox_relayer::replay::DEFAULT_BATCH_SIZE, value_parser = RangedU64ValueParser::<usize>::new().range(1..=super::values::MAX_BATCH_SIZE))]
    pub(crate) batch_size: usize,
    /// Seconds to wait for a batch's confirms before sending it again. At most one day.
    #[arg(long, default_value = "10", value_parser = super::values::seconds)]
    pub(crate) confirm_timeout_secs: Duration,
    /// Forward sealed payloads sealed (the relay's --end-to-end); without it they are opened with
    /// OUTBOX_PAYLOAD_KEYS.
    #[arg(long)]
    pub(crate) end_to_end: bool,
    /// AMQP `app_id` on every message (the relay's --app-id).
    #[arg(long)]
    pub(crate) app_id: Option<String>,
    /// Serve /metrics (the job's progress: outbox_replay_events_total,
    /// outbox_replay_events_remaining) on this address while it runs.
    #[arg(long)]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
}

/// Arguments of `outbox replay start`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StartArgs {
    #[command(flatten)]
    pub(crate) selection: SelectionArgs,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) send: SendArgs,
    /// At most this many events a second, so that a large replay leaves the broker to live
    /// traffic. 1 to 1,000,000; unlimited unless given.
    #[arg(long, value_parser = RangedU64ValueParser::<u32>::new().range(1..=MAX_RATE))]
    pub(crate) rate: Option<u32>,
    /// Count what the job would send, by type and entity, and what it cannot; record and send
    /// nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Record the job without running it (`outbox replay resume` runs it).
    #[arg(long, conflicts_with = "dry_run")]
    pub(crate) no_run: bool,
    /// Who asks, recorded with the job. Defaults to $USER.
    #[arg(long, env = "USER")]
    pub(crate) by: Option<String>,
    /// With --dry-run: one JSON object instead of the text.
    #[arg(long, requires = "dry_run")]
    pub(crate) json: bool,
}

/// Arguments of `outbox replay resume`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ResumeArgs {
    /// The job id (a UUID).
    #[arg(value_parser = job_id)]
    pub(crate) id: uuid::Uuid,
    #[command(flatten)]
    pub(crate) send: SendArgs,
}

fn job_id(text: &str) -> Result<uuid::Uuid, String> {
    uuid::Uuid::parse_str(text.trim()).map_err(|_| "expected a job id (a UUID)".to_owned())
}

/// A time: RFC 3339, or an age (`2h`) meaning that long before now.
fn time_or_age(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text.trim()) {
        return Ok(time.with_timezone(&Utc));
    }
    let age = super::repair::age(text)
        .map_err(|_| "expected an RFC 3339 time (2026-12-07T08:00:00Z) or an age (2h, 1d)".to_owned())?;
    chrono::Duration::from_std(age).map(|age| Utc::now() - age).map_err(|e| e.to_string())
}
