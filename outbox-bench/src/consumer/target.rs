//! Where the benchmark publishes and consumes: its exchange and queues, and the routing key of the
//! duplicates.

/// Routing key of the duplicates, bound to the second queue only.
pub(super) const REPLAY_KEY: &str = "order.replayed";

/// Where the benchmark publishes and consumes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'a> {
    pub(super) url: &'a str,
    pub(super) exchange: &'a str,
    pub(super) queue: &'a str,
    pub(super) replay: &'a str,
}
