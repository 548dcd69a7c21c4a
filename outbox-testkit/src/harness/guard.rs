//! The guard that aborts the relay's or the consumer's task when the harness goes away.

use outbox_inbox::RunnerHandle;
use outbox_relayer::RelayHandle;

/// Aborts the task it holds when dropped (a test that panics leaves nothing running).
pub(super) struct Guard<H: Abort>(pub(super) Option<H>);

/// A handle whose task can be aborted.
pub(super) trait Abort {
    fn abort_task(&self);
}

impl Abort for RelayHandle {
    fn abort_task(&self) {
        self.abort();
    }
}

impl Abort for RunnerHandle {
    fn abort_task(&self) {
        self.abort();
    }
}

impl<H: Abort> Drop for Guard<H> {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.abort_task();
        }
    }
}
