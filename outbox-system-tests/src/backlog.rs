//! A committed backlog: events over many entities, interleaved as a busy service writes them.

use outbox_producer::Outbox;
use outbox_types::NewEvent;
use sqlx::PgPool;
use uuid::Uuid;

/// A backlog's shape: `per_entity` events for each of `entities` entities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Entities (`entity-0`, `entity-1`, ...).
    pub entities: usize,
    /// Events per entity, sequences 1 to `per_entity`.
    pub per_entity: usize,
}

impl Load {
    /// Events in all.
    pub const fn events(self) -> usize {
        self.entities * self.per_entity
    }
}

/// Commits `load` as `order.changed` events (a 200-byte payload with the round), round by round
/// so that entities interleave, in transactions of about 1,000 events; returns the ids in commit
/// order.
pub async fn fill(pool: &PgPool, load: Load) -> Vec<Uuid> {
    let outbox = Outbox::new();
    let per_tx = (1000 / load.entities.max(1)).max(1);
    let mut ids = Vec::with_capacity(load.events());
    for first in (0..load.per_entity).step_by(per_tx) {
        let rounds = first..(first + per_tx).min(load.per_entity);
        let events: Vec<NewEvent> = rounds.flat_map(|round| (0..load.entities).map(move |e| event(round, e))).collect();
        let mut tx = pool.begin().await.expect("begin");
        let got = outbox.enqueue_many(&mut *tx, events).await.expect("enqueue the backlog");
        tx.commit().await.expect("commit the backlog");
        ids.extend(got.into_iter().map(|id| *id.as_uuid()));
    }
    ids
}

fn event(round: usize, entity: usize) -> NewEvent {
    NewEvent::json("order.changed", &serde_json::json!({ "round": round, "pad": "x".repeat(200) }))
        .expect("a JSON payload")
        .entity(format!("entity-{entity}"))
}
