//! One claim: up to a batch of due rows taken under a fresh claim token, with the corrupt rows it
//! found quarantined and the rows of their entities that follow them given back.

use std::time::{Duration, Instant, SystemTime};

use outbox_core::{FailureKind, Publisher};
use uuid::Uuid;

#[cfg(feature = "fail-points")]
use super::CrashPoint;
use super::Relay;
use crate::Result;
use crate::store;

impl<P: Publisher> Relay<P> {
    /// Claims up to `limit` rows under the claim token `token`.
    pub(super) async fn claim(&self, limit: usize, token: Uuid) -> Result<Vec<store::Claimed>> {
        let s = &self.shared.settings;
        let claimed = {
            let _one_at_a_time = self.shared.claiming.lock().await;
            let started = Instant::now();
            let taken =
                store::claim(&self.shared.pool, limit, s.events_per_entity, &s.relay_id, token, s.lease, s.sealed())
                    .await?;
            metrics::histogram!(crate::metrics::CLAIM_SECONDS).record(started.elapsed().as_secs_f64());
            self.report_takeovers(&taken.taken_over);
            self.set_aside_corrupt(taken, token).await?
        };
        metrics::counter!(crate::metrics::CLAIMS, "found" => if claimed.is_empty() { "none" } else { "rows" })
            .increment(1);
        let now = SystemTime::now();
        for c in &claimed {
            metrics::histogram!(crate::metrics::AGE_AT_CLAIM)
                .record(now.duration_since(c.event.created_at).unwrap_or_default().as_secs_f64());
        }
        #[cfg(feature = "fail-points")]
        if !claimed.is_empty() {
            self.crash_if(CrashPoint::AfterClaim)?;
        }
        Ok(claimed)
    }

    /// Quarantines the claimed rows that do not decode into an event (`contract`: a row written by
    /// SQL that breaks the schema's promises), and gives back unsent, attempt taken back, the rows
    /// of their entities that follow them in the batch, which must not go before them. Returns the
    /// rows to publish.
    async fn set_aside_corrupt(&self, taken: store::Taken, token: Uuid) -> Result<Vec<store::Claimed>> {
        let store::Taken { mut rows, corrupt, .. } = taken;
        if corrupt.is_empty() {
            return Ok(rows);
        }
        let after_corrupt = |c: &store::Claimed| {
            c.event.entity.as_ref().is_some_and(|e| {
                corrupt.iter().any(|k| {
                    k.entity
                        .as_ref()
                        .is_some_and(|(key, seq)| *key == e.key && i64::try_from(e.seq).is_ok_and(|s| s > *seq))
                })
            })
        };
        let held: Vec<Uuid> = rows.iter().filter(|c| after_corrupt(c)).map(|c| *c.event.id.as_uuid()).collect();
        rows.retain(|c| !after_corrupt(c));
        let failures: Vec<store::Failure> = corrupt
            .iter()
            .map(|k| {
                tracing::warn!(event_id = %k.id, what = k.what, kind = %FailureKind::Contract, "outbox.quarantine");
                store::Failure {
                    id: k.id,
                    quarantine: true,
                    delay: Duration::ZERO,
                    reason: format!("corrupt row: {} (quarantined)", k.what),
                    kind: FailureKind::Contract,
                }
            })
            .collect();
        metrics::counter!(crate::metrics::QUARANTINED).increment(failures.len() as u64);
        // One transaction: a relay that dies here leaves no successor leased behind a quarantined
        // row, where no claim would take it over.
        let mut tx = self.shared.pool.begin().await?;
        store::mark_failed(&mut *tx, &failures, token).await?;
        store::release(&mut *tx, &held, token, true).await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// Counts the rows taken over from claims whose lease expired, with one line per relay they
    /// were taken from: a relay died, stalled or lost its database for longer than its lease.
    fn report_takeovers(&self, taken_over: &[(String, usize)]) {
        for (from, rows) in taken_over {
            metrics::counter!(crate::metrics::TAKEOVERS).increment(*rows as u64);
            self.shared.tally.taken_over(*rows as u64);
            tracing::info!(from = %from, rows, "outbox.takeover: claimed rows whose lease had expired");
        }
    }
}
