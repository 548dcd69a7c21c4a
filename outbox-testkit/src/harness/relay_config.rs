//! What the harness's relays are made of: the publisher they publish with, and the test's
//! adjustments of their builder.

use std::sync::Arc;

use outbox_relayer::{AmqpPublisher, RelayBuilder};

use crate::FaultyPublisher;

/// The publisher of the harness's relay: the real one, wrapped so that a test can inject faults.
pub type HarnessPublisher = FaultyPublisher<AmqpPublisher>;

/// The test's adjustments of the relay, applied after the harness's settings.
pub(super) type RelayConfig =
    Arc<dyn Fn(RelayBuilder<HarnessPublisher>) -> RelayBuilder<HarnessPublisher> + Send + Sync>;
