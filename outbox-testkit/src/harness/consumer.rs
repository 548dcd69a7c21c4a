//! The harness's consumer (made by `consumer_factory`): starting, stopping, killing and joining
//! it, with a crash point if armed.

use outbox_inbox::RunnerHandle;

use super::consumer_factory::{ConsumerCrash, ConsumerStart};
use super::environment::Harness;
use super::url::via;
use crate::Result;

impl Harness {
    /// Starts the consumer (after killing the one running, if any). Nothing happens without
    /// [`HarnessBuilder::consumer`](crate::HarnessBuilder::consumer).
    ///
    /// # Errors
    /// If the runner cannot be built.
    pub fn start_consumer(&mut self) -> Result<()> {
        self.spawn_consumer(None)
    }

    /// Starts the consumer with a crash point armed (after killing the one running, if any).
    ///
    /// # Errors
    /// If the runner cannot be built.
    #[cfg(feature = "fail-points")]
    pub fn start_consumer_crashing_at(&mut self, point: outbox_inbox::CrashPoint) -> Result<()> {
        self.spawn_consumer(Some(point))
    }

    fn spawn_consumer(&mut self, crash: Option<ConsumerCrash>) -> Result<()> {
        let Some(factory) = self.consumer_factory.clone() else { return Ok(()) };
        self.kill_consumer();
        let url = self.consumer_proxy.as_ref().map_or_else(crate::amqp_url, |p| via(&crate::amqp_url(), p.addr()));
        let start = ConsumerStart {
            pool: self.consumer_pool().clone(),
            name: self.consumer_name.clone(),
            url,
            connection_name: self.consumer_connection.clone(),
            topology: self.topology.clone(),
            crash,
        };
        self.consumer.0 = Some(factory(start)?);
        Ok(())
    }

    /// The running consumer's handle (for its [`outbox_inbox::RunnerStats`]).
    pub fn consumer_handle(&self) -> Option<&RunnerHandle> {
        self.consumer.0.as_ref()
    }

    /// Shuts the consumer down gracefully (nothing to do if none runs).
    ///
    /// # Errors
    /// The runner's error, if it had failed or stopped at a crash point.
    pub async fn stop_consumer(&mut self) -> Result<()> {
        match self.consumer.0.take() {
            Some(h) if !h.is_finished() => Ok(h.shutdown().await?),
            _ => Ok(()),
        }
    }

    /// Stops the consumer at once, as if its process died: unacked deliveries come back.
    pub fn kill_consumer(&mut self) {
        if let Some(h) = self.consumer.0.take() {
            h.abort();
        }
    }

    /// Waits for the consumer to end on its own (at an armed crash point); `None` if none runs.
    pub async fn join_consumer(&mut self) -> Option<outbox_inbox::Result<()>> {
        Some(self.consumer.0.take()?.join().await)
    }
}
