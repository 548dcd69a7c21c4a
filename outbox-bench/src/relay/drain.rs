//! Draining a backlog: by the relay process (phase 2, with its peak RSS) or by a relay in-process
//! (phase 4), waiting until every row is published or the drain is cut off, and reporting it.

use std::time::Duration;

use outbox_testkit::TestDb;
use sqlx::PgPool;
use tokio::time::Instant;

use super::arrivals::Arrivals;
use super::fill::fill;
use super::in_process::InProcess;
use super::plan::Backlog;
use super::process::APPLICATION_NAME;
use super::target::Target;
use crate::cpu::{Meter, Spent};
use crate::error::BoxError;
use crate::figure::comment;
use crate::process::Subprocess;
use crate::wait::{FLOOR, secs, within};

/// Polled while a drain runs: stops at the first pending row, unlike the full counts of
/// `admin::stats`, so that polling does not load the database being measured.
pub(crate) const ANY_PENDING: &str = "SELECT EXISTS (SELECT 1 FROM outbox_events WHERE status = 'pending')";
/// Where the pending rows of a drain that was cut off stand: claimed, due or deferred, and whether
/// their predecessor is done (ready) or not (blocked).
const PENDING_STATE: &str = "\
SELECT count(*) FILTER (WHERE lease_owner IS NULL AND next_attempt_at <= now() AND NOT ready),
       count(*) FILTER (WHERE lease_owner IS NULL AND next_attempt_at <= now() AND ready),
       count(*) FILTER (WHERE lease_owner IS NULL AND next_attempt_at > now() AND ready),
       count(*) FILTER (WHERE lease_owner IS NULL AND next_attempt_at > now() AND NOT ready),
       count(*) FILTER (WHERE lease_owner IS NOT NULL)
FROM (SELECT e.lease_owner, e.next_attempt_at, (p.status IS NULL OR p.status IN ('published', 'skipped')) AS ready
      FROM outbox_events e
      LEFT JOIN outbox_events p ON p.entity_key = e.entity_key AND p.seq = e.seq - 1
      WHERE e.status = 'pending') AS pending";

/// How a drain went, from the start of the relay.
#[derive(Debug)]
struct Drained {
    backlog: u64,
    /// Rows marked `published` at the end: the whole backlog, unless the drain was cut off.
    published: u64,
    /// Until every message arrived at the consumer (`None` if the drain was cut off first).
    arrived: Option<Duration>,
    /// Until every row was marked `published`, or until the drain was cut off.
    elapsed: Duration,
    /// When each tenth of the backlog had arrived.
    tenths: Vec<Duration>,
}

impl Drained {
    fn complete(&self) -> bool {
        self.published >= self.backlog
    }

    /// Rows marked published per second.
    fn rate(&self) -> f64 {
        self.published as f64 / self.elapsed.as_secs_f64()
    }

    /// The rate of each tenth of the drain, to see whether it slows down as it goes.
    fn tenth_rates(&self) -> String {
        let mut previous = Duration::ZERO;
        let mut rates = Vec::new();
        for &at in &self.tenths {
            let secs = (at - previous).as_secs_f64();
            rates.push(format!("{:.0}", self.backlog as f64 / 10.0 / secs.max(f64::EPSILON)));
            previous = at;
        }
        rates.join(" ")
    }
}

/// The relay of a drain, to check on while waiting.
enum Draining<'a> {
    Process(&'a mut Subprocess),
    InProcess(&'a InProcess),
}

impl Draining<'_> {
    /// Fails if the relay ended before the drain did.
    fn check(&mut self) -> Result<(), BoxError> {
        match self {
            Self::Process(process) => process.check_alive(),
            Self::InProcess(relay) => relay.check_running(),
        }
    }

    /// What it is, for an error that gives up on it.
    fn name(&self) -> &'static str {
        match self {
            Self::Process(_) => "the relay process",
            Self::InProcess(_) => "the relay task",
        }
    }
}

