//! The relay's tests on the real PostgreSQL and RabbitMQ: publishing in entity order, fencing and
//! takeover, outages of either server (through a proxy, never stopping the shared servers),
//! quarantine, retention and encryption. One binary, one module per concern; sizes from
//! `outbox_system_tests::sizes`.

mod encryption;
mod fencing;
mod fleet_outage;
mod horizon;
mod low_water;
mod outages;
mod presence;
mod quarantine;
mod relay;
mod retention;
mod store;
mod support;
mod takeover;
