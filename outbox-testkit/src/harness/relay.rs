//! The harness's relay: its builder with the test defaults, and starting, stopping, killing and
//! joining it.

use std::time::Duration;

use outbox_relayer::{AmqpPublisher, RelayBuilder, RelayHandle};
use outbox_types::{Publisher, RetryPolicy};

use super::environment::Harness;
use super::relay_config::HarnessPublisher;
use crate::Result;

impl Harness {
    /// A relay builder with the harness's settings and `publisher`, for more relays of the test's
    /// own (the test owns their handles).
    pub fn relay_builder_with<P: Publisher>(&self, publisher: P) -> RelayBuilder<P> {
        outbox_relayer::Relay::builder(self.db().connect_options().clone(), publisher)
            .exchange(&self.exchange)
            .declare_exchange(false)
            .lease(Duration::from_secs(3))
            .confirm_timeout(Duration::from_secs(2))
            .poll_interval(Duration::from_millis(200))
            .shutdown_deadline(Duration::from_secs(5))
            .retry_policy(
                RetryPolicy::default().initial_delay(Duration::from_millis(100)).max_delay(Duration::from_secs(1)),
            )
    }

    /// A publisher to the harness's broker (through the relay proxy, if any), for
    /// [`Harness::relay_builder_with`].
    pub fn new_publisher(&self) -> AmqpPublisher {
        AmqpPublisher::builder(self.relay_url.clone()).connect_timeout(Duration::from_secs(2)).build_unchecked()
    }

    /// Starts the relay (after stopping the one running, if any).
    ///
    /// # Errors
    /// If the relay's settings are invalid, or the previous relay had failed.
    pub async fn start_relay(&mut self) -> Result<()> {
        self.start_relay_with(|b| b).await
    }

    /// Starts the relay with `configure` applied after the harness's settings, for example
    /// `|b| b.crash_at(CrashPoint::AfterClaim)` (after stopping the one running, if any).
    ///
    /// # Errors
    /// If the relay's settings are invalid, or the previous relay had failed.
    pub async fn start_relay_with(
        &mut self,
        configure: impl FnOnce(RelayBuilder<HarnessPublisher>) -> RelayBuilder<HarnessPublisher>,
    ) -> Result<()> {
        self.stop_relay().await?;
        let builder = configure((self.relay_config)(self.relay_builder_with(self.publisher.clone())));
        self.relay.0 = Some(builder.build()?.spawn());
        Ok(())
    }

    /// The running relay's handle.
    pub fn relay_handle(&self) -> Option<&RelayHandle> {
        self.relay.0.as_ref()
    }

    /// Shuts the relay down gracefully (nothing to do if none runs).
    ///
    /// # Errors
    /// The relay's error, if it had failed or stopped at a crash point.
    pub async fn stop_relay(&mut self) -> Result<()> {
        match self.relay.0.take() {
            Some(h) if !h.is_finished() => Ok(h.shutdown().await?),
            _ => Ok(()),
        }
    }

    /// Stops the relay at once, as if its process died: its claims stay until their lease expires.
    pub fn kill_relay(&mut self) {
        if let Some(h) = self.relay.0.take() {
            h.abort();
        }
    }

    /// Waits for the relay to end on its own (at an armed crash point) and returns how it ended;
    /// `None` if no relay runs.
    pub async fn join_relay(&mut self) -> Option<outbox_relayer::Result<()>> {
        Some(self.relay.0.take()?.join().await)
    }
}
