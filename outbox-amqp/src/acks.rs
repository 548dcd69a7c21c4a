//! Acknowledgements of one channel, coalesced: a handled delivery is acked together with every
//! delivery before it in one `basic.ack` with `multiple` set, as soon as nothing before it on the
//! channel is still in hand.
//!
//! `multiple` acknowledges every unacknowledged delivery tag up to the one given, so it may only be
//! sent for a tag when every tag below it is handled: the window keeps, in tag order, each
//! delivery received and not yet settled, with its state. A delivery waiting out a requeue delay
//! must not hold the others back: the deliveries handled behind it are acked one by one instead.
//! The frames are sent in the order they were decided (a `multiple` ack covering a tag already
//! acked alone is fine; one arriving after a higher `multiple` ack is an unknown tag, and the
//! broker would close the channel).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicNackOptions};

use crate::Error;

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Being handled.
    InHand,
    /// Handled, to be acked.
    Done,
    /// Waiting out a requeue delay: the deliveries after it need not wait for it.
    Aside,
}

/// A frame to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Send {
    /// `basic.ack` of this tag, with `multiple` when it covers tags below it.
    Ack { tag: u64, multiple: bool },
}

/// The deliveries of a channel not yet settled, by tag. Pure bookkeeping: it decides the frames,
/// [`AckWindow`] sends them.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    open: BTreeMap<u64, Mark>,
}

impl Ledger {
    pub(crate) fn receive(&mut self, tag: u64) {
        self.open.insert(tag, Mark::InHand);
    }

    /// Sets a delivery in hand aside (a handled one stays handled) and returns the acks that are
    /// now due.
    pub(crate) fn set_aside(&mut self, tag: u64) -> Vec<Send> {
        if let Some(mark) = self.open.get_mut(&tag)
            && *mark == Mark::InHand
        {
            *mark = Mark::Aside;
        }
        self.due()
    }

    /// Marks `tags` handled and returns the acks that are now due.
    pub(crate) fn done(&mut self, tags: impl IntoIterator<Item = u64>) -> Vec<Send> {
        for tag in tags {
            if let Some(mark) = self.open.get_mut(&tag) {
                *mark = Mark::Done;
            }
        }
        self.due()
    }

    /// Forgets `tag` (nacked) and returns the acks that are now due.
    pub(crate) fn settle(&mut self, tag: u64) -> Vec<Send> {
        self.open.remove(&tag);
        self.due()
    }

    /// The handled deliveries at the front, in one ack; then those behind a delivery set aside,
    /// one ack each, up to the first delivery in hand.
    fn due(&mut self) -> Vec<Send> {
        let front: Vec<u64> = self.open.iter().take_while(|(_, m)| **m == Mark::Done).map(|(t, _)| *t).collect();
        let mut sends = Vec::new();
        if let Some(&last) = front.last() {
            sends.push(Send::Ack { tag: last, multiple: front.len() > 1 });
            for tag in &front {
                self.open.remove(tag);
            }
        }
        if self.open.values().next() == Some(&Mark::Aside) {
            let behind: Vec<u64> = self
                .open
                .iter()
                .take_while(|(_, m)| **m != Mark::InHand)
                .filter(|(_, m)| **m == Mark::Done)
                .map(|(t, _)| *t)
                .collect();
            for tag in behind {
                self.open.remove(&tag);
                sends.push(Send::Ack { tag, multiple: false });
            }
        }
        sends
    }
}

/// The ledger of one channel, and the channel its frames go out on, in the order decided.
#[derive(Debug)]
pub(crate) struct AckWindow {
    channel: Channel,
    ledger: Mutex<Ledger>,
    /// Held from deciding frames until the channel took them, so that they go out in the order
    /// decided.
    sending: tokio::sync::Mutex<()>,
}

