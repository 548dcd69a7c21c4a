//! Pure types of the transactional outbox: no I/O, no database, no broker.
//!
//! `outbox-types` is shared by the producer side (`outbox-producer`), the consumer side
//! (`outbox-inbox`) and the testkit. It holds:
//!
//! - [`EventId`] (UUID v7) and the [`NewEvent`] builder a producer fills in, validated by
//!   [`NewEvent::validate`] before any SQL runs;
//! - [`Event`], an event as stored in the outbox and as decoded from the wire;
//! - the [`Status`] lifecycle of an outbox row and the [`FailureKind`] classification;
//! - the [`RetryPolicy`] that turns a failure into "retry at T" or "quarantine";
//! - the wire contract v1 ([`wire`]) between an [`Event`] and AMQP properties and headers.
//!
//! ```
//! use outbox_types::{Limits, NewEvent};
//!
//! #[derive(serde::Serialize)]
//! struct OrderPlaced { order_id: u64, total_cents: u64 }
//!
//! let event = NewEvent::json("order.placed", &OrderPlaced { order_id: 42, total_cents: 1999 })?
//!     .entity("order-42")
//!     .correlation_id("req-7f3a");
//! event.validate(&Limits::default())?;
//! assert_eq!(event.event_type(), "order.placed");
//! # Ok::<(), outbox_types::EventError>(())
//! ```

mod backoff;
mod cipher;
#[cfg(feature = "sqlx")]
pub mod db_error;
mod error;
mod event;
mod failure;
mod header;
mod header_names;
mod id;
mod new_event;
mod publish;
mod redact;
mod retry;
mod status;
mod validate;
pub mod wire;

pub use backoff::Backoff;
pub use cipher::{CipherError, KEY_BYTES, KeyProvider, Keyring, PayloadCipher, SEAL_OVERHEAD};
pub use error::{EventError, Result};
pub use event::{CONTENT_TYPE_JSON, Entity, Event, Payload};
pub use failure::FailureKind;
pub use header::{HeaderValue, Headers, RESERVED_HEADERS};
pub use id::EventId;
pub use new_event::{Limits, NewEvent};
pub use publish::{
    ConfirmFuture, ExchangeKind, OutgoingMessage, PublishFailure, PublishOutcome, Publisher, partition_for,
};
pub use redact::REDACTING_LOG_TARGETS;
pub use retry::{QuarantineReason, RetryDecision, RetryPolicy};
pub use status::{ParseStatusError, Status};
