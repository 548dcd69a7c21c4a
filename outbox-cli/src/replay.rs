//! `outbox replay`: records replay jobs ([`outbox_ops::replay`]) and runs them in this process
//! ([`outbox_relayer::replay::Replayer`]) with progress on stderr; lists, shows, pauses, resumes
//! and cancels them. What a job cannot send is printed before it starts, and makes the exit status
//! 1 once it has sent the rest.

use outbox_ops::replay::{self, JobState, NewReplayJob, ReplayJob, ReplaySelection, ReplayTarget, Survey};
use outbox_relayer::AmqpPublisher;
use outbox_relayer::replay::{ReplayReport, Replayer};
use outbox_types::EventId;
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use uuid::Uuid;

use crate::args::ReplayCommand;
use crate::args::replay::{ResumeArgs, SelectionArgs, SendArgs, StartArgs, TargetArgs};
use crate::error::CliError;
use crate::out::Out;
use crate::progress::Progress;
use crate::signal::Shutdown;

/// How many entities the text lists by name; `--json` lists them all.
const LISTED: usize = 10;

/// Runs `outbox replay <command>`.
///
/// # Errors
/// A job that does not exist or cannot change state; the database's and the broker's failures;
/// [`CliError::ReplayIncomplete`] when a job could not send everything it selected.
pub(crate) async fn run(
    pool: &PgPool,
    db: PgConnectOptions,
    command: ReplayCommand,
    out: &mut Out,
) -> Result<(), CliError> {
    match command {
        ReplayCommand::Start(args) => start(pool, db, *args, out).await,
        ReplayCommand::List { all, json } => list(pool, all, json, out).await,
        ReplayCommand::Show { id, json } => show(pool, id, json, out).await,
        ReplayCommand::Pause { id } => change(id, "paused", replay::pause(pool, id).await?, out),
        ReplayCommand::Cancel { id } => change(id, "cancelled", replay::cancel(pool, id).await?, out),
        ReplayCommand::Resume(args) => resume(pool, db, *args, out).await,
    }
}

async fn start(pool: &PgPool, db: PgConnectOptions, args: StartArgs, out: &mut Out) -> Result<(), CliError> {
    let selection = selection(&args.selection);
    if args.dry_run {
        let survey = replay::survey(pool, &selection).await?;
        if args.json {
            out.line(survey_json(&survey));
        } else {
            out.text(survey_text(&survey));
        }
        return incomplete_survey("dry run", &survey);
    }
    if !args.no_run {
        amqp_given(&args.send)?;
    }
    let mut job = NewReplayJob::new(selection, target(&args.target));
    if let Some(rate) = args.rate {
        job = job.rate(rate);
    }
    if let Some(by) = args.by {
        job = job.created_by(by);
    }
    let (job, survey) = replay::create(pool, job).await?;
    out.text(survey_text(&survey));
    out.line(format_args!("replay job {} recorded: {} events to {}", job.id, job.total, job.target));
    if args.no_run {
        return incomplete_survey(&job.id.to_string(), &survey);
    }
    let report = send(db, &job, &args.send).await?;
    finished(&report, &job, Some(&survey), out)
}

async fn resume(pool: &PgPool, db: PgConnectOptions, args: ResumeArgs, out: &mut Out) -> Result<(), CliError> {
    let (job, _) = replay::resume(pool, args.id).await?.ok_or(CliError::NoSuchJob(args.id))?;
    if job.state == JobState::Done {
        // Run again by an orchestrator after it finished: nothing to do, and nothing failed.
        out.line(format_args!("replay job {} is done: {} of {} events sent", job.id, job.sent, job.total));
        return Ok(());
    }
    if job.state != JobState::Running {
        return Err(CliError::JobState(job.id, job.state.to_string()));
    }
    out.line(format_args!(
        "replay job {}: resuming after {} of {} events, to {}",
        job.id, job.sent, job.total, job.target
    ));
    let report = send(db, &job, &args.send).await?;
    finished(&report, &job, None, out)
}

/// Runs `job` in this process until it ends or SIGTERM / SIGINT, with progress on stderr.
async fn send(db: PgConnectOptions, job: &ReplayJob, args: &SendArgs) -> Result<ReplayReport, CliError> {
    let shutdown = Shutdown::install()?;
    amqp_given(args)?;
    let endpoint = match args.metrics_addr {
        Some(addr) => Some(crate::serve::start(addr, None, None).await?),
        None => None,
    };
    let publisher = crate::broker::publisher(&args.amqp_url)?;
    if !crate::broker::connect_patiently(&publisher, &shutdown).await? {
        publisher.close().await;
        return Err(CliError::ReplayIncomplete(job.id.to_string(), "stopped before it began".to_owned()));
    }
    let remaining = job.total.saturating_sub(job.sent + job.scrubbed + job.unopenable);
    let progress = Progress::new("replaying", "replayed", "events", remaining);
    let outcome = replayer(db, publisher.clone(), args, progress.clone())?
        .run_until(job.id, async move { shutdown.requested().await })
        .await;
    progress.finish();
    publisher.close().await;
    if let Some(endpoint) = endpoint {
        endpoint.abort();
    }
    Ok(outcome?)
}

