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

/// The least time between two looks below the low water that were asked for.
const BELOW_ASKED_EVERY: Duration = Duration::from_secs(1);

/// A look below the low water runs at most once per this many times its own duration.
const BELOW_COST_SHARE: u32 = 100;

/// The low water the claim reads, and the requests for a look below it.
#[derive(Debug, Default)]
pub(super) struct LowWater {
    /// Positions below this are never claimed. Starts at 0: the whole queue.
    position: AtomicI64,
    /// A claim took rows since the last look.
    claimed: AtomicBool,
    /// A row below the low water may be due again.
    below_asked: AtomicBool,
}

impl LowWater {
    /// Where the claim's scan starts.
    pub(super) fn position(&self) -> i64 {
        self.position.load(Ordering::SeqCst)
    }

    /// A claim took rows: the low water may move.
    pub(super) fn claimed(&self) {
        self.claimed.store(true, Ordering::SeqCst);
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
}

/// What the low-water task knows between two looks.
#[derive(Debug, Default)]
struct Tracker {
    candidate: Option<Candidate>,
    /// When the next look below the low water is due at the latest.
    below_due: Option<Instant>,
    /// When the last look below the low water ran.
    below_last: Option<Instant>,
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
        let behind = self.candidate.as_ref().is_none_or(|c| c.position > low_water.position());
        let advanced = if low_water.claimed.swap(false, Ordering::SeqCst) || behind {
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
    /// candidate's writers are over, then takes a new candidate.
    async fn advance(&mut self, pool: &PgPool, low_water: &LowWater) -> Result<()> {
        let settled = match &self.candidate {
            Some(c) => settled(c, &store::writers(pool).await?),
            None => false,
        };
        if self.candidate.is_some() && !settled {
            // Keep the candidate until its writers are over (a new one would have writers of its own).
            return Ok(());
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
        let writers = store::writers(pool).await?;
        self.candidate = Some(Candidate { position, writers });
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
/// unlike the one it had when the candidate was taken: while any is open, nothing settles.
fn settled(candidate: &Candidate, writers_now: &[String]) -> bool {
    !writers_now.iter().any(|w| w.starts_with("-1/") || candidate.writers.contains(w))
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
        Candidate { position, writers: writers.iter().map(|w| (*w).to_owned()).collect() }
    }

    #[test]
    fn a_candidate_settles_only_when_each_of_its_writers_is_over() {
        let c = candidate(10, &["3/7", "4/9"]);
        assert!(!settled(&c, &["4/9".to_owned(), "5/1".to_owned()]), "4/9 still writes");
        assert!(settled(&c, &["5/1".to_owned()]), "only a later writer");
        assert!(settled(&candidate(10, &[]), &["5/1".to_owned()]));
        assert!(!settled(&candidate(10, &["3/7"]), &["-1/4242".to_owned()]), "a recovered prepared transaction");
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
            candidate: None,
            below_due: Some(now + Duration::from_secs(30)),
            below_last: Some(now),
            recheck: Duration::from_secs(30),
        };
        assert!(!t.below_due(now + Duration::from_secs(10), false));
        assert!(t.below_due(now + Duration::from_secs(30), false), "due");
        assert!(!t.below_due(now + Duration::from_millis(200), true), "asked, but one just ran");
        assert!(t.below_due(now + Duration::from_secs(2), true), "asked");
    }
}
