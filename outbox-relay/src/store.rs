//! The relay's SQL: claim, record outcomes, release. Every statement is index-bound (see
//! `docs/architecture.md`) and fenced by the claim token.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use outbox_core::{CipherError, Entity, Event, EventId, FailureKind, HeaderValue, Headers, Payload, PayloadCipher};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::{Error, Result};

/// A claimed row: the event and what the retry policy needs.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) event: Event,
    pub(crate) attempts: u32,
    /// The claimed row version's tuple id (text form), for the mark: see `MARK_PUBLISHED`.
    pub(crate) tid: String,
}

/// Planner settings of the relay's own sessions. Every statement the relay runs is bound to an
/// index or to tuple ids, and the claim must walk the queue index in position order, stopping as
/// soon as it has a batch, and marking the index entries of published rows dead as it passes
/// them. Without table statistics (a new table, or autovacuum off or behind) the planner prefers a
/// bitmap scan that visits every pending row and every dead entry left since the last vacuum and
/// sorts them, on every claim, and never marks an entry dead: the claim's cost then grows with the
/// table instead of with the batch (figures in BENCHMARKS.md).
///
/// A prepared statement keeps, after five executions, a generic plan made with the table as it was
/// then: a relay started beside an empty table, with producers writing while it drains, keeps the
/// plans of an empty table while 100,000 rows arrive. So the hot statements find their rows in a
/// way no table size changes: the claim through the queue index in position order and through
/// tuple ids, the mark through tuple ids. The statements of failures and releases, found by id,
/// are planned at each execution instead (`persistent(false)`): they are rare, and a generic plan
/// made on an empty table reads the whole queue index for them. Planning the claim at every
/// execution would cost about 0.8 ms per batch (figures in BENCHMARKS.md).
///
/// JIT compilation is off: with sequential scans disabled, a statement that must still scan a
/// small table (the listeners) costs more than `jit_above_cost` and would be compiled at every
/// execution, for milliseconds of work on statements that take microseconds.
pub(crate) const SESSION: [(&str, &str); 3] = [("enable_bitmapscan", "off"), ("enable_seqscan", "off"), ("jit", "off")];

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
/// on lookups that find a pending predecessor (figures in BENCHMARKS.md). Rows in flight are left out of the scan (not merely skipped)
/// so that any number of relays, each with its window of rows in flight, still find ready rows.
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
/// The claim writes only unindexed columns (`lease_until`, owner, token, attempts), so PostgreSQL
/// can update the rows in place (HOT). Candidates are carried between the steps by their tuple
/// id: a row changed by another relay in between has a new tuple id, fails the re-check and is
/// left alone, and the locked rows cannot change until this statement ends.
const CLAIM: &str = "\
WITH scanned AS (
    SELECT e.ctid AS tid, e.id, e.entity_key, e.seq, e.position
    FROM outbox_events e
    WHERE e.status = 'pending' AND e.next_attempt_at <= now() AND (e.lease_until IS NULL OR e.lease_until <= now())
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
      AND o.status = 'pending' AND o.next_attempt_at <= now() AND (o.lease_until IS NULL OR o.lease_until <= now())
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
    WHERE o.ctid = cand.tid AND o.id = cand.id AND NOT cand.ready AND o.status = 'pending' AND o.lease_owner IS NULL
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
/// queue index; only after a failed claim.
const RELEASE_CLAIM: &str = "\
UPDATE outbox_events
SET lease_owner = NULL, claim_token = NULL, lease_until = NULL, attempts = greatest(attempts - 1, 0)
WHERE status = 'pending' AND claim_token = $1";

/// Marks confirmed rows published. A successor deferred while this row waited for a retry was
/// deferred to that retry's time, which has passed when the retry is confirmed: it is due already.
///
/// Rows are found by the tuple id the claim returned (one page visit instead of a primary-key
/// descent). Nothing else updates a row while its claim is valid, so the tuple id is current; if
/// the claim was taken over (or the table rewritten), the token no longer matches whatever is at
/// that tuple id and nothing is marked: the rows count as lost claims and are published again.
const MARK_PUBLISHED: &str = "\
UPDATE outbox_events
SET status = 'published', published_at = now(), lease_owner = NULL, claim_token = NULL, lease_until = NULL
WHERE ctid = ANY($1::text[]::tid[]) AND claim_token = $2 AND status = 'pending'";

