//! Retention: deletes old published (and optionally skipped) outbox rows in bounded batches,
//! clears the payload of published rows at an earlier age if asked (scrubbing), and deletes expired
//! idempotency keys.
//!
//! Only final rows are ever touched: `published` (confirmed by the broker) and, if asked,
//! `skipped` (given up by an operator). A pending row (new, claimed and in flight, or waiting for
//! a retry) and a quarantined row are never deleted, whatever their age. Each batch is one
//! index-bound statement (`outbox_events_published`, `outbox_events_skipped`) that locks its rows
//! with `SKIP LOCKED`, so several instances can clean at once without deadlocks or double work.
//!
//! A batch that deletes an entity's rows keeps the highest sequence it deleted in
//! `outbox_entity_sequences` (never deleted), in the same statement: an entity whose rows are all
//! gone still continues at its next number, so a sequence number is never reused. The relay
//! treats a deleted predecessor as done (only published or skipped rows are deleted), so the
//! order of later events is unaffected.

use std::time::Duration;

use sqlx::PgPool;

use crate::{Error, Result};

/// Deletes rows of final status `$status` whose `$since` is older than `$1` seconds, oldest first,
/// at most `$2`, and keeps per entity the highest sequence deleted (`outbox_entity_sequences`),
/// after which the entity's next event continues; returns how many were deleted.
macro_rules! delete_final {
    ($status:literal, $since:literal) => {
        concat!(
            "WITH doomed AS (
    SELECT id FROM outbox_events
    WHERE status = '",
            $status,
            "' AND ",
            $since,
            " < now() - make_interval(secs => $1)
    ORDER BY ",
            $since,
            "
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM outbox_events o USING doomed WHERE o.id = doomed.id AND o.status = '",
            $status,
            "'
    RETURNING o.entity_key, o.seq
), floors AS (
    INSERT INTO outbox_entity_sequences AS s (entity_key, last_seq)
    SELECT entity_key, max(seq) FROM gone WHERE entity_key IS NOT NULL GROUP BY entity_key ORDER BY entity_key
    ON CONFLICT (entity_key) DO UPDATE SET last_seq = greatest(s.last_seq, EXCLUDED.last_seq)
)
SELECT count(*) FROM gone"
        )
    };
}

/// Deletes published rows older than `$1` seconds (see `delete_final!`).
const DELETE_PUBLISHED: &str = delete_final!("published", "published_at");

/// Deletes skipped rows quarantined more than `$1` seconds ago (see `delete_final!`).
const DELETE_SKIPPED: &str = delete_final!("skipped", "quarantined_at");

/// Clears the payload of published rows older than `$1` seconds, oldest first, at most `$2`. The
/// batch starts at the newest row scrubbed so far (`outbox_events_scrubbed`), so it walks only over
/// rows still to scrub on `outbox_events_published`. It waits for locked rows rather than skipping
/// them: two cleaners take the same rows in the same order, so the second finds them scrubbed (or,
/// if the first rolled back, scrubs them itself), and the mark never passes a row left unscrubbed.
const SCRUB_PUBLISHED: &str = "\
WITH mark AS (
    SELECT coalesce(max(published_at), '-infinity') AS since FROM outbox_events WHERE payload_scrubbed_at IS NOT NULL
), doomed AS (
    SELECT o.id FROM outbox_events o, mark
    WHERE o.status = 'published' AND o.published_at >= mark.since
      AND o.published_at < now() - make_interval(secs => $1) AND o.payload_scrubbed_at IS NULL
    ORDER BY o.published_at
    LIMIT $2
    FOR UPDATE OF o
)
UPDATE outbox_events o SET payload = ''::bytea, payload_key_id = NULL, payload_scrubbed_at = now()
FROM doomed WHERE o.id = doomed.id AND o.status = 'published'";

