//! Which message a `basic.return` answers. AMQP does not say: a return carries the message, not its
//! delivery tag, and the broker only promises to send it before the confirm of that message. lapin
//! hands each return to the next confirm it completes, which is another message's whenever
//! confirms cross the return (the broker confirms a routed message in between, or several at once
//! with `multiple`, which lapin completes in no fixed order). Taken at lapin's word, an unroutable
//! event would count as published and a routed one as returned.
//!
//! So one task per channel (the ledger) holds every confirm of the channel, reads each return's
//! `message_id`, and decides a message's outcome only when every confirm that could hold its return
//! has been seen. lapin keeps waiting returns in order and gives the oldest to each confirm it
//! completes. A confirm completed with no return found none waiting: its own return, if any, was
//! taken by a confirm completed before it, so it is enough to have taken in every publish begun
//! until it was seen completed, and to look at the confirms once more. A confirm completed with
//! another message's return may have left its own waiting, for a confirm lapin completes after it
//! (several confirms of one `multiple` ack are completed in no fixed order): it is decided once
//! every confirm begun before it was seen completed has been seen completed too.
//!
//! This relies on what RabbitMQ does: returns in publish order, each before its message's confirm,
//! and the confirms of returned messages sent as soon as they are routed, in order. A message
//! without a `message_id` can only be paired as lapin pairs it. A publish whose future is dropped
//! after lapin took it (the caller cancelled [`Publisher::publish`](outbox_types::Publisher)) leaves
//! a confirm the ledger never sees; the relay cancels a publish only when it is aborted
//! (`RelayHandle::abort`, a crash point), as if its process died, and then records nothing.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lapin::Confirmation;
use lapin::message::BasicReturnMessage;
use outbox_types::{FailureKind, PublishFailure, PublishOutcome};
use tokio::sync::{mpsc, oneshot};

/// The ledger of one confirm channel: where each publish on it registers its confirm.
#[derive(Clone)]
pub(super) struct Ledger {
    books: Arc<Mutex<Books>>,
}

/// The publishes begun and not yet registered, and the way to the ledger's task.
struct Books {
    next: u64,
    begun: BTreeSet<u64>,
    tx: mpsc::UnboundedSender<Entry>,
}

/// A publish about to be sent: registered with its confirm, or settled without one when dropped.
pub(super) struct Ticket {
    books: Arc<Mutex<Books>>,
    seq: Option<u64>,
}

enum Entry {
    Watch(Watched),
    Settled,
}

/// What the ledger decided for a message: its outcome, or the channel's error, which the publisher
/// classifies (it knows whether the connection is gone).
pub(super) enum Decided {
    Outcome(PublishOutcome),
    Error(lapin::Error),
}

/// A message's confirm as the ledger holds it.
struct Watched {
    seq: u64,
    message_id: Option<String>,
    confirm: lapin::PublisherConfirm,
    reply: oneshot::Sender<Decided>,
}

/// A completed confirm whose outcome is not decided yet.
struct Seen {
    seq: u64,
    /// It carried another message's return: its own may still be waiting in lapin.
    displaced: bool,
    message_id: Option<String>,
    confirmation: lapin::Result<Confirmation>,
    reply: oneshot::Sender<Decided>,
}

impl Ledger {
    /// A ledger for a new channel, with its task spawned on the current runtime. The task ends
    /// when the ledger and its tickets are gone and every confirm it holds is completed.
    pub(super) fn spawn() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let books = Arc::new(Mutex::new(Books { next: 0, begun: BTreeSet::new(), tx }));
        tokio::spawn(run(rx, Arc::downgrade(&books)));
        Self { books }
    }

    /// Begins a publish: until its ticket is registered or dropped, no outcome is decided for a
    /// confirm completed after this point.
    pub(super) fn begin(&self) -> Ticket {
        let mut books = lock(&self.books);
        let seq = books.next;
        books.next += 1;
        books.begun.insert(seq);
        Ticket { books: self.books.clone(), seq: Some(seq) }
    }
}

