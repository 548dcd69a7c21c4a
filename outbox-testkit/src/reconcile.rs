//! The reconciliation (`outbox_ops::reconcile`, where operators have it too), with what a
//! [`Recorder`] saw at the broker: [`RecorderDeliveries::broker`].

pub use outbox_ops::reconcile::{
    BrokerFindings, Change, EventRef, InboxFindings, InboxRow, OrderViolation, OutboxRow, Reconciliation,
    ReconciliationReport, Snapshot, compare,
};

use crate::Recorder;

/// Compares a [`Reconciliation`] with what a [`Recorder`] saw at the broker.
pub trait RecorderDeliveries {
    /// Compares with what `recorder` saw at the broker, in arrival order (deliveries without an
    /// event id left out). Wait for the deliveries first.
    #[must_use]
    fn broker(self, recorder: &Recorder) -> Self;
}

impl RecorderDeliveries for Reconciliation {
    fn broker(self, recorder: &Recorder) -> Self {
        let seen = recorder
            .records()
            .into_iter()
            .filter_map(|r| Some(EventRef { id: r.event_id?, entity: r.entity, seq: r.seq }))
            .collect();
        self.deliveries(seen)
    }
}
