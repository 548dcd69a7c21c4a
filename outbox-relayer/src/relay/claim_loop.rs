//! The claim loop: when to claim, the batches in flight against the confirm window, and the
//! back-offs after a failing database or broker.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use outbox_types::{Backoff, Publisher};
use tokio::sync::futures::Notified;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;
use uuid::Uuid;

use super::outcome::BatchReport;
use super::presence::Waiting;
use super::shared::Shared;
use super::{claim, deliver};
use crate::store;
use crate::{Error, Result};

/// How often a relay paused by a broker outage asks the publisher whether it is connected again
/// (the publisher's own reconnect back-off decides when it really tries).
const PAUSED_CHECK: Duration = Duration::from_millis(100);

/// How long the claim loop waits after a claim that found nothing.
enum IdleWait {
    /// A fast poll while lingering: `fast_poll_interval` from the start of that claim.
    FastPoll,
    /// This long from now (waiting for a notification, or polling while it cannot register).
    For(Duration),
}

/// The claim loop's wait after a database failure: 100 ms doubling to 1 s, so that claims resume
/// within a second of the database's return.
struct DatabaseBackoff(Backoff);

impl Default for DatabaseBackoff {
    fn default() -> Self {
        Self(Backoff::new(Duration::from_millis(100), Duration::from_secs(1)))
    }
}

/// The claim loop's wait after the broker refused a whole batch: 100 ms doubling to 5 s, so that a
/// broker refusing everything is not a hot loop over the backlog.
struct RefusedBackoff(Backoff);

impl Default for RefusedBackoff {
    fn default() -> Self {
        Self(Backoff::new(Duration::from_millis(100), Duration::from_secs(5)))
    }
}

/// The claim loop's wait before it asks a publisher that could not reach the broker again: 100 ms
/// doubling to 5 s, reset when a batch gets through.
struct PauseBackoff(Backoff);

impl Default for PauseBackoff {
    fn default() -> Self {
        Self(Backoff::new(Duration::from_millis(100), Duration::from_secs(5)))
    }
}

/// The batches a relay's claim loop has handed to their delivery tasks.
#[derive(Default)]
struct Flight {
    /// Delivery tasks: each yields its row count, whether it held rows of an entity, and its report.
    tasks: JoinSet<(usize, bool, Result<BatchReport>)>,
    /// Messages claimed and not yet recorded (the confirm window's use).
    messages: usize,
    /// The loop waits for room in the window.
    want_room: bool,
    /// A recorded outcome marked rows of an entity published: their successors may be ready.
    successors: bool,
    /// No claims before this (a failing database, a broker that fails every message).
    backoff_until: Option<tokio::time::Instant>,
    /// After a failed claim, or a batch whose outcome could not be recorded.
    database_backoff: DatabaseBackoff,
    /// After a batch the broker refused whole.
    refused_backoff: RefusedBackoff,
    /// The broker could not be reached: no claims until the publisher connects again.
    paused: bool,
    /// While paused, not even a look at the publisher before this: a publisher that says it is
    /// connected while the broker keeps dropping it must not make a hot loop of claim, fail, give
    /// back.
    paused_until: Option<tokio::time::Instant>,
    /// The wait before that look: 100 ms doubling to 5 s, reset when a batch gets through.
    pause_backoff: PauseBackoff,
    /// Tokens of claims whose answer was lost with the database connection: whatever they took is
    /// given back before the next claim.
    orphaned: Vec<Uuid>,
}