/// Waits until every message arrived and every row is marked published, or until `limit` has
/// passed since `start`: then the drain is cut off and its rate is what it published until then,
/// unless it published nothing, which fails with where the backlog stands. Fails at once if the
/// relay or the consumer ends early; each query of the database may take [`FLOOR`].
async fn await_drain(
    pool: &PgPool,
    arrivals: &Arrivals,
    backlog: u64,
    start: Instant,
    limit: Duration,
    mut relay: Draining<'_>,
) -> Result<Drained, BoxError> {
    loop {
        if let Some(all) = arrivals.all()
            && !within("the check for pending rows", FLOOR, sqlx::query_scalar::<_, bool>(ANY_PENDING).fetch_one(pool))
                .await?
        {
            let elapsed = start.elapsed();
            let arrived = Some(all.saturating_duration_since(start));
            return Ok(Drained { backlog, published: backlog, arrived, elapsed, tenths: arrivals.tenths(start) });
        }
        relay.check()?;
        if start.elapsed() >= limit {
            return cut_off(pool, arrivals, backlog, start, relay.name()).await;
        }
        arrivals.check_consuming()?;
        let poll = if arrivals.all().is_some() { 5 } else { 20 };
        tokio::time::sleep(Duration::from_millis(poll)).await;
    }
}

/// A drain cut off at its limit: what it published, and where the pending rows stand; an error if
/// it published nothing.
async fn cut_off(
    pool: &PgPool,
    arrivals: &Arrivals,
    backlog: u64,
    start: Instant,
    relay: &str,
) -> Result<Drained, BoxError> {
    let elapsed = start.elapsed();
    let state = async {
        let published = outbox_ops::admin::stats(pool).await?.published;
        let pending: (i64, i64, i64, i64, i64) = sqlx::query_as(PENDING_STATE).fetch_one(pool).await?;
        Ok::<_, BoxError>((published, pending))
    };
    let (published, (due_blocked, due_ready, deferred_ready, deferred_blocked, in_flight)) =
        within("the state of the backlog", FLOOR, state).await?;
    let seen = format!(
        "{}, {published} rows published; pending: {in_flight} claimed, {due_ready} due and ready, {due_blocked} due \
         behind their predecessor, {deferred_blocked} deferred behind their predecessor, {deferred_ready} deferred \
         with nothing ahead of them (retrying after a failed publish, or a lost wake-up)",
        arrivals.describe()
    );
    if published == 0 {
        return Err(format!(
            "waited {} for {relay} to publish a backlog of {backlog} events; saw {seen}; {relay} still running",
            secs(elapsed)
        )
        .into());
    }
    comment(format_args!("drain of {backlog} events cut off after {:.1} s: {seen}", elapsed.as_secs_f64()));
    let published = u64::try_from(published)?;
    Ok(Drained { backlog, published, arrived: None, elapsed, tenths: arrivals.tenths(start) })
}

fn report_drain(what: &str, entities: u64, filled: Duration, drained: &Drained) {
    let arrived = drained.arrived.map_or_else(|| "not all".to_owned(), |d| format!("{:.3} s", d.as_secs_f64()));
    comment(format_args!(
        "{what}: {} events over {entities} entities filled in {:.1} s; all arrived after {arrived}; \
         {} marked published after {:.3} s: {:.1} events/s{}",
        drained.backlog,
        filled.as_secs_f64(),
        drained.published,
        drained.elapsed.as_secs_f64(),
        drained.rate(),
        if drained.complete() { "" } else { " (CUT OFF)" }
    ));
    if drained.backlog >= 100_000 {
        comment(format_args!("{what}: events/s per tenth of the backlog: {}", drained.tenth_rates()));
    }
}

/// A drain's outcome; a failed drain's error also says how stopping the relay failed, if it did
/// (the cause, when the relay ended on its own).
fn with_stop(drained: Result<Drained, BoxError>, stopped: &Result<(), BoxError>) -> Result<Drained, BoxError> {
    drained.map_err(|e| match stopped {
        Err(stop) => format!("{e} (stopping the relay: {stop})").into(),
        Ok(()) => e,
    })
}

// ---------------------------------------------------------------------------------------------
// 2. Drain by a relay process

/// What the drain phase measured.
#[derive(Debug)]
pub(crate) struct Drain {
    pub(crate) rate: f64,
    pub(crate) peak_rss_mib: f64,
    /// CPU spent by the relay process, its backends and the broker during the drain.
    pub(crate) cpu: Spent,
}

