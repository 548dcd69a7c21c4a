//! One batch of a replay job: its rows decoded into messages (with the job's header and target),
//! or passed over with the reason; published together on one confirm channel, which keeps their
//! order ([`Batch::publish`]); and, once its confirms are in, how far in the job's order
//! everything was confirmed ([`Published::settle`]).

use std::sync::Arc;

use futures::future::join_all;
use outbox_ops::replay::{Cursor, ReplayRouting, ReplayTarget};
use outbox_types::{
    ConfirmFuture, Event, HeaderValue, OutgoingMessage, PublishFailure, PublishOutcome, Publisher, wire,
};
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use super::settings::Settings;
use crate::routing::{ByEventType, Partitioned, RoutingStrategy};
use crate::{Error, Result, store};

/// What became of one row of a batch.
enum Item {
    /// To be sent: its message's index in the publish.
    Send(usize),
    /// Passed over: its payload was scrubbed.
    Scrubbed,
    /// Passed over: its payload cannot be opened (a key not held) or it does not decode.
    Unopenable,
}

/// What a batch did, in the job's order: up to where everything is done, and the first failure.
#[derive(Debug, Default)]
pub(super) struct Sent {
    /// The cursor after the last row done (none: not even the first).
    pub(super) cursor: Option<Cursor>,
    pub(super) sent: u64,
    pub(super) scrubbed: u64,
    pub(super) unopenable: u64,
    /// Why the batch stopped short.
    pub(super) failure: Option<PublishFailure>,
}

/// How the job's target routes an event.
pub(super) fn router(target: &ReplayTarget, settings: &Settings) -> Result<Arc<dyn RoutingStrategy>> {
    Ok(match &target.routing {
        ReplayRouting::EventType => Arc::new(ByEventType),
        ReplayRouting::Partitions { count, prefix } => Arc::new(Partitioned::new(*count).prefix(prefix.clone())),
        ReplayRouting::Key { key } => Arc::new(FixedKey(key.clone())),
        ReplayRouting::Custom => settings.routing.clone().ok_or(Error::InvalidConfig(
            "the job routes with the application's strategy: give the runner the relay's (ReplayerBuilder::routing)",
        ))?,
        _ => return Err(Error::InvalidConfig("the job's routing is of a newer version than this runner")),
    })
}

/// Every event with one routing key.
struct FixedKey(String);

impl RoutingStrategy for FixedKey {
    fn routing_key(&self, _: &Event) -> String {
        self.0.clone()
    }
}

/// A job's batch: what it holds, ready to publish.
pub(super) struct Batch {
    items: Vec<(Cursor, Item)>,
    messages: Vec<OutgoingMessage>,
}

impl Batch {
    /// The rows as messages to `target` marked with `job`'s header, or passed over.
    pub(super) fn new(
        rows: &[PgRow],
        job: Uuid,
        target: &ReplayTarget,
        routing: &dyn RoutingStrategy,
        s: &Settings,
    ) -> Result<Self> {
        let sealed = if s.end_to_end { store::Sealed::Forward } else { store::Sealed::Open(s.cipher.as_ref()) };
        let mut batch = Self { items: Vec::with_capacity(rows.len()), messages: Vec::with_capacity(rows.len()) };
        for row in rows {
            let item = if row.try_get::<bool, _>("scrubbed")? {
                Item::Scrubbed
            } else {
                match store::replayed(row, sealed) {
                    Ok(event) => {
                        batch.messages.push(message(event, job, target, routing, s));
                        Item::Send(batch.messages.len() - 1)
                    }
                    Err(Error::CorruptRow { id, what }) => {
                        tracing::warn!(event_id = %id, what, "outbox.replay: an event cannot be replayed");
                        Item::Unopenable
                    }
                    Err(e) => return Err(e),
                }
            };
            batch.items.push((cursor_of(row)?, item));
        }
        Ok(batch)
    }

    /// Publishes the messages (the confirms are awaited by [`Published::settle`]).
    pub(super) async fn publish<P: Publisher>(self, publisher: &P) -> Published {
        let sent_at = tokio::time::Instant::now();
        let confirms = if self.messages.is_empty() { Vec::new() } else { publisher.publish(self.messages).await };
        Published { items: self.items, confirms, sent_at }
    }

    /// The cursor after the batch's last row.
    pub(super) fn last(&self) -> Option<&Cursor> {
        self.items.last().map(|(cursor, _)| cursor)
    }
}

/// A batch handed to the broker, its confirms outstanding.
pub(super) struct Published {
    items: Vec<(Cursor, Item)>,
    confirms: Vec<ConfirmFuture>,
    sent_at: tokio::time::Instant,
}

impl Published {
    /// Awaits the confirms (until `timeout` after the publish); what was done, in the job's order,
    /// up to the first message not confirmed.
    pub(super) async fn settle(self, timeout: std::time::Duration) -> Sent {
        // No confirm in time: every message counts as unconfirmed, and the batch goes again.
        let outcomes =
            tokio::time::timeout_at(self.sent_at + timeout, join_all(self.confirms)).await.unwrap_or_default();
        let mut sent = Sent::default();
        for (cursor, item) in self.items {
            match item {
                Item::Scrubbed => sent.scrubbed += 1,
                Item::Unopenable => sent.unopenable += 1,
                Item::Send(i) => match outcomes.get(i) {
                    Some(PublishOutcome::Confirmed) => sent.sent += 1,
                    Some(PublishOutcome::Failed(failure)) => {
                        sent.failure = Some(failure.clone());
                        return sent;
                    }
                    None => {
                        let reason = format!("no confirm within {} s", timeout.as_secs_f64());
                        sent.failure = Some(PublishFailure::new(outbox_types::FailureKind::Transient, reason));
                        return sent;
                    }
                },
            }
            sent.cursor = Some(cursor);
        }
        sent
    }
}

/// The event's message as the relay would send it, to the job's target, with the replay header.
fn message(
    mut event: Event,
    job: Uuid,
    target: &ReplayTarget,
    routing: &dyn RoutingStrategy,
    s: &Settings,
) -> OutgoingMessage {
    event.headers.insert(wire::HEADER_REPLAY.to_owned(), HeaderValue::String(job.to_string()));
    OutgoingMessage {
        event_id: event.id,
        exchange: target.exchange.clone(),
        routing_key: routing.routing_key(&event),
        message: wire::encode(&event, s.app_id.as_deref()),
    }
}

/// The job's cursor once `row` is done.
fn cursor_of(row: &PgRow) -> Result<Cursor> {
    let key: Option<String> = row.try_get("entity_key")?;
    let seq: Option<i64> = row.try_get("seq")?;
    Ok(match (key, seq) {
        (Some(key), Some(seq)) => Cursor::Entity { key, seq },
        _ => Cursor::Unordered(row.try_get("id")?),
    })
}
