//! The RabbitMQ publisher: publisher confirms, `mandatory`, reconnection with back-off.
//!
//! One concern per file:
//! - `builder.rs`: [`AmqpPublisherBuilder`], every setting with its default;
//! - `publish.rs`: [`AmqpPublisher`], sending batches on a confirm channel and (re)connecting;
//! - `confirm.rs`: a publisher confirm as the outcome the relay records;
//! - `shared.rs`: the state the publisher's clones and its pending confirms share.

mod builder;
mod confirm;
mod publish;
mod shared;

pub use builder::AmqpPublisherBuilder;
pub use publish::AmqpPublisher;