/// What the relay process of a drain runs with.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RelayChild {
    /// The relay's gauge interval (0: no gauges), its default when `None`.
    pub(crate) gauge_interval_ms: Option<u64>,
    /// Payloads sealed with the benchmark's key, opened by the relay.
    pub(crate) sealed: bool,
}

/// Fills a backlog, drains it with the relay process and returns its rate and the process's peak
/// RSS.
pub(crate) async fn drain_in_child(
    db: &TestDb,
    target: Target<'_>,
    backlog: Backlog,
    child: RelayChild,
) -> Result<Drain, BoxError> {
    let filled = fill(db, backlog.events, backlog.entities, child.sealed).await?;
    target.purge().await?;
    let arrivals = Arrivals::start(target, backlog.events, false).await?;
    let outcome = async {
        let interval = child.gauge_interval_ms.map(|ms| ms.to_string());
        let mut args = vec!["relay-process", "--exchange", target.exchange];
        if let Some(ms) = &interval {
            args.extend(["--gauge-interval-ms", ms]);
        }
        if child.sealed {
            args.push("--sealed");
        }
        let mut process = Subprocess::spawn("the relay process", &args, &db.url(), target.url).await?;
        let meter = Meter::new(process.child.id().ok_or("the relay process has ended")?, APPLICATION_NAME);
        let before = meter.sample(db.pool()).await?;
        let start = Instant::now();
        let relay = Draining::Process(&mut process);
        let drained = await_drain(db.pool(), &arrivals, backlog.events, start, backlog.limit, relay).await;
        let after = meter.sample(db.pool()).await;
        // Read the peak before the shutdown, which allocates nothing worth measuring.
        let memory = process.memory().await;
        let stopped = process.stop().await;
        let drained = with_stop(drained, &stopped)?;
        let cpu = before.spent_until(&after?);
        let (peak_kib, now_kib) = memory?;
        stopped?;
        Ok::<_, BoxError>((drained, peak_kib, now_kib, cpu))
    }
    .await;
    let stopped = arrivals.stop().await;
    let (drained, peak_kib, now_kib, cpu) = outcome?;
    stopped?;
    target.purge().await?;
    report_drain("drain (relay process)", backlog.entities, filled, &drained);
    comment(format_args!("relay process memory after the drain: VmHWM {peak_kib} kB, VmRSS {now_kib} kB"));
    Ok(Drain { rate: drained.rate(), peak_rss_mib: peak_kib as f64 / 1024.0, cpu })
}

// ---------------------------------------------------------------------------------------------
// 4. Backlog size

/// Fills a backlog, drains it with an in-process relay and returns events per second.
pub(super) async fn drain_in_process(db: &TestDb, target: Target<'_>, backlog: Backlog) -> Result<f64, BoxError> {
    let filled = fill(db, backlog.events, backlog.entities, false).await?;
    drain_filled(db, target, backlog, filled, None).await
}

/// Drains a backlog already filled (in `filled`) with an in-process relay running `retention` if
/// given; returns events per second.
pub(super) async fn drain_filled(
    db: &TestDb,
    target: Target<'_>,
    backlog: Backlog,
    filled: Duration,
    retention: Option<outbox_ops::Retention>,
) -> Result<f64, BoxError> {
    target.purge().await?;
    let arrivals = Arrivals::start(target, backlog.events, false).await?;
    let outcome = async {
        let relay = InProcess::start_with(db, target, None, retention).await?;
        let draining = Draining::InProcess(&relay);
        let drained = await_drain(db.pool(), &arrivals, backlog.events, Instant::now(), backlog.limit, draining).await;
        let stopped = relay.stop().await;
        let drained = with_stop(drained, &stopped)?;
        stopped?;
        Ok::<_, BoxError>(drained)
    }
    .await;
    let stopped = arrivals.stop().await;
    let drained = outcome?;
    stopped?;
    target.purge().await?;
    report_drain("backlog (relay in-process)", backlog.entities, filled, &drained);
    Ok(drained.rate())
}
