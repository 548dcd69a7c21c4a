//! The broker of a benchmark: a connection with suffixed names, its exchanges and queues deleted
//! at the end.

use outbox_testkit::TestBroker;

use crate::error::BoxError;
use crate::wait::{FLOOR, within};

/// Runs `bench` with a broker connection and deletes the exchanges and queues it declared
/// afterwards, also when the benchmark failed.
pub(crate) async fn with_broker<T>(bench: impl AsyncFnOnce(&TestBroker) -> Result<T, BoxError>) -> Result<T, BoxError> {
    let broker = within("a connection to the broker", FLOOR, TestBroker::new()).await?;
    let outcome = bench(&broker).await;
    let closed = within("the deletion of the benchmark's exchanges and queues", FLOOR, broker.close()).await;
    let value = outcome?;
    closed?;
    Ok(value)
}