const MARK_FAILED: &str = "\
UPDATE outbox_events o
SET status = CASE WHEN f.quarantine THEN 'quarantined' ELSE 'pending' END,
    next_attempt_at = CASE WHEN f.quarantine THEN o.next_attempt_at ELSE now() + make_interval(secs => f.delay) END,
    quarantined_at = CASE WHEN f.quarantine THEN now() END,
    last_error = f.reason, last_error_kind = f.kind, lease_owner = NULL, claim_token = NULL, lease_until = NULL
FROM UNNEST($1::uuid[], $2::bool[], $3::float8[], $4::text[], $5::text[]) AS f(id, quarantine, delay, reason, kind)
WHERE o.id = f.id AND o.claim_token = $6 AND o.status = 'pending'";

/// Gives rows back; `$3`: they were never sent, so the claim's attempt is taken back.
const RELEASE: &str = "\
UPDATE outbox_events
SET lease_owner = NULL, claim_token = NULL, lease_until = NULL,
    attempts = CASE WHEN $3 THEN greatest(attempts - 1, 0) ELSE attempts END
WHERE id = ANY($1) AND claim_token = $2 AND status = 'pending'";

/// What to record for a row that was not confirmed.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) id: EventId,
    pub(crate) quarantine: bool,
    pub(crate) delay: Duration,
    pub(crate) reason: String,
    pub(crate) kind: FailureKind,
}

fn headers_from_json(id: Uuid, value: serde_json::Value) -> Result<Headers> {
    let serde_json::Value::Object(map) = value else {
        return Err(Error::CorruptRow { id, what: "headers is not a JSON object" });
    };
    map.into_iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => HeaderValue::String(s),
                serde_json::Value::Bool(b) => HeaderValue::Bool(b),
                serde_json::Value::Number(n) => HeaderValue::Int(
                    n.as_i64().ok_or(Error::CorruptRow { id, what: "header number is not an integer" })?,
                ),
                _ => {
                    return Err(Error::CorruptRow { id, what: "header value is not a string, integer or boolean" });
                }
            };
            Ok((k, v))
        })
        .collect()
}

/// The longest string an AMQP short string (message type, content type, correlation id) holds.
const MAX_SHORT_STRING: usize = 255;

fn event_from_row(row: &sqlx::postgres::PgRow, sealed: Sealed<'_>) -> Result<Claimed> {
    let id: Uuid = row.try_get("id")?;
    decode_row(row, id, sealed).map_err(|e| match e {
        Error::CorruptRow { .. } => e,
        _ => Error::CorruptRow { id, what: "a column does not decode" },
    })
}

/// What the relay does with sealed payloads.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sealed<'a> {
    /// Opens them with this cipher (none: every sealed row is quarantined).
    Open(Option<&'a PayloadCipher>),
    /// Publishes them sealed, with the key id in a header, for the consumer to open.
    Forward,
}

/// The payload to publish and, for a payload forwarded sealed, its key id.
fn payload_of(row: &sqlx::postgres::PgRow, id: Uuid, sealed: Sealed<'_>) -> Result<(Vec<u8>, Option<String>)> {
    let stored: Vec<u8> = row.try_get("payload")?;
    let Some(key_id) = row.try_get::<Option<String>, _>("payload_key_id")? else { return Ok((stored, None)) };
    let cipher = match sealed {
        Sealed::Forward => return Ok((stored, Some(key_id))),
        Sealed::Open(cipher) => cipher,
    };
    let corrupt = |what| Error::CorruptRow { id, what };
    let cipher = cipher.ok_or_else(|| corrupt("the payload is encrypted and this relay has no payload keys"))?;
    let plain = cipher.open(EventId::from_uuid(id), &key_id, &stored).map_err(|e| match e {
        CipherError::UnknownKey(_) => corrupt("the payload is encrypted with a key id this relay does not have"),
        _ => corrupt("the encrypted payload failed authentication (changed, or another key)"),
    })?;
    Ok((plain, None))
}