impl Flight {
    /// Takes in a finished delivery task; returns whether to claim now (it made room the loop
    /// waited for, or successors of its rows may be ready).
    fn settled(
        &mut self,
        done: std::result::Result<(usize, bool, Result<BatchReport>), tokio::task::JoinError>,
    ) -> Result<bool> {
        let Ok((n, ordered, result)) = done else {
            // Only when the loop itself is dropped (the relay task aborted): nothing left to count.
            return Ok(false);
        };
        self.messages -= n;
        let room_made = std::mem::take(&mut self.want_room);
        match result {
            Ok(report) if report.unavailable > 0 => {
                if report.published > 0 {
                    self.pause_backoff.0.reset();
                }
                self.paused_until = Some(tokio::time::Instant::now() + self.pause_backoff.0.fail());
                if !self.paused {
                    tracing::warn!(
                        given_back = report.unavailable,
                        "the broker cannot be reached; claims pause until it answers (no attempt is charged)"
                    );
                }
                self.paused = true;
                self.successors |= ordered && report.published > 0;
            }
            Ok(report) if report.published > 0 || report.retried + report.quarantined == 0 => {
                self.database_backoff.0.reset();
                self.refused_backoff.0.reset();
                if report.published > 0 {
                    self.pause_backoff.0.reset();
                }
                self.backoff_until = None;
                self.successors |= ordered && report.published > 0;
            }
            Ok(_) => {
                // The broker refused every message of the batch: back off before claiming more,
                // so that it is not a hot loop over the backlog.
                let wait = self.refused_backoff.0.fail();
                self.back_off(wait);
            }
            Err(Error::Crashed) => return Err(Error::Crashed),
            Err(e) => {
                tracing::warn!(error = %e, kind = %e.kind(), "recording a batch's outcome failed for the length of its lease; its rows are published again");
                self.database_failed();
            }
        }
        Ok(room_made || self.successors)
    }

    /// No claims for `wait`.
    fn back_off(&mut self, wait: Duration) {
        self.backoff_until = Some(tokio::time::Instant::now() + wait);
    }

    /// The database failed a claim or a recording: no claims for the next database back-off;
    /// returns it.
    fn database_failed(&mut self) -> Duration {
        let wait = self.database_backoff.0.fail();
        self.back_off(wait);
        wait
    }

    /// Whether claims wait for a back-off that has not passed yet.
    fn backing_off(&self) -> bool {
        self.backoff_until.is_some_and(|t| t > tokio::time::Instant::now())
    }
}

/// What the claim loop does after a look at its state (and perhaps a claim).
enum Next {
    /// Claim again at once: the last claim filled its limit, so more may be due.
    ClaimAgain,
    /// Wait this long for a reason to claim (`None`: the poll interval).
    Wait(Option<Duration>),
}

/// The claim loop. It claims whenever the confirm window has room for a batch (or nothing is
/// in flight) and work may be due, and hands each claimed batch to a task that publishes it,
/// awaits its confirms and records the outcomes; so claiming and publishing go on while earlier
/// batches await their confirms (a slow confirm holds back only its own entities' successors).
///
/// It claims again at once after a full claim; otherwise on a notification, at the poll (fast
/// while it lingers after work), when a recorded outcome gave the window room it lacked, or when
/// one marked rows of an entity published (their successors may be ready now). Outcomes that
/// arrive together count as one reason to claim.
pub(super) async fn worker<P: Publisher>(
    shared: Arc<Shared<P>>,
    stop: watch::Receiver<bool>,
    hard: watch::Receiver<bool>,
) -> Result<()> {
    let mut flight = Flight::default();
    let mut quiet_since: Option<tokio::time::Instant> = None;
    loop {
        while let Some(done) = flight.tasks.try_join_next() {
            flight.settled(done)?;
        }
        shared.health.went_round(flight.paused);
        if *stop.borrow() {
            break;
        }
        let notified = shared.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let wait = match next_step(&shared, &mut flight, &mut quiet_since, &stop, &hard).await? {
            Next::ClaimAgain => continue,
            Next::Wait(wait) => wait,
        };
        wait_for_reason(&shared, &mut flight, notified, wait, &stop, &mut quiet_since).await?;
    }
    // Graceful: batches in hand finish (the hard stop cuts their confirm wait short).
    while let Some(done) = flight.tasks.join_next().await {
        flight.settled(done)?;
    }
    Ok(())
}