impl Ticket {
    /// Hands the message's confirm to the ledger; the future resolves to what it decided.
    pub(super) fn register(
        mut self,
        message_id: Option<String>,
        confirm: lapin::PublisherConfirm,
    ) -> impl Future<Output = Decided> + Send + 'static {
        let (reply, decided) = oneshot::channel();
        let mut books = lock(&self.books);
        let seq = self.seq.take().unwrap_or(u64::MAX);
        books.begun.remove(&seq);
        let _ = books.tx.send(Entry::Watch(Watched { seq, message_id, confirm, reply }));
        drop(books);
        decided.map(|decided| {
            decided.unwrap_or_else(|_| {
                let abandoned = PublishFailure::new(FailureKind::Unavailable, "confirm abandoned");
                Decided::Outcome(PublishOutcome::Failed(abandoned))
            })
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(seq) = self.seq.take() {
            let mut books = lock(&self.books);
            books.begun.remove(&seq);
            let _ = books.tx.send(Entry::Settled);
        }
    }
}

fn lock(books: &Mutex<Books>) -> MutexGuard<'_, Books> {
    books.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ledger's task: takes in confirms, notes the returns they carry by message id, and decides
/// outcomes when it is safe to (see the module's note).
async fn run(mut rx: mpsc::UnboundedReceiver<Entry>, books: Weak<Mutex<Books>>) {
    let mut state = State::default();
    let mut open = true;
    while open || !state.confirming.is_empty() || !state.observed.is_empty() || !state.waiting.is_empty() {
        tokio::select! {
            entry = rx.recv(), if open => match entry {
                Some(entry) => state.take(entry),
                None => open = false,
            },
            Some(seen) = state.confirming.next(), if !state.confirming.is_empty() => state.note(seen),
        }
        state.settle(&mut rx, &books);
    }
    state.report_orphans();
}

type Completing = futures::future::BoxFuture<'static, Seen>;

#[derive(Default)]
struct State {
    confirming: FuturesUnordered<Completing>,
    /// Completed confirms seen since the ledger last looked at the books.
    observed: Vec<Seen>,
    /// Completed confirms, each with the number of publishes begun before it was seen: decided
    /// once all of those are registered and one more look at the confirms has been taken (a
    /// displaced one: once all of those are seen completed).
    waiting: Vec<(u64, Seen)>,
    /// The publishes registered whose confirm is not seen completed yet.
    unseen: BTreeSet<u64>,
    /// Returned messages by message id, until their own confirm is decided.
    returned: HashMap<String, String>,
}

impl State {
    fn take(&mut self, entry: Entry) {
        if let Entry::Watch(mut w) = entry {
            self.unseen.insert(w.seq);
            // A confirm completed before it was registered is seen here, exactly: only added to
            // the set, it could land behind a confirm that lapin's thread is adding at that very
            // moment, where a look that must not wait does not reach it.
            if let Some(confirmation) = (&mut w.confirm).now_or_never() {
                let (seq, message_id, reply) = (w.seq, w.message_id, w.reply);
                self.note(Seen { seq, displaced: false, message_id, confirmation, reply });
                return;
            }
            self.confirming.push(Box::pin(async move {
                let confirmation = w.confirm.await;
                let (seq, message_id, reply) = (w.seq, w.message_id, w.reply);
                Seen { seq, displaced: false, message_id, confirmation, reply }
            }));
        }
    }

    /// Records the return a completed confirm carries under the message id it names (under the
    /// confirm's own message when the return names none).
    fn note(&mut self, mut seen: Seen) {
        self.unseen.remove(&seen.seq);
        if let Ok(Confirmation::Ack(returned) | Confirmation::Nack(returned)) = &mut seen.confirmation
            && let Some(message) = returned.take()
        {
            let owner = message.properties.message_id().as_ref().map(|id| id.as_str().to_owned());
            if let Some(owner) = owner.or_else(|| seen.message_id.clone()) {
                seen.displaced = seen.message_id.as_ref() != Some(&owner);
                self.returned.insert(owner, reason(&message));
            }
        }
        self.observed.push(seen);
    }

    /// Rounds of: take in what was registered and read the books; see every confirm completed;
    /// decide the ones whose earlier publishes were all registered before that look. Repeats
    /// while confirms keep completing.
    fn settle(&mut self, rx: &mut mpsc::UnboundedReceiver<Entry>, books: &Weak<Mutex<Books>>) {
        loop {
            let oldest = {
                // Without books, no publish can begin any more: every confirm is registered.
                let books = books.upgrade();
                let books = books.as_deref().map(lock);
                while let Ok(entry) = rx.try_recv() {
                    self.take(entry);
                }
                let next = books.as_ref().map_or(u64::MAX, |b| b.next);
                self.waiting.extend(self.observed.drain(..).map(|seen| (next, seen)));
                books.as_ref().and_then(|b| b.begun.first().copied()).unwrap_or(u64::MAX)
            };
            let (registered, waiting) =
                std::mem::take(&mut self.waiting).into_iter().partition::<Vec<_>, _>(|(n, _)| *n <= oldest);
            self.waiting = waiting;
            while let Some(Some(seen)) = self.confirming.next().now_or_never() {
                self.note(seen);
            }
            let oldest_unseen = self.unseen.first().copied().unwrap_or(u64::MAX);
            let (ready, displaced): (Vec<_>, Vec<_>) =
                registered.into_iter().partition(|(n, seen)| !seen.displaced || *n <= oldest_unseen);
            self.waiting.extend(displaced);
            for (_, seen) in ready {
                let decided = self.decide(seen.message_id.as_deref(), seen.confirmation);
                let _ = seen.reply.send(decided);
            }
            if self.observed.is_empty() {
                return;
            }
        }
    }

    fn decide(&mut self, message_id: Option<&str>, confirmation: lapin::Result<Confirmation>) -> Decided {
        let failed = |kind, reason: &str| Decided::Outcome(PublishOutcome::Failed(PublishFailure::new(kind, reason)));
        if let Some(reason) = message_id.and_then(|id| self.returned.remove(id)) {
            return failed(FailureKind::Rejected, &reason);
        }
        match confirmation {
            Ok(Confirmation::Ack(_)) => Decided::Outcome(PublishOutcome::Confirmed),
            Ok(Confirmation::Nack(_)) => failed(FailureKind::Transient, "nacked by the broker"),
            Ok(Confirmation::NotRequested) => failed(FailureKind::Transient, "publisher confirms are not enabled"),
            Err(e) => Decided::Error(e),
        }
    }

    /// Returns whose message was decided before they were seen: the broker contradicted itself
    /// (or confirmed a message, then returned it). Said, not hidden.
    fn report_orphans(&self) {
        for message_id in self.returned.keys() {
            tracing::warn!(%message_id, "outbox.return_after_confirm");
        }
    }
}

fn reason(message: &BasicReturnMessage) -> String {
    format!("returned by the broker: {} {}", message.reply_code, message.reply_text.as_str())
}