fn decode_row(row: &sqlx::postgres::PgRow, id: Uuid, sealed: Sealed<'_>) -> Result<Claimed> {
    let corrupt = |what| Error::CorruptRow { id, what };
    let version: i64 = row.try_get("event_version")?;
    let entity_key: Option<String> = row.try_get("entity_key")?;
    let seq: Option<i64> = row.try_get("seq")?;
    let entity = match (entity_key, seq) {
        (Some(key), Some(seq)) => {
            Some(Entity { key, seq: u64::try_from(seq).map_err(|_| corrupt("negative sequence"))? })
        }
        (None, None) => None,
        _ => return Err(corrupt("entity key without sequence")),
    };
    let created_at: DateTime<Utc> = row.try_get("created_at")?;
    let attempts: i32 = row.try_get("attempts")?;
    let (body, forwarded_key) = payload_of(row, id, sealed)?;
    let payload = Payload::new(body, row.try_get::<String, _>("content_type")?);
    let event_type: String = row.try_get("event_type")?;
    let mut event = Event::new(EventId::from_uuid(id), event_type, payload, SystemTime::from(created_at));
    event.event_version = u32::try_from(version).map_err(|_| corrupt("event version out of range"))?;
    event.entity = entity;
    event.correlation_id = row.try_get("correlation_id")?;
    event.causation_id = row.try_get("causation_id")?;
    event.traceparent = row.try_get("traceparent")?;
    event.headers = headers_from_json(id, row.try_get("headers")?)?;
    if let Some(key_id) = forwarded_key {
        event.headers.insert(outbox_core::wire::HEADER_PAYLOAD_KEY.to_owned(), HeaderValue::String(key_id));
    }
    // Rows written by SQL rather than `enqueue` skip validation; these would not fit the message.
    let short = [Some(event.event_type.as_str()), Some(event.payload.content_type()), event.correlation_id.as_deref()];
    if short.into_iter().flatten().any(|s| s.len() > MAX_SHORT_STRING) {
        return Err(corrupt("type, content type or correlation id longer than 255 bytes"));
    }
    Ok(Claimed { event, attempts: u32::try_from(attempts).unwrap_or(0), tid: row.try_get("tid")? })
}

/// What a claim took: the rows to publish, and those that do not decode into an event.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    pub(crate) rows: Vec<Claimed>,
    pub(crate) corrupt: Vec<Corrupt>,
    /// Rows whose lease had expired in another claim, by the relay that held it, in the order
    /// first seen.
    pub(crate) taken_over: Vec<(String, usize)>,
}

/// A claimed row that does not decode into an event.
#[derive(Debug)]
pub(crate) struct Corrupt {
    pub(crate) id: EventId,
    /// Its entity key and sequence, as stored, if they read.
    pub(crate) entity: Option<(String, i64)>,
    pub(crate) what: &'static str,
}

