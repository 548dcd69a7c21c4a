//! The RabbitMQ publisher: publisher confirms, `mandatory`, reconnection with back-off.
//!
//! One concern per file:
//! - `builder.rs`: [`AmqpPublisherBuilder`], every setting with its default;
//! - `publish.rs`: [`AmqpPublisher`], sending batches on a confirm channel and (re)connecting;
//! - `ledger.rs`: each confirm as the outcome the relay records, with the broker's returns paired
//!   to their messages by message id (AMQP does not say which publish a return answers);
//! - `confirm.rs`: outcomes failed at once, and the message a closed channel blames;
//! - `shared.rs`: the state the publisher's clones and its pending confirms share.

mod builder;
mod confirm;
mod ledger;
mod publish;
mod shared;

pub use builder::AmqpPublisherBuilder;
pub use publish::AmqpPublisher;
