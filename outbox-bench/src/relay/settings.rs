//! The relay's settings in every phase: default settings, a pool as `outbox relay` opens it, and
//! the overrides experiments may set through the environment.

use std::time::Duration;

use outbox_relayer::RelayBuilder;
use outbox_types::Publisher;

/// Connections of a relay's pool, as `outbox relay` opens.
pub(super) const RELAY_CONNECTIONS: u32 = 4;

/// Relay settings other than the defaults, for experiments only (the figures are defined with
/// default settings): `OUTBOX_BENCH_RELAY_BATCH`, `OUTBOX_BENCH_RELAY_WINDOW`,
/// `OUTBOX_BENCH_RELAY_PER_ENTITY` and `OUTBOX_BENCH_RELAY_FAST_POLL_US` set `batch_size`,
/// `confirm_window`, `events_per_entity` and `fast_poll_interval` (in microseconds);
/// `OUTBOX_BENCH_RELAY_DRAIN_ENTITIES` spreads the drained backlog over another number of entities
/// (see `Plan::new`).
pub(crate) fn experiment<P: Publisher>(mut relay: RelayBuilder<P>) -> RelayBuilder<P> {
    let var = |name| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = var("OUTBOX_BENCH_RELAY_BATCH") {
        relay = relay.batch_size(n);
    }
    if let Some(n) = var("OUTBOX_BENCH_RELAY_WINDOW") {
        relay = relay.confirm_window(n);
    }
    if let Some(n) = var("OUTBOX_BENCH_RELAY_PER_ENTITY") {
        relay = relay.events_per_entity(n);
    }
    if let Some(us) = var("OUTBOX_BENCH_RELAY_FAST_POLL_US") {
        relay = relay.fast_poll_interval(Duration::from_micros(us as u64));
    }
    relay
}