/// Deletes expired idempotency keys, oldest first, at most `$1`.
const DELETE_EXPIRED_KEYS: &str = "\
WITH doomed AS (
    SELECT event_type, idempotency_key FROM outbox_idempotency_keys
    WHERE expires_at < now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox_idempotency_keys k USING doomed
WHERE k.event_type = doomed.event_type AND k.idempotency_key = doomed.idempotency_key AND k.expires_at < now()";

/// Deletes old final outbox rows (guarantee G7: bounded storage), and expired idempotency keys.
///
/// ```no_run
/// use std::time::Duration;
/// use outbox_ops::Retention;
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), outbox_ops::Error> {
/// let retention = Retention::builder(Duration::from_secs(7 * 24 * 3600)) // published a week ago
///     .batch_size(5_000)
///     .include_skipped(true)
///     .build()?;
/// let deleted = retention.run(&pool).await?;
/// println!("deleted {deleted} outbox rows");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Retention {
    older_than: Duration,
    batch_size: i64,
    include_skipped: bool,
    max_batches: Option<u64>,
    scrub_payload_after: Option<Duration>,
}

/// Builder of a [`Retention`].
#[derive(Debug, Clone)]
pub struct RetentionBuilder {
    retention: Retention,
}

impl RetentionBuilder {
    /// Sets how many rows one statement deletes at most. Defaults to 1,000.
    #[must_use]
    pub fn batch_size(mut self, n: i64) -> Self {
        self.retention.batch_size = n;
        self
    }

    /// Sets whether skipped rows (given up by an operator) are deleted too, by the age of their
    /// quarantine. Defaults to `false`: they stay for the operator's records.
    #[must_use]
    pub fn include_skipped(mut self, include: bool) -> Self {
        self.retention.include_skipped = include;
        self
    }

    /// Sets how many batches one [`Retention::run`] may delete at most (per status), so that one
    /// run has a bounded duration; the next run continues. Defaults to no limit.
    #[must_use]
    pub fn max_batches(mut self, n: u64) -> Self {
        self.retention.max_batches = Some(n);
        self
    }

    /// Clears the payload of rows published more than `age` ago, keeping the row (ids, type,
    /// entity, sequence, times) until it is deleted; `outbox events show` says when the payload
    /// was cleared. Pending, held, quarantined and skipped rows are never touched. Defaults to
    /// none (payloads go with their rows).
    #[must_use]
    pub fn scrub_payload_after(mut self, age: Duration) -> Self {
        self.retention.scrub_payload_after = Some(age);
        self
    }

    /// Builds the retention.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the batch size or the batch limit is not positive, or if
    /// payloads would be scrubbed no earlier than their rows are deleted.
    pub fn build(self) -> Result<Retention> {
        crate::metrics::describe();
        if self.retention.batch_size < 1 {
            return Err(Error::InvalidConfig("retention batch_size must be at least 1"));
        }
        if self.retention.max_batches == Some(0) {
            return Err(Error::InvalidConfig("retention max_batches must be at least 1"));
        }
        if self.retention.scrub_payload_after.is_some_and(|scrub| scrub >= self.retention.older_than) {
            return Err(Error::InvalidConfig("scrub_payload_after must be shorter than the age rows are deleted at"));
        }
        Ok(self.retention)
    }
}

impl Retention {
    /// Starts a builder: rows published (or skipped) more than `older_than` ago are deleted.
    pub fn builder(older_than: Duration) -> RetentionBuilder {
        RetentionBuilder {
            retention: Retention {
                older_than,
                batch_size: 1000,
                include_skipped: false,
                max_batches: None,
                scrub_payload_after: None,
            },
        }
    }

