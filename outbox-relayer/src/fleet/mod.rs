//! Many databases, one fleet of relay processes: a database per tenant or per service, each with
//! its own outbox, relayed by whichever process of the fleet the assignment gives it to, each
//! isolated from the others' faults. See `docs/many-databases.md`.
//!
//! - `database.rs`: [`FleetDatabase`], a database by name, and the list of them as a file holds it;
//! - `settings.rs`: the fleet's settings, each database's relay made from them, the list's checks;
//! - `builder.rs`: [`FleetBuilder`], the databases, each one's relay, the fleet's settings;
//! - `members.rs`: who the fleet's processes are (advisory locks in the fleet's database);
//! - `assign.rs`: which process relays which database (rendezvous hashing, bounded loads);
//! - `run.rs`: [`Fleet`], the loop that takes and gives back databases;
//! - `handle.rs`: [`FleetHandle`], a new list, the shutdown.

mod assign;
mod builder;
mod database;
mod handle;
mod members;
mod run;
mod settings;

pub use builder::FleetBuilder;
pub use database::FleetDatabase;
pub use handle::FleetHandle;
pub use run::Fleet;
