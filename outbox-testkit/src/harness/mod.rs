//! One call that gives a test everything: an isolated database, exchange and queues, a relay and a
//! consumer wired to them, a recorder at the broker, fault injection, and teardown.
//!
//! One concern per file:
//! - `environment.rs`: [`Harness`], its accessors and its teardown;
//! - `builder.rs`: [`HarnessBuilder`] and the start;
//! - `relay_config.rs`: what the harness's relays are made of, [`HarnessPublisher`] and the test's
//!   adjustments;
//! - `relay.rs`: the relay's life cycle;
//! - `consumer_factory.rs`: how the consumer is made from the test's handler;
//! - `consumer.rs`: the consumer's life cycle;
//! - `wait.rs`: the waits on the outbox and the recorder;
//! - `guard.rs`: the guard that aborts the relay's and the consumer's tasks;
//! - `url.rs`: the broker's address behind a proxy.

mod builder;
mod consumer;
mod consumer_factory;
mod environment;
mod guard;
mod relay;
mod relay_config;
mod url;
mod wait;

pub use builder::HarnessBuilder;
pub use environment::Harness;
pub use relay_config::HarnessPublisher;
