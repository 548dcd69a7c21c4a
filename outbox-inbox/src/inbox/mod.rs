//! The inbox: a tower middleware that applies each event's effect once and in per-entity order.
//!
//! One concern per file:
//! - `layer.rs`: [`InboxLayer`], the inbox's settings, wrapping a handler;
//! - `service.rs`: [`InboxService`], one event or a batch applied once and in order;
//! - `request.rs`: [`InboxRequest`], what the handler receives;
//! - `outcome.rs`: [`Outcome`], what the inbox did with an event;
//! - `start_policy.rs`: [`StartPolicy`], where an entity's numbering starts;
//! - `hold_back.rs`: an event that is not its entity's next, recorded as stale or parked;
//! - `parked.rs`: parked events applied in order once their gap fills;
//! - `repair.rs`: an operator's repairs of failed and parked events;
//! - `store.rs`: the inbox's SQL;
//! - `tenants.rs`: [`Tenants`], a multi-tenant inbox's databases and how an event names its tenant.

mod hold_back;
mod layer;
mod outcome;
mod parked;
mod repair;
mod request;
mod service;
mod start_policy;
pub(crate) mod store;
mod tenants;

pub use layer::InboxLayer;
pub use outcome::Outcome;
pub use request::InboxRequest;
pub use service::InboxService;
pub use start_policy::StartPolicy;
pub use tenants::Tenants;
