//! Which deliveries go into the next batch: those received first, except that an entity held by a
//! batch in hand waits, with every later delivery of it, until that batch is done.
//!
//! Two batches in hand never share an entity, so a later event of an entity can neither overtake
//! an earlier one (which would park it and cost a transaction of its own later) nor wait for the
//! earlier one's lock with a connection held. Events without an entity, and deliveries that name
//! none, are never held back. Several processes of one consumer still meet in the database, where
//! the entity's lock and parking keep the order.

use std::collections::{HashSet, VecDeque};

/// The key an entity is held by: the tenant's name (where a header names it) and the entity key,
/// so that two tenants' entities of one key do not wait for each other. Where the application's
/// own rule names the tenant, the entity key alone (two tenants' entities of one key then take
/// turns, which costs time, never order).
pub(super) fn key(entity: &str, tenant: Option<&str>) -> String {
    match tenant {
        Some(tenant) => format!("{tenant}\u{0}{entity}"),
        None => entity.to_owned(),
    }
}

/// Deliveries received and not handed to a batch yet, in the order received, and the entities of
/// the batches in hand.
#[derive(Debug)]
pub(super) struct Schedule<T> {
    waiting: VecDeque<(Option<String>, T)>,
    busy: HashSet<String>,
}

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Self { waiting: VecDeque::new(), busy: HashSet::new() }
    }
}

impl<T> Schedule<T> {
    /// Adds a delivery of `entity` (if it names one) behind those waiting.
    pub(super) fn push(&mut self, entity: Option<String>, item: T) {
        self.waiting.push_back((entity, item));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The next batch, up to `max` deliveries in the order received, and the entities it holds
    /// from now on (until [`Schedule::release`]). A delivery whose entity a batch in hand holds is
    /// skipped, and so is every later delivery of that entity.
    pub(super) fn next_batch(&mut self, max: usize) -> (Vec<T>, Vec<String>) {
        let mut batch = Vec::new();
        let mut taken: Vec<String> = Vec::new();
        let mut skipped: HashSet<String> = HashSet::new();
        let mut rest = VecDeque::with_capacity(self.waiting.len());
        for (entity, item) in self.waiting.drain(..) {
            let free = match &entity {
                None => true,
                Some(key) => !self.busy.contains(key) && !skipped.contains(key),
            };
            if free && batch.len() < max {
                if let Some(key) = entity
                    && !taken.contains(&key)
                {
                    taken.push(key);
                }
                batch.push(item);
            } else {
                if let Some(key) = &entity {
                    skipped.insert(key.clone());
                }
                rest.push_back((entity, item));
            }
        }
        self.waiting = rest;
        self.busy.extend(taken.iter().cloned());
        (batch, taken)
    }

    /// A batch is done: its entities are free again.
    pub(super) fn release(&mut self, entities: &[String]) {
        for key in entities {
            self.busy.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(items: &[(Option<&str>, u32)]) -> Schedule<u32> {
        let mut s = Schedule::default();
        for (entity, n) in items {
            s.push(entity.map(str::to_owned), *n);
        }
        s
    }

    #[test]
    fn an_entity_in_hand_waits_with_its_later_deliveries_and_the_others_go_on() {
        let mut s = schedule(&[(Some("a"), 1), (Some("b"), 2), (Some("a"), 3), (None, 4), (Some("c"), 5)]);
        let (first, held) = s.next_batch(2);
        assert_eq!(first, [1, 2]);
        assert_eq!(held, ["a", "b"]);
        // a3 waits for the batch holding a; the delivery without an entity and c go on.
        let (second, held) = s.next_batch(10);
        assert_eq!(second, [4, 5]);
        assert_eq!(held, ["c"]);
        assert_eq!(s.next_batch(10).0, Vec::<u32>::new());
        s.release(&["a".to_owned(), "b".to_owned()]);
        assert_eq!(s.next_batch(10).0, [3]);
        assert!(s.is_empty());
    }

    #[test]
    fn two_tenants_entities_of_one_key_are_held_apart() {
        let (acme, globex) = (key("order-7", Some("acme")), key("order-7", Some("globex")));
        assert_ne!(acme, globex);
        let mut s = Schedule::default();
        s.push(Some(acme.clone()), 1);
        s.push(Some(globex), 2);
        s.push(Some(acme), 3);
        // acme's order-7 in hand does not hold globex's back.
        assert_eq!(s.next_batch(1).0, [1]);
        assert_eq!(s.next_batch(10).0, [2]);
        assert_eq!(key("order-7", None), "order-7");
    }

    #[test]
    fn a_skipped_delivery_keeps_every_later_one_of_its_entity_behind_it() {
        let mut s = schedule(&[(Some("a"), 1), (Some("b"), 2), (Some("a"), 3)]);
        // Only one fits: b2 is skipped for room, so a3 may still join a1's batch, in order.
        assert_eq!(s.next_batch(1).0, [1]);
        let mut s2 = schedule(&[(Some("x"), 0)]);
        assert_eq!(s2.next_batch(1).0, [0]);
        s2.push(Some("x".to_owned()), 1);
        s2.push(Some("y".to_owned()), 2);
        s2.push(Some("x".to_owned()), 3);
        // x is in hand: x1 and x3 wait, y2 goes.
        assert_eq!(s2.next_batch(10).0, [2]);
        s2.release(&["x".to_owned()]);
        assert_eq!(s2.next_batch(10).0, [1, 3]);
        assert_eq!(s.next_batch(10).0, [2], "a3 waits for a1, b2 goes");
    }

    #[test]
    fn one_entity_may_repeat_within_a_batch_in_order() {
        let mut s = schedule(&[(Some("a"), 1), (Some("a"), 2), (Some("b"), 3)]);
        let (batch, held) = s.next_batch(10);
        assert_eq!(batch, [1, 2, 3]);
        assert_eq!(held, ["a", "b"]);
    }
}
