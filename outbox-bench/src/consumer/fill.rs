//! Filling a queue: the events of one fill and their confirmed publishing to the benchmark
//! exchange.

use outbox_types::wire::WireMessage;

use super::plan::Plan;
use super::target::Target;
use crate::amqp::{publish_confirmed, wire_message};
use crate::error::BoxError;
use crate::figure::comment;

/// The events of one fill, each with a fresh event id.
pub(super) fn messages(plan: Plan) -> Result<Vec<WireMessage>, BoxError> {
    (0..plan.events).map(|i| wire_message(i, plan.entities)).collect()
}

/// Publishes `messages` with confirms to the benchmark exchange with `routing_key`, which routes
/// them to one queue; `what` names the phase.
pub(super) async fn fill(
    target: Target<'_>,
    what: &str,
    routing_key: &str,
    messages: &[WireMessage],
) -> Result<(), BoxError> {
    let took = publish_confirmed(target.url, target.exchange, routing_key, messages.iter().cloned().map(Ok)).await?;
    comment(format_args!(
        "{what}: queue filled with {} messages in {:.2} s ({:.1} msgs/s)",
        messages.len(),
        took.as_secs_f64(),
        messages.len() as f64 / took.as_secs_f64()
    ));
    Ok(())
}