impl AckWindow {
    pub(crate) fn new(channel: Channel) -> Arc<Self> {
        Arc::new(Self { channel, ledger: Mutex::default(), sending: tokio::sync::Mutex::new(()) })
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn receive(&self, tag: u64) {
        self.ledger().receive(tag);
    }

    /// Whether the delivery of `tag` is still in hand (neither handled nor set aside).
    pub(crate) fn is_open(&self, tag: u64) -> bool {
        self.ledger().open.get(&tag) == Some(&Mark::InHand)
    }

    /// Sets the delivery of `tag` aside and sends the acks that are now due.
    pub(crate) async fn set_aside(&self, tag: u64) -> Result<(), Error> {
        let _order = self.sending.lock().await;
        let sends = self.ledger().set_aside(tag);
        self.send(sends).await
    }

    /// [`AckWindow::set_aside`] for a delivery dropped unsettled: in a task of its own, as a drop
    /// cannot wait (outside a runtime, the channel is gone anyway).
    pub(crate) fn set_aside_later(self: &Arc<Self>, tag: u64) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let window = self.clone();
            runtime.spawn(async move {
                let _ = window.set_aside(tag).await;
            });
        }
    }

    /// Marks the deliveries of `tags` handled and sends the acks that are now due.
    pub(crate) async fn ack(&self, tags: impl IntoIterator<Item = u64>) -> Result<(), Error> {
        let _order = self.sending.lock().await;
        let sends = self.ledger().done(tags);
        self.send(sends).await
    }

    /// Requeues the delivery of `tag`, then sends the acks its settling made due.
    pub(crate) async fn requeue(&self, tag: u64) -> Result<(), Error> {
        let _order = self.sending.lock().await;
        let options = BasicNackOptions { requeue: true, ..BasicNackOptions::default() };
        let nacked = self.channel.basic_nack(tag, options).await;
        let sends = self.ledger().settle(tag);
        let sent = self.send(sends).await;
        nacked?;
        sent
    }

    async fn send(&self, sends: Vec<Send>) -> Result<(), Error> {
        for Send::Ack { tag, multiple } in sends {
            self.channel.basic_ack(tag, BasicAckOptions { multiple }).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(tags: impl IntoIterator<Item = u64>) -> Ledger {
        let mut ledger = Ledger::default();
        tags.into_iter().for_each(|t| ledger.receive(t));
        ledger
    }

    fn ack(tag: u64, multiple: bool) -> Send {
        Send::Ack { tag, multiple }
    }

    #[test]
    fn handled_deliveries_wait_for_those_before_them_then_go_in_one_ack() {
        let mut l = ledger(1..=6);
        assert_eq!(l.done([4, 5]), []);
        assert_eq!(l.done([2]), []);
        assert_eq!(l.done([1]), [ack(2, true)]);
        assert_eq!(l.done([3]), [ack(5, true)]);
        assert_eq!(l.done([6]), [ack(6, false)]);
        assert!(l.open.is_empty());
    }

    #[test]
    fn a_delivery_set_aside_does_not_hold_back_those_after_it() {
        let mut l = ledger(1..=5);
        assert_eq!(l.set_aside(1), []);
        // 2 and 3 handled behind the delivery set aside: acked one by one, never with multiple
        // (which would ack the one set aside too); 5 waits for 4, still in hand.
        assert_eq!(l.done([2, 3, 5]), [ack(2, false), ack(3, false)]);
        // Requeued: 4 is still in hand, so nothing more.
        assert_eq!(l.settle(1), []);
        assert_eq!(l.done([4]), [ack(5, true)]);
        assert!(l.open.is_empty());
    }

    #[test]
    fn a_multiple_ack_never_covers_a_delivery_in_hand_or_set_aside() {
        let mut l = ledger(1..=4);
        assert_eq!(l.set_aside(3), []);
        assert_eq!(l.done([1, 2, 4]), [ack(2, true), ack(4, false)]);
        assert_eq!(l.settle(3), []);
        assert!(l.open.is_empty());
    }

    #[test]
    fn setting_aside_a_handled_delivery_keeps_it_handled() {
        let mut l = ledger(1..=2);
        assert_eq!(l.done([2]), []);
        assert_eq!(l.set_aside(2), []);
        assert_eq!(l.done([1]), [ack(2, true)]);
    }

    #[test]
    fn setting_aside_the_front_delivery_releases_those_handled_behind_it() {
        let mut l = ledger(1..=4);
        assert_eq!(l.done([2, 3]), []);
        assert_eq!(l.set_aside(1), [ack(2, false), ack(3, false)]);
        assert_eq!(l.settle(1), []);
        assert_eq!(l.done([4]), [ack(4, false)]);
    }

    #[test]
    fn unknown_tags_change_nothing() {
        let mut l = ledger([7]);
        assert_eq!(l.done([3]), []);
        assert_eq!(l.settle(9), []);
        assert_eq!(l.done([7]), [ack(7, false)]);
    }
}
