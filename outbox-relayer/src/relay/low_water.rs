//! The queue's low water: a position below which no row can be claimed, where the claim's scan
//! starts. While another session holds an old snapshot, vacuum cannot remove the index entries of
//! rows published since it began, and a scan from the start of the queue would walk all of them on
//! every claim; from the low water it walks only the rows finished since the low water last moved.
//!
//! Positions are drawn at insert, and transactions commit in any order: a row can become visible
//! after rows with higher positions were published. The low water therefore moves in two steps. A
//! look takes a *candidate*: the first pending row's position at or after the low water, bounded
//! by the last position handed out, and then the transactions that hold a lock under which they can
//! insert into the outbox (an `INSERT` takes it before its row's position is drawn). Every row
//! below the candidate is visible to that look, or belongs to one of those transactions. Once none
//! of them holds its lock any more, a later look sees all such rows, and the low water moves to the
//! first pending row before the candidate, or to the candidate.
//!
//! A transaction left open (an application that forgot to commit, a session idle in a transaction)
//! would hold the low water for as long as it stays, and every claim would walk the rows published
//! since. So the low water waits for a candidate's writers at most [`PASS_WRITERS_AFTER`]; then it
//! moves on and keeps the writers still open as *passed*. When a passed writer ends, its rows (if
//! it committed any) are below the low water, and a look below is asked for at once.
//!
//! Rows held behind a quarantined event do not hold the low water back (they wait for an operator).
//! Whatever makes a row below the low water due again asks for a look below it: an operator's retry
//! or skip (a notification), rows released by the housekeeping re-check, a lost LISTEN connection.
//! A look below it also runs on its own, paced by its cost (at most about 1% of the time), for
//! anything no signal announces (a row made due by hand in SQL).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::Result;
use crate::store;

/// How often the low water is looked at while the relay claims rows.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// How long the low water waits for the transactions that may still commit rows below a candidate
/// before it moves on without them (and looks below when they end).
const PASS_WRITERS_AFTER: Duration = Duration::from_secs(2);

/// The least time between two looks below the low water that were asked for.
const BELOW_ASKED_EVERY: Duration = Duration::from_secs(1);

/// A look below the low water runs at most once per this many times its own duration.
const BELOW_COST_SHARE: u32 = 100;

/// The low water the claim reads, and the requests for a look below it.
#[derive(Debug, Default)]
pub(super) struct LowWater {
    /// Positions below this are never claimed. Starts at 0: the whole queue.
    position: AtomicI64,
    /// Rows left the queue's pending part since the last look (claimed, or published).
    rows_moved: AtomicBool,
    /// A row below the low water may be due again.
    below_asked: AtomicBool,
}

impl LowWater {
    /// Where the claim's scan starts.
    pub(super) fn position(&self) -> i64 {
        self.position.load(Ordering::SeqCst)
    }

    /// A claim took rows, or a batch's rows were published: the low water may move.
    pub(super) fn rows_moved(&self) {
        self.rows_moved.store(true, Ordering::SeqCst);
    }

    /// A row below the low water may be due again (an operator's action, rows released from a
    /// hold, notifications lost).
    pub(super) fn ask_below(&self) {
        self.below_asked.store(true, Ordering::SeqCst);
    }
}

/// A position the low water may move to once the transactions that may still commit rows below it
/// are over.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    position: i64,
    writers: Vec<String>,
    /// When the candidate was taken.
    taken: Instant,
}

/// What the low-water task knows between two looks.
#[derive(Debug, Default)]
struct Tracker {
    candidate: Option<Candidate>,
    /// When the next look below the low water is due at the latest.
    below_due: Option<Instant>,
    /// When the last look below the low water ran.
    below_last: Option<Instant>,
    /// Writers the low water moved past while they were still open: when one ends, a look below.
    passed: Vec<String>,
    /// The least time between two looks below the low water.
    recheck: Duration,
}

/// Keeps the relay's low water: looks every `LOOK_EVERY` while claims take rows, and below it when
/// asked or when due, at least every `recheck`. Runs only if positions are drawn in time order (an
/// identity without a cache); otherwise the claim scans from the start, as it would without this
/// task.
pub(super) async fn keep(pool: &PgPool, low_water: &LowWater, recheck: Duration) {
    match store::position_cache(pool).await {
        Ok(1) => {}
        Ok(cache) => {
            tracing::warn!(cache, "outbox_events.position draws positions in blocks; the claim scans the whole queue");
            return;
        }
        Err(e) => tracing::debug!(error = %e, "cannot read how positions are drawn; assuming one at a time"),
    }
    let mut tracker = Tracker { recheck, ..Tracker::default() };
    let mut tick = tokio::time::interval(LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        match tracker.look(pool, low_water).await {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                failing = true;
                if denied(&e) {
                    tracing::warn!(error = %e, "the relay's role may not read the outbox's position sequence or locks; \
                        claims scan the whole queue (grant it with `outbox grant`)");
                } else {
                    tracing::debug!(error = %e, "cannot move the queue's low water; claims scan from where it stands");
                }
            }
            Err(_) => {}
        }
    }
}