/// Claims up to `batch` due, ready rows under `token`, leased for `lease`: for each ready entity up
/// to `run` consecutive events.
pub(crate) async fn claim(
    pool: &PgPool,
    batch: usize,
    run: usize,
    owner: &str,
    token: Uuid,
    lease: Duration,
    sealed: Sealed<'_>,
) -> Result<Taken> {
    let batch = i64::try_from(batch).unwrap_or(i64::MAX);
    let rows = sqlx::query(CLAIM)
        .bind(batch.saturating_mul(4))
        .bind(batch)
        .bind(owner)
        .bind(token)
        .bind(lease.as_secs_f64())
        .bind(i64::try_from(run.max(1)).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await?;
    let mut taken = Taken::default();
    for row in &rows {
        if let Some(owner) = row.try_get::<Option<String>, _>("taken_from")? {
            match taken.taken_over.iter_mut().find(|(o, _)| *o == owner) {
                Some((_, n)) => *n += 1,
                None => taken.taken_over.push((owner, 1)),
            }
        }
        match event_from_row(row, sealed) {
            Ok(claimed) => taken.rows.push(claimed),
            Err(Error::CorruptRow { id, what }) => {
                let key: Option<String> = row.try_get("entity_key").ok().flatten();
                let seq: Option<i64> = row.try_get("seq").ok().flatten();
                taken.corrupt.push(Corrupt { id: EventId::from_uuid(id), entity: key.zip(seq), what });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(taken)
}

/// Marks confirmed rows (by their claimed tuple ids) published; returns how many this claim still
/// owned.
pub(crate) async fn mark_published(pool: &PgPool, tids: &[&str], token: Uuid) -> Result<u64> {
    if tids.is_empty() {
        return Ok(0);
    }
    Ok(sqlx::query(MARK_PUBLISHED).bind(tids).bind(token).execute(pool).await?.rows_affected())
}

/// Records failures (retry later or quarantine); returns how many this claim still owned.
pub(crate) async fn mark_failed(db: impl sqlx::PgExecutor<'_>, failures: &[Failure], token: Uuid) -> Result<u64> {
    if failures.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = failures.iter().map(|f| *f.id.as_uuid()).collect();
    let quarantine: Vec<bool> = failures.iter().map(|f| f.quarantine).collect();
    let delays: Vec<f64> = failures.iter().map(|f| f.delay.as_secs_f64()).collect();
    let reasons: Vec<&str> = failures.iter().map(|f| f.reason.as_str()).collect();
    let kinds: Vec<&str> = failures.iter().map(|f| f.kind.as_str()).collect();
    Ok(sqlx::query(MARK_FAILED)
        .persistent(false)
        .bind(&ids)
        .bind(&quarantine)
        .bind(&delays)
        .bind(&reasons)
        .bind(&kinds)
        .bind(token)
        .execute(db)
        .await?
        .rows_affected())
}

/// Gives rows back without recording an attempt outcome, so another relay takes them at once;
/// `unsent`: they were never sent (an earlier event of their entity was not confirmed), so the
/// claim's attempt is taken back.
pub(crate) async fn release(db: impl sqlx::PgExecutor<'_>, ids: &[Uuid], token: Uuid, unsent: bool) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(sqlx::query(RELEASE).persistent(false).bind(ids).bind(token).bind(unsent).execute(db).await?.rows_affected())
}

/// Registers `relay_id` as waiting for notifications until `ttl` from now.
pub(crate) async fn listen(pool: &PgPool, relay_id: &str, ttl: Duration) -> Result<()> {
    sqlx::query(
        "INSERT INTO outbox_relay_listeners (relay_id, listening_until)
         VALUES ($1, clock_timestamp() + make_interval(secs => $2))
         ON CONFLICT (relay_id) DO UPDATE SET listening_until = EXCLUDED.listening_until",
    )
    .bind(relay_id)
    .bind(ttl.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

/// Withdraws the registration: the relay is busy, commits need not notify.
pub(crate) async fn unlisten(pool: &PgPool, relay_id: &str) -> Result<()> {
    sqlx::query("DELETE FROM outbox_relay_listeners WHERE relay_id = $1").bind(relay_id).execute(pool).await?;
    Ok(())
}

/// Vacuums the outbox table: removes the dead row versions and index entries that published rows
/// leave behind (the claim's scan would step over them otherwise). Sent as a simple query, as
/// `VACUUM` cannot run in the implicit transaction of a prepared statement. `SKIP_LOCKED`: if
/// another vacuum holds the table, this one does nothing.
pub(crate) async fn vacuum(pool: &PgPool) -> Result<()> {
    sqlx::raw_sql("VACUUM (SKIP_LOCKED) outbox_events").execute(pool).await?;
    Ok(())
}

/// Releases the rows of a claim whose answer never arrived; returns how many it had taken.
pub(crate) async fn release_claim(pool: &PgPool, token: Uuid) -> Result<u64> {
    Ok(sqlx::query(RELEASE_CLAIM).bind(token).execute(pool).await?.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One connection to `db` with the relay's session settings.
    async fn relay_session(db: &outbox_testkit::TestDb) -> PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_with(db.connect_options().clone().options(SESSION))
            .await
            .expect("relay session")
    }

    /// The claimed rows as sorted (entity, seq) pairs; an unordered row as ("-", 0).
    fn entity_seqs(claimed: &[Claimed]) -> Vec<(String, u64)> {
        let mut got: Vec<(String, u64)> = claimed
            .iter()
            .map(|c| c.event.entity.as_ref().map_or_else(|| ("-".to_owned(), 0), |e| (e.key.clone(), e.seq)))
            .collect();
        got.sort();
        got
    }

    /// The claim's plan on a table the planner knows nothing about (never analyzed), with the dead
    /// index entries a busy relay leaves behind: an ordered scan of the queue index, no bitmap
    /// scan, no sequential scan; and the claim takes every pending head.
    #[tokio::test]
    async fn the_claim_walks_the_queue_index_in_order_on_a_table_without_statistics() {
        let db = outbox_testkit::TestDb::new().await.expect("database");
        // 100 events for each of 50 entities; all but the last of each published.
        sqlx::raw_sql(
            "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
             SELECT gen_random_uuid(), 'order.placed', 1, 'order-' || (g % 50), g / 50 + 1, '\\x7b7d', 'application/json'
             FROM generate_series(0, 4999) g;
             UPDATE outbox_events SET status = 'published', published_at = now() WHERE seq < 100;",
        )
        .execute(db.pool())
        .await
        .expect("fill");
        let pool = relay_session(&db).await;
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {CLAIM}")))
            .bind(2000_i64)
            .bind(500_i64)
            .bind("relay-a")
            .bind(Uuid::new_v4())
            .bind(30.0_f64)
            .bind(4_i64)
            .fetch_all(&pool)
            .await
            .expect("explain");
        let plan = plan.join("\n");
        assert!(plan.contains("Index Scan using outbox_events_queue on outbox_events e"), "{plan}");
        assert!(!plan.contains("Bitmap"), "{plan}");
        assert!(!plan.contains("Seq Scan"), "{plan}");

        let claimed = claim(&pool, 500, 1, "relay-a", Uuid::new_v4(), Duration::from_secs(30), Sealed::Open(None))
            .await
            .expect("claim")
            .rows;
        let heads = entity_seqs(&claimed);
        let mut expected: Vec<(String, u64)> = (0..50).map(|n| (format!("order-{n}"), 100)).collect();
        expected.sort();
        assert_eq!(heads, expected);
        pool.close().await;
        db.close().await.expect("drop database");
    }

    /// The most rows one step of a plan (`EXPLAIN (ANALYZE, FORMAT JSON)`) read: what it returned
    /// and what its filters removed, over all its loops.
    fn widest_step(node: &serde_json::Value) -> u64 {
        let n = |key: &str| node[key].as_u64().unwrap_or(0);
        let own =
            (n("Actual Rows") + n("Rows Removed by Filter") + n("Rows Removed by Join Filter")) * n("Actual Loops");
        let children = node["Plans"].as_array().map_or(0, |plans| plans.iter().map(widest_step).max().unwrap_or(0));
        own.max(children)
    }

    /// A claim prepared and run while the table was empty keeps PostgreSQL's generic plan of an
    /// empty table; once 20,000 rows have arrived (without statistics: autovacuum has not run yet)
    /// no step of that plan reads more rows than the claim's scan window. One step read the whole
    /// queue, and a claim took two seconds per batch with 100,000 rows written while the relay
    /// drained.
    #[tokio::test]
    async fn a_claim_planned_on_an_empty_table_reads_only_its_window_once_the_table_grew() {
        let db = outbox_testkit::TestDb::new().await.expect("database");
        sqlx::raw_sql("ALTER TABLE outbox_events SET (autovacuum_enabled = off)")
            .execute(db.pool())
            .await
            .expect("autovacuum off");
        let pool = relay_session(&db).await;
        for _ in 0..8 {
            let claimed = claim(&pool, 500, 4, "relay-a", Uuid::new_v4(), Duration::from_secs(30), Sealed::Open(None))
                .await
                .expect("claim");
            assert!(claimed.rows.is_empty());
        }
        let (name, generic): (String, i64) = sqlx::query_as(
            "SELECT name, generic_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH scanned AS%'",
        )
        .fetch_one(&pool)
        .await
        .expect("the claim is a prepared statement of this session");
        assert!(generic > 0, "PostgreSQL keeps a generic plan of the claim after five executions");
        // 100 events for each of 200 entities, interleaved in queue order.
        sqlx::raw_sql(
            "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
             SELECT gen_random_uuid(), 'order.placed', 1, 'order-' || (g % 200), g / 200 + 1, '\\x7b7d', 'application/json'
             FROM generate_series(0, 19999) g",
        )
        .execute(db.pool())
        .await
        .expect("fill");

        let mut tx = pool.begin().await.expect("begin");
        let explain =
            format!("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}(2000, 500, 'relay-a', '{}', 30, 4)", Uuid::new_v4());
        let plan: serde_json::Value =
            sqlx::query_scalar(sqlx::AssertSqlSafe(explain)).fetch_one(&mut *tx).await.expect("explain");
        tx.rollback().await.expect("rollback");
        let widest = widest_step(&plan[0]["Plan"]);
        assert!(widest <= 2000, "a step of the claim read {widest} rows:\n{plan:#}");

        let claimed = claim(&pool, 500, 4, "relay-a", Uuid::new_v4(), Duration::from_secs(30), Sealed::Open(None))
            .await
            .expect("claim");
        let firsts = entity_seqs(&claimed.rows).into_iter().filter(|(_, seq)| *seq == 1).count();
        assert_eq!((claimed.rows.len(), firsts), (500, 200), "the first two or three events of each entity");
        pool.close().await;
        db.close().await.expect("drop database");
    }

    /// One claim over every case a head can be in: in flight, behind a quarantined or retrying
    /// predecessor, ready, and unordered rows; later rows of every entity stay where they are.
    #[tokio::test]
    async fn the_claim_takes_ready_heads_and_unordered_rows_only() {
        let db = outbox_testkit::TestDb::new().await.expect("database");
        // Entities a..e with three events each, interleaved in queue order, and two unordered.
        sqlx::raw_sql(
            "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
             SELECT gen_random_uuid(), 'order.placed', 1, k, n, '\\x7b7d', 'application/json'
             FROM generate_series(1, 3) n, unnest(ARRAY['a', 'b', 'c', 'd', 'e']) k ORDER BY n, k;
             INSERT INTO outbox_events (id, event_type, event_version, payload, content_type)
             SELECT gen_random_uuid(), 'audit.logged', 1, '\\x7b7d', 'application/json' FROM generate_series(1, 2);
             -- a: 1 in flight. b: 1 quarantined. c: 1 waits for a retry. d: 1 published. e: untouched.
             UPDATE outbox_events SET lease_owner = 'relay-b', claim_token = gen_random_uuid(), attempts = 1,
                 lease_until = now() + interval '30 seconds' WHERE entity_key = 'a' AND seq = 1;
             UPDATE outbox_events SET status = 'quarantined', quarantined_at = now() WHERE entity_key = 'b' AND seq = 1;
             UPDATE outbox_events SET next_attempt_at = now() + interval '1 hour' WHERE entity_key = 'c' AND seq = 1;
             UPDATE outbox_events SET status = 'published', published_at = now() WHERE entity_key = 'd' AND seq = 1;",
        )
        .execute(db.pool())
        .await
        .expect("fill");
        let pool = relay_session(&db).await;

        let claimed = claim(&pool, 500, 1, "relay-a", Uuid::new_v4(), Duration::from_secs(30), Sealed::Open(None))
            .await
            .expect("claim")
            .rows;
        let got = entity_seqs(&claimed);
        assert_eq!(got, [("-".to_owned(), 0), ("-".to_owned(), 0), ("d".to_owned(), 2), ("e".to_owned(), 1)]);

        // The successors of the quarantined and the retrying event were deferred, nothing else.
        let deferred: Vec<(String, i64, bool)> = sqlx::query_as(
            "SELECT entity_key, seq, next_attempt_at = 'infinity' FROM outbox_events
             WHERE status = 'pending' AND next_attempt_at > now() ORDER BY entity_key, seq",
        )
        .fetch_all(db.pool())
        .await
        .expect("deferred");
        assert_eq!(deferred, [("b".to_owned(), 2, true), ("c".to_owned(), 1, false), ("c".to_owned(), 2, false)]);

        // Nothing more is ready until a predecessor is done.
        let again = claim(&pool, 500, 1, "relay-a", Uuid::new_v4(), Duration::from_secs(30), Sealed::Open(None))
            .await
            .expect("claim")
            .rows;
        assert!(again.is_empty(), "{again:?}");
        pool.close().await;
        db.close().await.expect("drop database");
    }

    /// A claim takes up to `run` consecutive events of each ready entity, and never a later event
    /// without every earlier one: not past a row that is not due, nor past a row another
    /// transaction holds locked (an event whose predecessor went to someone else would be
    /// published before that predecessor is confirmed).
    #[tokio::test]
    async fn the_claim_takes_runs_of_consecutive_events_and_never_skips_one() {
        let db = outbox_testkit::TestDb::new().await.expect("database");
        // Entities a..f with six events each, interleaved in queue order, and two unordered.
        sqlx::raw_sql(
            "INSERT INTO outbox_events (id, event_type, event_version, entity_key, seq, payload, content_type)
             SELECT gen_random_uuid(), 'order.placed', 1, k, n, '\\x7b7d', 'application/json'
             FROM generate_series(1, 6) n, unnest(ARRAY['a', 'b', 'c', 'd', 'e', 'f']) k ORDER BY n, k;
             INSERT INTO outbox_events (id, event_type, event_version, payload, content_type)
             SELECT gen_random_uuid(), 'audit.logged', 1, '\\x7b7d', 'application/json' FROM generate_series(1, 2);
             -- a: 1 in flight. b: untouched. c: 1 published (3 locked below). d: 3 waits for a retry.
             -- e: 1 locked below. f: untouched.
             UPDATE outbox_events SET lease_owner = 'relay-b', claim_token = gen_random_uuid(), attempts = 1,
                 lease_until = now() + interval '30 seconds' WHERE entity_key = 'a' AND seq = 1;
             UPDATE outbox_events SET status = 'published', published_at = now() WHERE entity_key = 'c' AND seq = 1;
             UPDATE outbox_events SET next_attempt_at = now() + interval '1 hour' WHERE entity_key = 'd' AND seq = 3;",
        )
        .execute(db.pool())
        .await
        .expect("fill");
        // Another relay's claim statement, caught while it holds its row locks.
        let mut other = db.pool().begin().await.expect("begin");
        sqlx::query(
            "SELECT 1 FROM outbox_events WHERE (entity_key = 'c' AND seq = 3) OR (entity_key = 'e' AND seq = 1)
             FOR UPDATE",
        )
        .execute(&mut *other)
        .await
        .expect("lock");
        let pool = relay_session(&db).await;

        let claimed = claim(&pool, 500, 4, "relay-a", Uuid::new_v4(), Duration::from_secs(30), Sealed::Open(None))
            .await
            .expect("claim")
            .rows;
        let got = entity_seqs(&claimed);
        let expected: Vec<(String, u64)> = [("-", 0), ("-", 0), ("b", 1), ("b", 2), ("b", 3), ("b", 4), ("c", 2)]
            .into_iter()
            .chain([("d", 1), ("d", 2), ("f", 1), ("f", 2), ("f", 3), ("f", 4)])
            .map(|(k, n)| (k.to_owned(), n))
            .collect();
        assert_eq!(got, expected);

        // Released by the other transaction, e is ready; a batch limit of three cuts its run to its
        // first three events. (c's next event waits behind c 2, claimed above.)
        other.rollback().await.expect("rollback");
        let claimed = claim(&pool, 3, 4, "relay-a", Uuid::new_v4(), Duration::from_secs(30), Sealed::Open(None))
            .await
            .expect("claim")
            .rows;
        let got = entity_seqs(&claimed);
        assert_eq!(got, [("e".to_owned(), 1), ("e".to_owned(), 2), ("e".to_owned(), 3)]);
        pool.close().await;
        db.close().await.expect("drop database");
    }
}