/// Claims if nothing keeps the loop from it (a back-off, what must happen before a claim, a
/// full confirm window); returns what the loop does next.
async fn next_step<P: Publisher>(
    shared: &Arc<Shared<P>>,
    flight: &mut Flight,
    quiet_since: &mut Option<tokio::time::Instant>,
    stop: &watch::Receiver<bool>,
    hard: &watch::Receiver<bool>,
) -> Result<Next> {
    let s = &shared.settings;
    let limit = s.batch_size.min(s.confirm_window.saturating_sub(flight.messages));
    if flight.backing_off() {
        // The database or the broker failed the last attempts: no new claims meanwhile.
        return Ok(Next::Wait(flight.backoff_until.map(|t| t - tokio::time::Instant::now())));
    }
    if let Some(wait) = {
        let mut stop_rx = stop.clone();
        tokio::select! {
            wait = before_claim(shared, flight) => wait,
            _ = stop_rx.wait_for(|s| *s) => Some(Duration::ZERO),
        }
    } {
        return Ok(Next::Wait(Some(wait)));
    }
    if flight.messages > 0 && limit < s.batch_size.min(s.confirm_window) {
        // The window is full: wait for an outcome to make room.
        flight.want_room = true;
        return Ok(Next::Wait(None));
    }
    flight.successors = false;
    claim_and_dispatch(shared, flight, quiet_since, limit, hard).await
}

/// Claims up to `limit` rows and hands them to a delivery task; returns what the loop does
/// next.
async fn claim_and_dispatch<P: Publisher>(
    shared: &Arc<Shared<P>>,
    flight: &mut Flight,
    quiet_since: &mut Option<tokio::time::Instant>,
    limit: usize,
    hard: &watch::Receiver<bool>,
) -> Result<Next> {
    let s = &shared.settings;
    // Fast polls are paced from the start of the claim, so a slow claim does not
    // stretch the interval between two looks at the table.
    let started = tokio::time::Instant::now();
    let since_start = |d: Duration| d.saturating_sub(started.elapsed());
    let token = Uuid::new_v4();
    match claim::claim(shared, limit, token).await {
        Ok(claimed) if claimed.is_empty() => {
            shared.health.database_answered(true);
            Ok(Next::Wait(Some(match idle_wait(shared, quiet_since).await {
                IdleWait::FastPoll => since_start(s.fast_poll_interval),
                IdleWait::For(wait) => wait,
            })))
        }
        Ok(claimed) => {
            shared.health.database_answered(true);
            *quiet_since = None;
            let full = claimed.len() == limit;
            dispatch(shared, flight, claimed, token, hard.clone());
            // Busy: commits need not notify this relay any more.
            shared.presence.busy().await;
            if full {
                return Ok(Next::ClaimAgain);
            }
            Ok(Next::Wait(Some(since_start(s.fast_poll_interval))))
        }
        Err(Error::Crashed) => Err(Error::Crashed),
        Err(e) => {
            // A database failing claim after claim is said once, at WARN (the first to reach it
            // again says so at INFO); any other failure every time.
            let database = matches!(e, Error::Database(_));
            if database && shared.health.database_answered(false) {
                tracing::debug!(error = %e, kind = %e.kind(), "relay claim failed again; retrying");
            } else {
                tracing::warn!(error = %e, kind = %e.kind(), "relay claim failed; retrying");
            }
            if database {
                // The claim may have taken rows before its answer was lost.
                flight.orphaned.push(token);
            }
            Ok(Next::Wait(Some(flight.database_failed())))
        }
    }
}

/// Hands a claimed batch to a delivery task, its rows counted against the confirm window until
/// the task is settled.
fn dispatch<P: Publisher>(
    shared: &Arc<Shared<P>>,
    flight: &mut Flight,
    claimed: Vec<store::Claimed>,
    token: Uuid,
    hard: watch::Receiver<bool>,
) {
    flight.messages += claimed.len();
    let shared = shared.clone();
    let n = claimed.len();
    let ordered = claimed.iter().any(|c| c.event.entity.is_some());
    flight.tasks.spawn(
        async move {
            // A panic must not leak the batch's share of the window.
            let delivered = std::panic::AssertUnwindSafe(deliver::deliver(&shared, claimed, token, hard))
                .catch_unwind()
                .await
                .unwrap_or(Err(Error::Stopped));
            (n, ordered, delivered)
        }
        .in_current_span(),
    );
}