impl Tracker {
    /// One look: moves the low water if the candidate's writers are over and takes a new candidate
    /// (while claims take rows, or until the low water reached the last candidate), and looks below
    /// the low water if that is asked for or due.
    async fn look(&mut self, pool: &PgPool, low_water: &LowWater) -> Result<()> {
        if !self.passed.is_empty() && any_ended(&mut self.passed, &store::writers(pool).await?) {
            // A writer the low water passed is over: whatever it committed is below the low water.
            low_water.ask_below();
        }
        let behind = self.candidate.as_ref().is_none_or(|c| c.position > low_water.position());
        let advanced = if low_water.rows_moved.swap(false, Ordering::SeqCst) || behind {
            self.advance(pool, low_water).await
        } else {
            Ok(())
        };
        let asked = low_water.below_asked.swap(false, Ordering::SeqCst);
        if self.below_due(Instant::now(), asked) {
            if let Err(e) = self.look_below(pool, low_water).await {
                low_water.below_asked.fetch_or(asked, Ordering::SeqCst);
                return Err(e);
            }
        } else if asked {
            low_water.below_asked.store(true, Ordering::SeqCst);
        }
        advanced
    }

    /// Moves the low water to the candidate (or the first pending row before it) once the
    /// candidate's writers are over, or once it waited [`PASS_WRITERS_AFTER`] for them (those still
    /// open are kept as passed), then takes a new candidate.
    async fn advance(&mut self, pool: &PgPool, low_water: &LowWater) -> Result<()> {
        if let Some(c) = &self.candidate {
            let writers_now = store::writers(pool).await?;
            if !settled(c, &writers_now, &self.passed) {
                if c.taken.elapsed() < PASS_WRITERS_AFTER {
                    // Keep the candidate until its writers are over (a new one would have writers of its own).
                    return Ok(());
                }
                let open = still_open(c, &writers_now);
                tracing::debug!(
                    writers = ?open,
                    "transactions that may write to the outbox stayed open; the low water moves on and looks below when they end"
                );
                pass(&mut self.passed, open);
            }
        }
        let from = low_water.position();
        let (first, last) = store::first_pending(pool, from).await?;
        if went_back(from, last) {
            // The positions were restarted (`TRUNCATE ... RESTART IDENTITY`, `setval`): new rows
            // are drawn below the low water. Start again from the whole queue.
            tracing::info!(from, ?last, "outbox_events.position went back; the claim scans the whole queue again");
            low_water.position.store(0, Ordering::SeqCst);
            self.candidate = None;
            return Ok(());
        }
        if let Some(c) = self.candidate.take() {
            low_water.position.store(moved_to(c.position, first), Ordering::SeqCst);
        }
        let position = candidate_position(from, first, last);
        // After the read above: every writer of a row below `position` that the read did not see.
        let mut writers = store::writers(pool).await?;
        // Writers already passed are not waited for again: their end asks for a look below.
        writers.retain(|w| !self.passed.contains(w));
        self.candidate = Some(Candidate { position, writers, taken: Instant::now() });
        Ok(())
    }

    /// Looks for a due row below the low water; lowers the low water to it.
    async fn look_below(&mut self, pool: &PgPool, low_water: &LowWater) -> Result<()> {
        let started = Instant::now();
        let below = low_water.position();
        let found = store::pending_below(pool, below).await?;
        let took = started.elapsed();
        self.below_last = Some(started);
        self.below_due = Some(started + (took * BELOW_COST_SHARE).max(self.recheck));
        if let Some(position) = found {
            low_water.position.fetch_min(position, Ordering::SeqCst);
            tracing::debug!(position, below, "a row below the queue's low water is due; the claim scans from it");
        }
        Ok(())
    }

    /// Whether a look below the low water runs now: when due, or when asked for and the last one
    /// was long enough ago.
    fn below_due(&self, now: Instant, asked: bool) -> bool {
        match (self.below_due, self.below_last) {
            (None, _) | (_, None) => true,
            (Some(due), Some(last)) => now >= due || (asked && now.duration_since(last) >= BELOW_ASKED_EVERY),
        }
    }
}

/// Whether `e` is a permission denied by the database.
fn denied(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Database(sqlx::Error::Database(d)) if d.code().as_deref() == Some("42501"))
}

/// Whether every transaction that could commit a row below the candidate is over. A prepared
/// transaction recovered by a restarted server shows with a virtual id of its own (`-1/<xid>`),
/// unlike the one it had when the candidate was taken: while any is open and not passed yet,
/// nothing settles.
fn settled(candidate: &Candidate, writers_now: &[String], passed: &[String]) -> bool {
    let recovered = |w: &String| w.starts_with("-1/") && !passed.contains(w);
    !writers_now.iter().any(|w| recovered(w) || candidate.writers.contains(w))
}

/// The candidate's writers still open now, and any recovered prepared transaction (those already
/// passed are dropped by [`pass`]).
fn still_open(candidate: &Candidate, writers_now: &[String]) -> Vec<String> {
    let open = |w: &&String| w.starts_with("-1/") || candidate.writers.contains(w);
    writers_now.iter().filter(open).cloned().collect()
}

