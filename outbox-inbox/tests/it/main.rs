//! The consumer's tests on the real PostgreSQL and RabbitMQ: the inbox (duplicates, per-entity
//! order, parking), the AMQP runner, partitions, retention, sealed payloads and a multi-tenant inbox. One binary, one
//! module per concern.

mod inbox;
mod partitions;
mod plans;
mod retention;
mod runner;
mod sealed;
mod support;
mod tenants;
