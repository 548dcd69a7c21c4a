//! The consumer's side of the broker: a connection consuming some queues with a prefetch, and the
//! deliveries it yields (see `delivery`).

use std::sync::Arc;
use std::time::Duration;

use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, Connection, Consumer};

use crate::acks::AckWindow;
use crate::{DeadLetters, Delivery, Error, Nodes, Topology};

/// Declares `topology` on a channel of its own, so that a refusal (a queue declared elsewhere with
/// other arguments) closes only that channel: it is logged, and the subscription goes on with what
/// exists (a queue that does not exist then fails the subscription, with the broker's reason).
async fn declare_apart(connection: &Connection, topology: &Topology) -> Result<(), Error> {
    let channel = connection.create_channel().await?;
    match topology.declare(&channel).await {
        Ok(()) => {
            let _ = channel.close(200, "declared".into()).await;
        }
        Err(e) => {
            tracing::warn!(exchange = %topology.exchange, error = %e, "the broker refused the topology; consuming what exists")
        }
    }
    Ok(())
}

/// How long opening a subscription's connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection consuming `queues` with at most `prefetch` unacknowledged deliveries, and a
/// confirm channel for dead letters.
pub struct Subscription {
    connection: Connection,
    channel: Channel,
    streams: SelectAll<Consumer>,
    tags: Vec<ShortString>,
    dead_letters: DeadLetters,
    window: Arc<AckWindow>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("consumers", &self.tags.len()).finish_non_exhaustive()
    }
}

impl Subscription {
    /// Connects to the first of `nodes` that answers (named `connection_name` in the management
    /// UI; see [`Nodes::connect`]), declares `declare` if given, sets the prefetch and starts
    /// consuming every queue; dead letters go to `dead_letter_exchange`.
    ///
    /// # Errors
    /// An invalid URL, or the broker's failure or refusal (for example a queue that does not exist).
    pub async fn open(
        nodes: &Nodes,
        connection_name: &str,
        prefetch: u16,
        queues: &[String],
        dead_letter_exchange: &str,
        declare: Option<&Topology>,
    ) -> Result<Self, Error> {
        let connection = nodes.connect(connection_name, CONNECT_TIMEOUT).await?;
        if let Some(topology) = declare {
            declare_apart(&connection, topology).await?;
        }
        let channel = connection.create_channel().await?;
        channel.basic_qos(prefetch, BasicQosOptions::default()).await?;
        let dead_letters = DeadLetters::open(&connection, dead_letter_exchange).await?;
        let mut streams = SelectAll::new();
        let mut tags = Vec::new();
        for queue in queues {
            let options = BasicConsumeOptions::default();
            let consumer =
                channel.basic_consume(queue.as_str().into(), "".into(), options, FieldTable::default()).await?;
            tags.push(consumer.tag());
            streams.push(consumer);
        }
        let window = AckWindow::new(channel.clone());
        Ok(Self { connection, channel, streams, tags, dead_letters, window })
    }

    /// The next delivery; `None` when the broker ended every consumer.
    pub async fn next(&mut self) -> Option<Result<Delivery, Error>> {
        Some(self.streams.next().await?.map(|inner| self.delivery(inner)).map_err(Error::from))
    }

    fn delivery(&self, inner: lapin::message::Delivery) -> Delivery {
        Delivery::received(inner, self.window.clone())
    }

    /// Moves the deliveries already received into `batch`, up to `max` in all, without waiting.
    ///
    /// # Errors
    /// The stream's failure, or `None` inside `Err` when it ended: the deliveries taken so far
    /// are still to be handled; the subscription is done.
    pub fn take_ready(&mut self, batch: &mut Vec<Delivery>, max: usize) -> Result<(), Option<Error>> {
        while batch.len() < max {
            match self.streams.next().now_or_never() {
                Some(Some(Ok(inner))) => batch.push(self.delivery(inner)),
                Some(Some(Err(e))) => return Err(Some(e.into())),
                Some(None) => return Err(None),
                None => break,
            }
        }
        Ok(())
    }

    /// Where this subscription's dead letters go.
    pub fn dead_letters(&self) -> DeadLetters {
        self.dead_letters.clone()
    }

    /// Stops taking deliveries; those in hand can still be acked.
    pub async fn cancel(&self) {
        for tag in &self.tags {
            let _ = self.channel.basic_cancel(tag.clone(), BasicCancelOptions::default()).await;
        }
    }

    /// Closes the channel and the connection; deliveries not acked come back to their queues.
    pub async fn close(self) {
        crate::close(&self.connection, &[&self.channel], "shutdown").await;
    }
}
