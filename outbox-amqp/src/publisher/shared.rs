//! The state the clones of one publisher and their pending confirms share: its nodes and settings,
//! the connection and its confirm channel (with its ledger), and the back-off after failed connection attempts.

use std::time::Duration;

use lapin::{Channel, Connection};
use outbox_types::{ExchangeKind, FailureKind, PublishFailure};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::ledger::Ledger;
use crate::classify::{classify, connection_lost};
use crate::{Nodes, Topology};

/// What the clones of one [`AmqpPublisher`](crate::AmqpPublisher) and their pending confirms share.
pub(super) struct Inner {
    pub(super) nodes: Nodes,
    pub(super) connection_name: String,
    pub(super) connect_timeout: Duration,
    pub(super) max_message_bytes: usize,
    /// Declared on every new connection's channels, on a channel of their own.
    pub(super) topologies: std::sync::Mutex<Vec<Topology>>,
    /// A topology was added since the last declaration: the relay's declaration of its exchange
    /// declares it on the connection already open.
    pub(super) topologies_pending: std::sync::atomic::AtomicBool,
    pub(super) state: Mutex<State>,
}

/// The connection, its confirm channel, the exchanges to declare again on a new channel, and the
/// back-off after failed connection attempts.
#[derive(Default)]
pub(super) struct State {
    pub(super) connection: Option<Connection>,
    pub(super) channel: Option<Link>,
    pub(super) exchanges: Vec<(String, ExchangeKind)>,
    pub(super) failures: u32,
    pub(super) retry_at: Option<Instant>,
    pub(super) last_failure: Option<PublishFailure>,
}

/// A confirm channel and the ledger that pairs its confirms with the broker's returns.
#[derive(Clone)]
pub(super) struct Link {
    pub(super) channel: Channel,
    pub(super) ledger: Ledger,
}

impl Inner {
    /// A message not sent, or a confirm lost, because the connection is gone (dropped, reset,
    /// heartbeat missed) is not the message's failure: `unavailable`. A channel the broker closed
    /// while the connection stays up (over this message or another one) is classified as usual, so
    /// a message that makes the broker close the channel is charged and, in the end, quarantined.
    pub(super) async fn lost_or_classified(&self, error: &lapin::Error) -> PublishFailure {
        let gone = match connection_lost(error) {
            Some(gone) => gone,
            None => !self.connected().await,
        };
        let failure = classify(error);
        if gone {
            PublishFailure::new(FailureKind::Unavailable, format!("connection lost: {}", failure.reason))
        } else {
            failure
        }
    }

    /// The topologies to declare, as they stand now.
    pub(super) fn topologies(&self) -> Vec<Topology> {
        self.topologies.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    async fn connected(&self) -> bool {
        self.state.lock().await.connection.as_ref().is_some_and(|c| c.status().connected())
    }
}