/// A broker URL was given (checked before a job is recorded, so that none is left unrun for it).
fn amqp_given(args: &SendArgs) -> Result<(), CliError> {
    if args.amqp_url.iter().all(|u| u.trim().is_empty()) { Err(CliError::NoAmqpUrl) } else { Ok(()) }
}

fn replayer(
    db: PgConnectOptions,
    publisher: AmqpPublisher,
    args: &SendArgs,
    progress: Progress,
) -> Result<Replayer<AmqpPublisher>, CliError> {
    let mut builder = Replayer::builder(db, publisher)
        .batch_size(args.batch_size)
        .confirm_timeout(args.confirm_timeout_secs)
        .end_to_end(args.end_to_end)
        .on_progress(move |p| progress.advance(p.sent + p.passed_over));
    if let Some(keys) = outbox_types::Keyring::from_env(crate::relay::PAYLOAD_KEYS)? {
        builder = builder.cipher(outbox_types::PayloadCipher::new(keys));
    }
    if let Some(app_id) = &args.app_id {
        builder = builder.app_id(app_id.clone());
    }
    Ok(builder.build()?)
}

/// The run's last line, and its exit status: 0 when everything selected went (or an operator
/// paused or cancelled the job), 1 when something could not, the job failed, or a signal stopped
/// it before the end.
fn finished(report: &ReplayReport, job: &ReplayJob, survey: Option<&Survey>, out: &mut Out) -> Result<(), CliError> {
    let id = job.id.to_string();
    let sent = job.sent + report.sent;
    match report.state {
        JobState::Running => {
            let why = format!("stopped after {sent} of {} events; `outbox replay resume {id}` continues it", job.total);
            return Err(CliError::ReplayIncomplete(id, why));
        }
        JobState::Failed => {
            let why = "failed: the target refuses the events (see `outbox replay show`); repair it, then resume";
            return Err(CliError::ReplayIncomplete(id, why.to_owned()));
        }
        state => out.line(format_args!("replay job {id} {state}: {sent} of {} events sent", job.total)),
    }
    let passed_over = report.scrubbed + report.unopenable;
    if passed_over > 0 {
        let why = format!(
            "{passed_over} events could not be sent ({} payloads scrubbed since the job began, {} sealed with keys not in OUTBOX_PAYLOAD_KEYS)",
            report.scrubbed, report.unopenable
        );
        return Err(CliError::ReplayIncomplete(id, why));
    }
    match survey {
        Some(survey) => incomplete_survey(&id, survey),
        None => Ok(()),
    }
}

/// Exit status 1 when the survey found what cannot be sent (printed above).
fn incomplete_survey(what: &str, survey: &Survey) -> Result<(), CliError> {
    if !survey.is_incomplete() {
        return Ok(());
    }
    let why = format!(
        "{} payloads scrubbed and {} entities whose first events retention deleted could not be sent (listed above)",
        survey.scrubbed,
        survey.cut_histories.len()
    );
    Err(CliError::ReplayIncomplete(what.to_owned(), why))
}

fn selection(args: &SelectionArgs) -> ReplaySelection {
    let mut selection = ReplaySelection::all();
    selection.entities.clone_from(&args.entity);
    selection.types.clone_from(&args.event_type);
    selection.since = args.since;
    selection.until = args.until;
    selection.ids = args.id.iter().map(|id| EventId::from_uuid(*id)).collect();
    selection
}

fn target(args: &TargetArgs) -> ReplayTarget {
    match (&args.to_queue, &args.routing_key, args.partitions) {
        (Some(queue), _, _) => ReplayTarget::queue(queue.clone()),
        (None, Some(key), _) => ReplayTarget::routing_key(args.exchange.clone(), key.clone()),
        (None, None, Some(n)) => ReplayTarget::partitioned(args.exchange.clone(), n, "partition."),
        (None, None, None) => ReplayTarget::exchange(args.exchange.clone()),
    }
}

fn survey_text(s: &Survey) -> String {
    let mut out = format!(
        "selected: {} events to send ({} of {} entities, {} of no entity)\n",
        s.total,
        s.total - s.unordered,
        s.by_entity.len(),
        s.unordered
    );
    out += &format!("  by type: {}\n", pairs(&s.by_type, s.by_type.len()));
    if !s.by_entity.is_empty() {
        out += &format!("  by entity: {}\n", pairs(&s.by_entity, LISTED));
    }
    if !s.sealed.is_empty() {
        out += &format!("  sealed, by key id (opened with OUTBOX_PAYLOAD_KEYS): {}\n", pairs(&s.sealed, LISTED));
    }
    if s.scrubbed > 0 {
        out += &format!("cannot send: {} events whose payload retention scrubbed\n", s.scrubbed);
    }
    if !s.cut_histories.is_empty() {
        let firsts: Vec<(String, i64)> = s.cut_histories.clone();
        out += &format!(
            "cannot send: the first events of {} entities, deleted by retention (first remaining sequence): {}\n  \
             a consumer that starts each entity at sequence 1 (StartPolicy::FromFirst) parks these entities' \
             events until `outbox inbox skip-gap CONSUMER ENTITY --yes`\n",
            s.cut_histories.len(),
            pairs(&firsts, LISTED)
        );
    }
    if s.waiting + s.quarantined + s.skipped > 0 {
        out += &format!(
            "not published, not replayed: {} waiting (the relay sends them), {} quarantined, {} skipped\n",
            s.waiting, s.quarantined, s.skipped
        );
    }
    out
}