/// Waits `wait` (`None`: the poll interval) for a reason to claim: a notification, the end of
/// the wait, a stop, or a finished delivery task that made room the loop waited for or may
/// have made successors ready.
async fn wait_for_reason<P>(
    shared: &Shared<P>,
    flight: &mut Flight,
    mut notified: Pin<&mut Notified<'_>>,
    wait: Option<Duration>,
    stop: &watch::Receiver<bool>,
    quiet_since: &mut Option<tokio::time::Instant>,
) -> Result<()> {
    let sleep = tokio::time::sleep(wait.unwrap_or(shared.settings.poll_interval));
    tokio::pin!(sleep);
    let mut stop_rx = stop.clone();
    loop {
        tokio::select! {
            () = &mut notified => { *quiet_since = None; break }
            () = &mut sleep => break,
            _ = stop_rx.wait_for(|s| *s) => break,
            Some(done) = flight.tasks.join_next() => if flight.settled(done)? { break },
        }
    }
    Ok(())
}

/// How long to wait after a claim found nothing. Linger: poll fast for a while after the last
/// work, without asking for notifications; then wait for one, the relay's presence telling the
/// commit trigger so (or for the poll).
async fn idle_wait<P>(shared: &Shared<P>, quiet_since: &mut Option<tokio::time::Instant>) -> IdleWait {
    let s = &shared.settings;
    let since = *quiet_since.get_or_insert_with(tokio::time::Instant::now);
    if since.elapsed() < s.linger {
        return IdleWait::FastPoll;
    }
    if !s.notifications {
        // Commits do not notify this relay: it polls.
        return IdleWait::For(s.poll_interval);
    }
    match shared.presence.wait(s.poll_interval * 3).await {
        // A commit whose trigger ran before the relay began to wait did not notify it, and may
        // become visible a moment later: look once more shortly.
        Ok(Waiting::Began) => IdleWait::For(s.fast_poll_interval * 10),
        Ok(Waiting::NotNow) => IdleWait::FastPoll,
        Ok(Waiting::Still) => IdleWait::For(s.poll_interval),
        // Without the presence commits do not notify: keep polling fast (the error is logged).
        Ok(Waiting::Absent) | Err(_) => IdleWait::For(s.fast_poll_interval.max(Duration::from_millis(100))),
    }
}

/// What must happen before the next claim: rows of claims whose answer was lost are given
/// back, and while the broker cannot be reached the publisher must connect first. Returns how
/// long to wait if the claim must wait.
async fn before_claim<P: Publisher>(shared: &Shared<P>, flight: &mut Flight) -> Option<Duration> {
    while let Some(&token) = flight.orphaned.last() {
        match store::release_claim(&shared.pool, token, shared.low_water.position()).await {
            Ok(n) => {
                tracing::debug!(released = n, "rows of a claim whose answer was lost are given back");
                flight.orphaned.pop();
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot give back a lost claim's rows yet");
                return Some(flight.database_failed());
            }
        }
    }
    if !flight.paused {
        return None;
    }
    if let Some(until) = flight.paused_until
        && until > tokio::time::Instant::now()
    {
        return Some(until - tokio::time::Instant::now());
    }
    match shared.publisher.connect().await {
        Ok(()) => {
            tracing::info!("the broker answers again; claims resume");
            flight.paused = false;
            None
        }
        // The publisher paces its own reconnects (and logs each attempt): look again soon,
        // so that claims resume as soon as it is connected.
        Err(_) => Some(PAUSED_CHECK),
    }
}
