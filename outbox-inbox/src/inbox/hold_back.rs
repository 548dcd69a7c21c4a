//! An ordered event that is not its entity's next: recorded as stale if it is behind, stored in
//! the parking if it is ahead of a gap.

use outbox_types::{Event, PayloadCipher};

use super::outcome::Outcome;
use super::store;
use crate::Result;

/// Holds back an ordered event that is not its entity's next (the entity being at `last`): one at
/// or below `last` is recorded as stale, one further ahead is stored in the parking. Returns the
/// outcome if it was held back, `None` if it is next (or unordered).
pub(super) async fn hold_back(
    tx: &mut sqlx::PgConnection,
    scope: store::Scope<'_>,
    cipher: Option<&PayloadCipher>,
    event: &Event,
    last: i64,
) -> Result<Option<Outcome>> {
    let Some(entity) = &event.entity else { return Ok(None) };
    let seq = i64::try_from(entity.seq).unwrap_or(i64::MAX);
    if seq <= last {
        store::mark_stale(tx, scope, event.id, last).await?;
        return Ok(Some(Outcome::Stale));
    }
    if seq > last + 1 {
        store::store_content(tx, scope, event, "parked", None, cipher).await?;
        tracing::debug!(event_id = %event.id, entity = %entity.key, seq, last, "inbox.parked");
        return Ok(Some(Outcome::Parked));
    }
    Ok(None)
}