/// `a 3, b 2, ...` for the first `max` pairs, and how many more.
fn pairs<T: std::fmt::Display>(items: &[(String, T)], max: usize) -> String {
    let mut text: Vec<String> = items.iter().take(max).map(|(k, n)| format!("{k} {n}")).collect();
    if items.len() > max {
        text.push(format!("... and {} more (--json lists them)", items.len() - max));
    }
    if text.is_empty() { "none".to_owned() } else { text.join(", ") }
}

fn survey_json(s: &Survey) -> serde_json::Value {
    let map = |items: &[(String, u64)]| {
        items.iter().map(|(k, n)| (k.clone(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>()
    };
    serde_json::json!({
        "total": s.total,
        "unordered": s.unordered,
        "by_type": map(&s.by_type),
        "by_entity": map(&s.by_entity),
        "sealed": map(&s.sealed),
        "scrubbed": s.scrubbed,
        "cut_histories": s.cut_histories.iter().map(|(k, seq)| (k.clone(), serde_json::json!(seq))).collect::<serde_json::Map<_, _>>(),
        "waiting": s.waiting,
        "quarantined": s.quarantined,
        "skipped": s.skipped,
        "incomplete": s.is_incomplete(),
    })
}

async fn list(pool: &PgPool, all: bool, json: bool, out: &mut Out) -> Result<(), CliError> {
    let jobs = replay::jobs(pool, !all, 100).await?;
    if json {
        out.line(serde_json::Value::Array(jobs.iter().map(job_json).collect()));
        return Ok(());
    }
    if jobs.is_empty() {
        out.line(format_args!(
            "no replay jobs{}",
            if all { "" } else { " running, paused or failed (--all lists every one)" }
        ));
    }
    for job in &jobs {
        out.line(job_line(job));
    }
    Ok(())
}

async fn show(pool: &PgPool, id: Uuid, json: bool, out: &mut Out) -> Result<(), CliError> {
    let job = replay::job(pool, id).await?.ok_or(CliError::NoSuchJob(id))?;
    if json {
        out.line(job_json(&job));
        return Ok(());
    }
    out.line(job_line(&job));
    out.line(format_args!("  selects: {}", serde_json::to_string(&job.selection).unwrap_or_default()));
    out.line(format_args!(
        "  created {} by {}; up to position {}",
        job.created_at.to_rfc3339(),
        job.created_by,
        job.up_to_position
    ));
    out.line(format_args!("  cursor: {:?}", job.cursor));
    if let (Some(runner), Some(at)) = (&job.runner, job.heartbeat_at) {
        out.line(format_args!("  last progress by {runner} at {}", at.to_rfc3339()));
    }
    if let Some(error) = &job.last_error {
        out.line(format_args!("  failed: {error}"));
    }
    Ok(())
}

/// One line per job: id, state, progress, what could not go, target, rate, author.
pub(crate) fn job_line(job: &ReplayJob) -> String {
    let rate = job.rate.map(|r| format!(", at most {r}/s")).unwrap_or_default();
    let passed = job.scrubbed + job.unopenable;
    let passed = if passed > 0 { format!(", {passed} could not be sent") } else { String::new() };
    format!(
        "{} {} {}/{} sent{passed} to {}{rate}, by {}",
        job.id, job.state, job.sent, job.total, job.target, job.created_by
    )
}

pub(crate) fn job_json(job: &ReplayJob) -> serde_json::Value {
    serde_json::json!({
        "id": job.id,
        "state": job.state.as_str(),
        "created_at": job.created_at.to_rfc3339(),
        "created_by": job.created_by,
        "selection": job.selection,
        "target": job.target,
        "rate": job.rate,
        "total": job.total,
        "sent": job.sent,
        "scrubbed": job.scrubbed,
        "unopenable": job.unopenable,
        "runner": job.runner,
        "heartbeat_at": job.heartbeat_at.map(|t| t.to_rfc3339()),
        "finished_at": job.finished_at.map(|t| t.to_rfc3339()),
        "last_error": job.last_error,
    })
}

/// The outcome of pause or cancel: the job's line, or why nothing changed.
fn change(id: Uuid, verb: &str, outcome: Option<(ReplayJob, bool)>, out: &mut Out) -> Result<(), CliError> {
    match outcome {
        None => Err(CliError::NoSuchJob(id)),
        Some((job, true)) => {
            out.line(format_args!("replay job {id} {verb}: {}", job_line(&job)));
            Ok(())
        }
        Some((job, false)) => Err(CliError::JobState(id, job.state.to_string())),
    }
}
