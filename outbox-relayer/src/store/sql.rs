//! The text of every statement the relay runs, each a documented constant. Every statement is
//! index-bound (see `docs/architecture.md`) and fenced by the claim token; the session settings
//! they rely on are in `session.rs`, the code that binds and runs them in `exec.rs`.

/// Claims up to `batch` due rows whose predecessor is done or claimed with them, scanning pending
/// rows in queue position (commit order per entity), so a head is always seen before its
/// successors.
///
/// The scan reads the first `$1` (four batches) due pending rows of the queue index that are not
/// in flight, and keeps of each entity its first row (every unordered row counts as its own
/// entity) and the rows that directly follow it in sequence, up to `$6` in all: the entity's run.
/// A row of the run after the first waits behind that one, so it needs no look at its
/// predecessor: it is ready exactly when its run's head is, and is claimed only together with
/// every earlier row of its run (a row not due, or locked by another relay's claim, ends the run
/// there). Only the heads have their predecessor looked up, in queue order,
/// until `$2` rows to act on (ready, or to defer) are found; the head of an entity in flight is
/// its first successor, and the lookup finds the predecessor leased. Looking up the predecessor of
/// every successor in the scan instead would, with many entities in flight, spend most of a claim
/// on lookups that find a pending predecessor (figures in BENCHMARKS.md). Rows in flight are left
/// out of the scan (not merely skipped) so that any number of relays, each with its window of rows
/// in flight, still find ready rows.
///
/// Readiness is read from the statement's snapshot without locking (a predecessor that is
/// published or skipped stays so); only the ready rows are locked, with `SKIP LOCKED`, and
/// re-checked on their latest version, so two relays never claim the same row. A row of a run is
/// kept only if every earlier row of its run was locked too (`nth` equals its rank among the locked
/// rows of its entity); the batch limit on the lock, in queue order, cuts a run short, never
/// ahead.
///
/// Rows whose predecessor is quarantined are deferred until an operator acts (`admin` wakes them,
/// and `RELEASE_HELD` re-checks them periodically); rows whose predecessor waits for a retry are
/// deferred until that retry. Rows behind an in-flight predecessor are left as they are: the
/// predecessor precedes them, and its publication makes them claimable.
///
/// A row locked while another claim's owner is still written on it had its lease expire in that
/// claim (outcomes and releases clear the owner): the claim returns that owner as `taken_from`,
/// looked up only for such rows.
///
/// The steps that find rows by tuple id re-check their status written as `(status || '') =
/// 'pending'`, which no plan can read through the pending rows' partial index: a generic plan made
/// while the table was empty would otherwise read the candidates by a walk of the whole queue
/// index (every pending row, and while another session holds an old snapshot every row published
/// since), filtering on the tuple id.
///
/// The claim writes only unindexed columns (`lease_until`, owner, token, attempts), so PostgreSQL
/// can update the rows in place (HOT). Candidates are carried between the steps by their tuple
/// id: a row changed by another relay in between has a new tuple id, fails the re-check and is
/// left alone, and the locked rows cannot change until this statement ends.
///
/// The scan starts at the queue's low water `$7` (see `relay/low_water.rs`): no row below it can
/// be claimed, and the index entries of rows published before it, which vacuum cannot remove while
/// another session holds an old snapshot, are never walked.
///
/// Parameters: `$1` the scan window (four batches), `$2` the batch, `$3` the relay's id, `$4` the
/// claim token, `$5` the lease in seconds, `$6` the most consecutive events of one entity, `$7`
/// the low water.
pub const CLAIM: &str = "\
WITH scanned AS (
    SELECT e.ctid AS tid, e.id, e.entity_key, e.seq, e.position
    FROM outbox_events e
    WHERE e.status = 'pending' AND e.position >= $7
      AND e.next_attempt_at <= now() AND (e.lease_until IS NULL OR e.lease_until <= now())
    ORDER BY e.position
    LIMIT $1
), numbered AS (
    SELECT s.*,
           CASE WHEN s.entity_key IS NULL THEN 1
                ELSE row_number() OVER (PARTITION BY s.entity_key COLLATE \"C\" ORDER BY s.position) END AS nth,
           first_value(s.seq) OVER (PARTITION BY s.entity_key COLLATE \"C\" ORDER BY s.position) AS first_seq
    FROM scanned s
), runs AS (
    SELECT (array_agg(n.tid) FILTER (WHERE n.nth = 1))[1] AS tid, (array_agg(n.id) FILTER (WHERE n.nth = 1))[1] AS id,
           n.entity_key, min(n.seq) AS seq, min(n.position) AS position, array_agg(n.tid ORDER BY n.nth) AS tids
    FROM numbered n
    WHERE n.entity_key IS NULL OR (n.nth <= $6 AND n.seq = n.first_seq + n.nth - 1)
    GROUP BY n.entity_key, CASE WHEN n.entity_key IS NULL THEN n.id END
    ORDER BY min(n.position)
), cand AS (
    SELECT h.tid, h.id, h.entity_key, h.tids, (p.status IS NULL OR p.status IN ('published', 'skipped')) AS ready,
           p.status AS p_status, p.next_attempt_at AS p_next, p.lease_owner AS p_owner
    FROM runs h
    LEFT JOIN LATERAL (
        SELECT q.status, q.next_attempt_at, q.lease_owner FROM outbox_events q
        WHERE q.entity_key = h.entity_key AND q.seq = h.seq - 1
    ) p ON true
    WHERE p.status IS NULL OR p.status IN ('published', 'skipped', 'quarantined')
       OR (p.lease_owner IS NULL AND p.next_attempt_at > now())
    LIMIT $2
), pick AS (
    SELECT t.tid, c.entity_key, t.nth FROM cand c, unnest(c.tids) WITH ORDINALITY AS t(tid, nth) WHERE c.ready
), locked AS (
    SELECT o.ctid AS tid, o.id, o.lease_owner AS was_owner FROM outbox_events o
    WHERE o.ctid = ANY(ARRAY(SELECT tid FROM pick))
      AND (o.status || '') = 'pending' AND o.next_attempt_at <= now() AND (o.lease_until IS NULL OR o.lease_until <= now())
    ORDER BY o.position
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), ready AS (
    SELECT x.tid FROM (
        SELECT p.tid, p.entity_key, p.nth,
               row_number() OVER (PARTITION BY p.entity_key COLLATE \"C\" ORDER BY p.nth) AS k
        FROM locked l JOIN pick p ON p.tid = l.tid
    ) x
    WHERE x.entity_key IS NULL OR x.nth = x.k
), deferred AS (
    UPDATE outbox_events o
    SET next_attempt_at = CASE WHEN cand.p_status = 'quarantined' THEN 'infinity'::timestamptz ELSE cand.p_next END
    FROM cand
    WHERE o.ctid = cand.tid AND o.id = cand.id AND NOT cand.ready AND (o.status || '') = 'pending' AND o.lease_owner IS NULL
      AND (cand.p_status = 'quarantined' OR (cand.p_owner IS NULL AND cand.p_next > now()))
    RETURNING o.id
)
UPDATE outbox_events o
SET lease_owner = $3, claim_token = $4, attempts = o.attempts + 1,
    lease_until = now() + make_interval(secs => $5)
WHERE o.ctid = ANY(ARRAY(SELECT tid FROM ready))
RETURNING o.ctid::text AS tid, o.id, o.event_type, o.event_version, o.entity_key, o.seq, o.payload,
          o.payload_key_id, o.content_type, o.headers, o.correlation_id, o.causation_id, o.traceparent, o.created_at, o.attempts,
          CASE WHEN o.id = ANY(ARRAY(SELECT id FROM locked WHERE was_owner IS NOT NULL))
               THEN (SELECT l.was_owner FROM locked l WHERE l.id = o.id) END AS taken_from";

/// Gives back whatever a claim whose answer was lost (the connection dropped while it ran) may
/// have taken, and takes its attempt back: nothing of it was sent. Read through the pending rows'
/// queue index from the low water `$2` (a claimed row is pending, so it is not below); only after
/// a failed claim.
pub(super) const RELEASE_CLAIM: &str = "\
UPDATE outbox_events
SET lease_owner = NULL, claim_token = NULL, lease_until = NULL, attempts = greatest(attempts - 1, 0)
WHERE status = 'pending' AND position >= $2 AND claim_token = $1";

/// Marks confirmed rows published. A successor deferred while this row waited for a retry was
/// deferred to that retry's time, which has passed when the retry is confirmed: it is due already.
///
/// Rows are found by the tuple id the claim returned (one page visit instead of a primary-key
/// descent), whatever the plan: the status is written so that the pending rows' partial index
/// cannot serve it (see `CLAIM`). Nothing else updates a row while its claim is valid, so the tuple id is current; if
/// the claim was taken over (or the table rewritten), the token no longer matches whatever is at
/// that tuple id and nothing is marked: the rows count as lost claims and are published again.
pub const MARK_PUBLISHED: &str = "\
UPDATE outbox_events
SET status = 'published', published_at = now(), lease_owner = NULL, claim_token = NULL, lease_until = NULL
WHERE ctid = ANY($1::text[]::tid[]) AND claim_token = $2 AND (status || '') = 'pending'";

/// Records failures, one row each of the arrays `$1`..`$5` (id, quarantine, delay in seconds,
/// reason, kind): a quarantined row keeps its due time, a retried one is due again after its
/// delay. Found by id, fenced by the claim token `$6`.
pub(super) const MARK_FAILED: &str = "\
UPDATE outbox_events o
SET status = CASE WHEN f.quarantine THEN 'quarantined' ELSE 'pending' END,
    next_attempt_at = CASE WHEN f.quarantine THEN o.next_attempt_at ELSE now() + make_interval(secs => f.delay) END,
    quarantined_at = CASE WHEN f.quarantine THEN now() END,
    last_error = f.reason, last_error_kind = f.kind, lease_owner = NULL, claim_token = NULL, lease_until = NULL
FROM UNNEST($1::uuid[], $2::bool[], $3::float8[], $4::text[], $5::text[]) AS f(id, quarantine, delay, reason, kind)
WHERE o.id = f.id AND o.claim_token = $6 AND o.status = 'pending'";

/// Gives rows back; `$3`: they were never sent, so the claim's attempt is taken back.
pub(super) const RELEASE: &str = "\
UPDATE outbox_events
SET lease_owner = NULL, claim_token = NULL, lease_until = NULL,
    attempts = CASE WHEN $3 THEN greatest(attempts - 1, 0) ELSE attempts END
WHERE id = ANY($1) AND claim_token = $2 AND status = 'pending'";

/// Makes `$1` present on this session: its row in `outbox_relay_listeners` (written once) and the
/// lock that says it is alive; rows of relays that stopped without deleting theirs go. False if
/// another session runs under the same relay id.
pub(super) const PRESENT: &str = "SELECT outbox_relay_present($1)";

/// `$1` waits for a notification, for at most `$2` milliseconds before it says so again: the wait
/// hint moves ahead and its session takes the lock under which committing producers notify. False
/// while a commit is at its end (the relay looks at the table again instead).
pub(super) const WAIT: &str = "SELECT outbox_relay_wait($1, $2)";

/// A relay still waits, for at most `$1` milliseconds more: the wait hint moves ahead.
pub(super) const STILL: &str = "SELECT outbox_relay_still($1)";

/// `$1` is busy: its session releases the waiting lock, and commits no longer notify.
pub(super) const BUSY: &str = "SELECT outbox_relay_busy($1)";

/// `$1` stops: its row goes, its session's locks are released.
pub(super) const LEAVE: &str = "SELECT outbox_relay_leave($1)";

/// Vacuums the outbox table: removes the dead row versions and index entries that published rows
/// leave behind (the claim's scan would step over them otherwise). `SKIP_LOCKED`: if another
/// vacuum holds the table, this one does nothing.
pub(super) const VACUUM: &str = "VACUUM (SKIP_LOCKED) outbox_events";

/// The transaction id that holds back this database's vacuum horizon (the oldest `backend_xmin` or
/// `backend_xid` of a session in this database or in none, or a replication slot's `xmin`), as a
/// number; NULL when nothing does. This session and sessions running a vacuum, which vacuum
/// ignores, do not count. Every role may read these columns. While it stays the same, a vacuum
/// can remove nothing that the last one under it could not.
pub(super) const HORIZON: &str = "\
SELECT x::text::int8 FROM (
    SELECT unnest(ARRAY[backend_xid, backend_xmin]) AS x FROM pg_stat_activity
    WHERE (datname = current_database() OR datid IS NULL)
      AND pid <> pg_backend_pid()
      AND pid NOT IN (SELECT pid FROM pg_stat_progress_vacuum)
    UNION ALL
    SELECT xmin FROM pg_replication_slots
) held
WHERE x IS NOT NULL
ORDER BY age(x) DESC
LIMIT 1";

/// The first position at or after `$1` of a row that is pending and not held behind a quarantined
/// event (held rows wait for an operator, whose action asks for a look below the low water), and
/// the last position handed out. Walks the queue index from `$1` to the first such row: the rows
/// finished since the low water last moved.
pub(super) const FIRST_PENDING: &str = "\
SELECT (SELECT min(position) FROM outbox_events
        WHERE status = 'pending' AND next_attempt_at < 'infinity' AND position >= $1) AS first_pending,
       pg_sequence_last_value(pg_get_serial_sequence('outbox_events', 'position')) AS last_position";

/// The transactions that hold a lock on `outbox_events` under which they can insert (an
/// `INSERT` takes `ROW EXCLUSIVE` before its row's position is drawn and keeps it until the
/// transaction ends), by virtual transaction id: those that may still commit a row below a
/// position drawn earlier.
pub(super) const WRITERS: &str = "\
SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
WHERE locktype = 'relation' AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND relation = 'outbox_events'::regclass
  AND mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')";

/// The first position below `$1` of a row that is pending and not held: a row the low water
/// passed (committed after every check, or made due again by an operator). Walks the queue index
/// from its start: rare, and paced by its own cost.
pub(super) const BELOW: &str = "\
SELECT min(position) FROM outbox_events
WHERE status = 'pending' AND next_attempt_at < 'infinity' AND position < $1";

/// How many positions the identity of `position` hands a session at once: the low water relies on
/// positions being drawn in time order across sessions, which a cache above 1 breaks.
pub(super) const POSITION_CACHE: &str = "\
SELECT s.seqcache FROM pg_sequence s
WHERE s.seqrelid = pg_get_serial_sequence('outbox_events', 'position')::regclass";