    /// Deletes batch after batch until none is left (or the batch limit is reached); returns how
    /// many rows were deleted.
    ///
    /// # Errors
    /// A database error; the batches before it stay deleted.
    pub async fn run(&self, pool: &PgPool) -> Result<u64> {
        let mut deleted = self.drain(pool, DELETE_PUBLISHED, self.older_than).await?;
        if self.include_skipped {
            deleted += self.drain(pool, DELETE_SKIPPED, self.older_than).await?;
        }
        if let Some(age) = self.scrub_payload_after {
            self.drain(pool, SCRUB_PUBLISHED, age).await?;
        }
        while self.expired_keys(pool).await? >= self.batch_size {}
        Ok(deleted)
    }

    /// Deletes one batch of published rows and, if included, one of skipped rows; returns how
    /// many rows were deleted.
    ///
    /// # Errors
    /// A database error.
    pub async fn run_batch(&self, pool: &PgPool) -> Result<u64> {
        let mut deleted = self.batch(pool, DELETE_PUBLISHED, self.older_than).await?;
        if self.include_skipped {
            deleted += self.batch(pool, DELETE_SKIPPED, self.older_than).await?;
        }
        self.expired_keys(pool).await?;
        Ok(deleted)
    }

    /// Clears the payload of one batch of published rows older than `scrub_payload_after`; returns
    /// how many (0 without that setting). [`Retention::run`] scrubs too, [`Retention::run_batch`]
    /// does not.
    ///
    /// # Errors
    /// A database error.
    pub async fn scrub_batch(&self, pool: &PgPool) -> Result<u64> {
        match self.scrub_payload_after {
            Some(age) => self.batch(pool, SCRUB_PUBLISHED, age).await,
            None => Ok(0),
        }
    }

    /// Deletes one batch of expired idempotency keys (their window is the outbox's, not this
    /// retention's age); returns how many.
    async fn expired_keys(&self, pool: &PgPool) -> Result<i64> {
        let n = sqlx::query(DELETE_EXPIRED_KEYS).bind(self.batch_size).execute(pool).await?.rows_affected();
        if n > 0 {
            tracing::debug!(deleted = n, "outbox.retention_expired_keys");
        }
        Ok(i64::try_from(n).unwrap_or(i64::MAX))
    }

    async fn drain(&self, pool: &PgPool, sql: &'static str, age: Duration) -> Result<u64> {
        let mut total = 0;
        let mut batches = 0;
        loop {
            let n = self.batch(pool, sql, age).await?;
            total += n;
            batches += 1;
            let full = i64::try_from(n).is_ok_and(|n| n >= self.batch_size);
            if !full || self.max_batches.is_some_and(|max| batches >= max) {
                return Ok(total);
            }
        }
    }

    async fn batch(&self, pool: &PgPool, sql: &'static str, age: Duration) -> Result<u64> {
        let n = if sql == SCRUB_PUBLISHED {
            sqlx::query(sql).bind(age.as_secs_f64()).bind(self.batch_size).execute(pool).await?.rows_affected()
        } else {
            let deleted: i64 =
                sqlx::query_scalar(sql).bind(age.as_secs_f64()).bind(self.batch_size).fetch_one(pool).await?;
            u64::try_from(deleted).unwrap_or(0)
        };
        if n > 0 && sql == SCRUB_PUBLISHED {
            metrics::counter!(crate::metrics::RETENTION_SCRUBBED).increment(n);
            tracing::debug!(scrubbed = n, "outbox.retention_scrub_batch");
        } else if n > 0 {
            metrics::counter!(crate::metrics::RETENTION_DELETED).increment(n);
            tracing::debug!(deleted = n, "outbox.retention_batch");
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_range_are_typed_errors() {
        let day = Duration::from_secs(86_400);
        assert!(matches!(Retention::builder(day).batch_size(0).build(), Err(Error::InvalidConfig(_))));
        assert!(matches!(Retention::builder(day).max_batches(0).build(), Err(Error::InvalidConfig(_))));
        let r = Retention::builder(day).build().expect("defaults");
        assert_eq!((r.batch_size, r.include_skipped, r.max_batches), (1000, false, None));
    }
}
