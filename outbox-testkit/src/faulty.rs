//! A publisher that injects broker failures into any other publisher.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_types::{
    ConfirmFuture, ExchangeKind, FailureKind, OutgoingMessage, PublishFailure, PublishOutcome, Publisher,
};

/// One injected failure, applied to one message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The message is not sent; its outcome is this failure.
    Fail(FailureKind),
    /// The message is not sent; the broker "nacks" it (a transient failure).
    Nack,
    /// The message is not sent; the broker "returns" it as unroutable (a rejected failure).
    Unroutable,
    /// The message is sent; its confirm arrives only after this delay.
    DelayConfirm(Duration),
    /// The message is sent; its confirm never arrives (the relay's confirm timeout decides).
    LoseConfirm,
    /// The publish call carrying the message blocks for this long before anything is sent, as if
    /// the process were paused (a stopped process, a stalled socket); then the batch goes out
    /// normally. The relay's leases keep running meanwhile.
    Stall(Duration),
}

/// Wraps a publisher and applies queued [`Fault`]s to the next messages, one fault per message, in
/// order. Messages without a queued fault pass through untouched.
///
/// ```no_run
/// use outbox_testkit::{Fault, FaultyPublisher};
///
/// let inner = outbox_relayer::AmqpPublisher::builder(outbox_testkit::amqp_url()).build().expect("a valid URL");
/// let faulty = FaultyPublisher::new(inner);
/// faulty.inject(3, Fault::Nack); // the next three messages are nacked
/// faulty.inject(1, Fault::LoseConfirm); // the one after is sent, but its confirm is lost
/// // Relay::builder(database, faulty.clone())...
/// ```
#[derive(Debug)]
pub struct FaultyPublisher<P> {
    inner: Arc<P>,
    faults: Arc<Mutex<VecDeque<Fault>>>,
    applied: Arc<Mutex<Vec<Fault>>>,
}

impl<P> Clone for FaultyPublisher<P> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), faults: self.faults.clone(), applied: self.applied.clone() }
    }
}

impl<P: Publisher> FaultyPublisher<P> {
    /// Wraps `inner`; no fault is queued yet.
    pub fn new(inner: P) -> Self {
        Self { inner: Arc::new(inner), faults: Arc::default(), applied: Arc::default() }
    }

    /// Queues `fault` for the next `n` messages (after those already queued).
    pub fn inject(&self, n: usize, fault: Fault) {
        if let Ok(mut q) = self.faults.lock() {
            q.extend(std::iter::repeat_n(fault, n));
        }
    }

    /// Faults still queued.
    pub fn pending(&self) -> usize {
        self.faults.lock().map(|q| q.len()).unwrap_or(0)
    }

    /// Faults applied so far, in order.
    pub fn applied(&self) -> Vec<Fault> {
        self.applied.lock().map(|a| a.clone()).unwrap_or_default()
    }

    fn next_fault(&self) -> Option<Fault> {
        let fault = self.faults.lock().ok()?.pop_front()?;
        if let Ok(mut a) = self.applied.lock() {
            a.push(fault.clone());
        }
        Some(fault)
    }
}

fn failed(kind: FailureKind, reason: &str) -> ConfirmFuture {
    Box::pin(std::future::ready(PublishOutcome::Failed(PublishFailure::new(kind, reason))))
}

impl<P: Publisher> Publisher for FaultyPublisher<P> {
    async fn publish(&self, batch: Vec<OutgoingMessage>) -> Vec<ConfirmFuture> {
        // Decide every message's fault first, then send the ones that go to the broker in one batch.
        let plan: Vec<Option<Fault>> = batch.iter().map(|_| self.next_fault()).collect();
        let stall = plan.iter().filter_map(|f| if let Some(Fault::Stall(d)) = f { Some(*d) } else { None }).max();
        if let Some(stall) = stall {
            tokio::time::sleep(stall).await;
        }
        let to_send: Vec<OutgoingMessage> = batch
            .into_iter()
            .zip(&plan)
            .filter(|(_, f)| matches!(f, None | Some(Fault::DelayConfirm(_) | Fault::LoseConfirm | Fault::Stall(_))))
            .map(|(m, _)| m)
            .collect();
        let mut sent = self.inner.publish(to_send).await.into_iter();
        plan.into_iter()
            .map(|fault| match fault {
                None | Some(Fault::Stall(_)) => sent
                    .next()
                    .unwrap_or_else(|| failed(FailureKind::Transient, "inner publisher returned too few confirms")),
                Some(Fault::Fail(kind)) => failed(kind, "injected failure"),
                Some(Fault::Nack) => failed(FailureKind::Transient, "nacked by the broker (injected)"),
                Some(Fault::Unroutable) => {
                    failed(FailureKind::Rejected, "returned by the broker: 312 NO_ROUTE (injected)")
                }
                Some(Fault::DelayConfirm(delay)) => {
                    let confirm = sent.next();
                    Box::pin(async move {
                        tokio::time::sleep(delay).await;
                        match confirm {
                            Some(c) => c.await,
                            None => PublishOutcome::Failed(PublishFailure::new(FailureKind::Transient, "no confirm")),
                        }
                    }) as ConfirmFuture
                }
                Some(Fault::LoseConfirm) => {
                    drop(sent.next());
                    Box::pin(std::future::pending()) as ConfirmFuture
                }
            })
            .collect()
    }

    async fn declare_exchange(&self, exchange: &str, kind: ExchangeKind) -> Result<(), PublishFailure> {
        self.inner.declare_exchange(exchange, kind).await
    }

    async fn connect(&self) -> Result<(), PublishFailure> {
        self.inner.connect().await
    }
}