/// Adds `open` to the writers the low water passed.
fn pass(passed: &mut Vec<String>, open: Vec<String>) {
    for writer in open {
        if !passed.contains(&writer) {
            passed.push(writer);
        }
    }
}

/// Forgets the passed writers that are over; whether any was.
fn any_ended(passed: &mut Vec<String>, writers_now: &[String]) -> bool {
    let before = passed.len();
    passed.retain(|w| writers_now.contains(w));
    passed.len() < before
}

/// Whether the last position drawn is below the low water `from`: the positions were restarted.
fn went_back(from: i64, last: Option<i64>) -> bool {
    last.map_or(from > 0, |l| l.saturating_add(1) < from)
}

/// Where the low water moves once a candidate is settled: the candidate, or the first pending row
/// before it (one that committed after the candidate was taken).
fn moved_to(candidate: i64, first_pending: Option<i64>) -> i64 {
    first_pending.map_or(candidate, |p| p.min(candidate))
}

/// The next candidate: the first pending row at or after the low water `from`, or, if none,
/// just past the last position handed out (`None`: none yet); never below `from`.
fn candidate_position(from: i64, first_pending: Option<i64>, last: Option<i64>) -> i64 {
    let past_last = last.map_or(0, |l| l.saturating_add(1));
    first_pending.map_or(past_last, |p| p.min(past_last)).max(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(position: i64, writers: &[&str]) -> Candidate {
        Candidate { position, writers: owned(writers), taken: Instant::now() }
    }

    fn owned(writers: &[&str]) -> Vec<String> {
        writers.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn writers_still_open_are_passed_once_and_their_end_asks_for_a_look_below() {
        let c = candidate(10, &["3/7", "4/9"]);
        let open = still_open(&c, &owned(&["4/9", "5/1", "-1/4242"]));
        assert_eq!(open, owned(&["4/9", "-1/4242"]), "the candidate's writer and a recovered prepared one");
        let mut passed = owned(&["4/9"]);
        pass(&mut passed, open);
        assert_eq!(passed, owned(&["4/9", "-1/4242"]));
        assert!(!any_ended(&mut passed, &owned(&["4/9", "-1/4242", "6/2"])), "both still open");
        assert!(any_ended(&mut passed, &owned(&["-1/4242", "6/2"])), "4/9 ended");
        assert_eq!(passed, owned(&["-1/4242"]));
    }

    #[test]
    fn a_candidate_settles_only_when_each_of_its_writers_is_over() {
        let c = candidate(10, &["3/7", "4/9"]);
        assert!(!settled(&c, &owned(&["4/9", "5/1"]), &[]), "4/9 still writes");
        assert!(settled(&c, &owned(&["5/1"]), &[]), "only a later writer");
        assert!(settled(&candidate(10, &[]), &owned(&["5/1"]), &[]));
        assert!(!settled(&candidate(10, &["3/7"]), &owned(&["-1/4242"]), &[]), "a recovered prepared transaction");
        assert!(settled(&candidate(10, &["3/7"]), &owned(&["-1/4242"]), &owned(&["-1/4242"])), "one passed already");
    }

    #[test]
    fn positions_drawn_below_the_low_water_mean_they_were_restarted() {
        assert!(!went_back(100, Some(99)), "nothing drawn since the low water moved past the last");
        assert!(!went_back(100, Some(5000)));
        assert!(went_back(100, Some(12)));
        assert!(went_back(100, None), "a sequence reset to unused");
        assert!(!went_back(0, None));
    }

    #[test]
    fn the_low_water_moves_to_a_late_row_before_the_candidate() {
        assert_eq!(moved_to(100, Some(42)), 42, "a row committed after the candidate was taken");
        assert_eq!(moved_to(100, Some(150)), 100);
        assert_eq!(moved_to(100, None), 100);
    }

    #[test]
    fn a_candidate_is_the_first_pending_row_or_past_the_last_position() {
        assert_eq!(candidate_position(5, Some(20), Some(90)), 20);
        assert_eq!(candidate_position(5, None, Some(90)), 91, "nothing pending: past every position drawn");
        assert_eq!(candidate_position(0, None, None), 0, "nothing drawn yet");
        assert_eq!(candidate_position(50, None, Some(20)), 50, "never below the low water");
    }

    #[test]
    fn a_look_below_runs_when_due_or_when_asked_but_not_in_a_loop() {
        let now = Instant::now();
        let never_looked = Tracker::default();
        assert!(never_looked.below_due(now, false), "the first look");
        let t = Tracker {
            below_due: Some(now + Duration::from_secs(30)),
            below_last: Some(now),
            recheck: Duration::from_secs(30),
            ..Tracker::default()
        };
        assert!(!t.below_due(now + Duration::from_secs(10), false));
        assert!(t.below_due(now + Duration::from_secs(30), false), "due");
        assert!(!t.below_due(now + Duration::from_millis(200), true), "asked, but one just ran");
        assert!(t.below_due(now + Duration::from_secs(2), true), "asked");
    }
}
