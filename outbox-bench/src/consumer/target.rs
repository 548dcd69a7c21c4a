//! Where the benchmark publishes and consumes: its exchange and queues, their declaration, and the
//! routing key of the duplicates.

use outbox_testkit::TestBroker;

use crate::error::BoxError;
use crate::wait::{FLOOR, within};

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

/// Declares queue `name` as a consumer declares it ([`outbox_inbox::declare_queue`]: with a
/// dead-letter exchange `<name>.dlx` and queue `<name>.dead`), bound to `exchange` with `key`. All
/// three are remembered first, so that the broker's close deletes whatever was declared, even if a
/// declaration fails.
pub(crate) async fn declare_queue(broker: &TestBroker, exchange: &str, name: &str, key: &str) -> Result<(), BoxError> {
    broker.remember_queue(name);
    broker.remember_queue(&format!("{name}.dead"));
    broker.remember_exchange(&format!("{name}.dlx"));
    let keys = [key];
    let declared = outbox_inbox::declare_queue(broker.channel(), exchange, name, &keys);
    within(format_args!("the declaration of queue {name}"), FLOOR, declared).await?;
    Ok(())
}
