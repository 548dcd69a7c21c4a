//! Phase 1, the broker's ceiling: raw confirmed publishing to the benchmark queue, what the broker
//! takes on this machine, measured before and after each drain.

use super::arrivals::Arrivals;
use super::target::Target;
use crate::amqp::{PUBLISH_WINDOW, publish_confirmed, wire_message};
use crate::error::BoxError;
use crate::figure::comment;
use crate::producer::EVENT_TYPE;

/// Entities the raw messages are spread over (their headers name one), as in the drains.
const RAW_ENTITIES: u64 = 1_000;

/// One round of raw confirmed publishing; returns messages per second. The consumer is attached
/// as in every other phase.
pub(super) async fn ceiling(target: Target<'_>, messages: u64) -> Result<f64, BoxError> {
    target.purge().await?;
    let arrivals = Arrivals::start(target, messages, false).await?;
    let raw = (0..usize::try_from(messages)?).map(|i| wire_message(i as u64, RAW_ENTITIES));
    let outcome = publish_confirmed(target.url, target.exchange, EVENT_TYPE, raw).await;
    let stopped = arrivals.stop().await;
    let elapsed = outcome?;
    stopped?;
    target.purge().await?;
    let rate = messages as f64 / elapsed.as_secs_f64();
    comment(format_args!(
        "ceiling: {messages} messages confirmed in {:.2} s, {rate:.1} msgs/s ({PUBLISH_WINDOW} in flight)",
        elapsed.as_secs_f64()
    ));
    Ok(rate)
}
