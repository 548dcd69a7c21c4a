//! The state a runner's tasks share: its settings, the inbox service, the attempts of failing
//! events and the counts. Every step of the runner takes it as an argument.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use outbox_types::EventId;

use super::handle::Counters;
use super::settings::Settings;
use crate::InboxService;

/// The state a runner's tasks share.
pub(super) struct Shared<S> {
    pub(super) settings: Settings,
    pub(super) service: InboxService<S>,
    /// Transient failures per event id, for the backoff and the attempt limit.
    pub(super) attempts: Mutex<HashMap<EventId, u32>>,
    pub(super) counters: Arc<Counters>,
    /// An armed crash point was reached: the runner is "dead".
    pub(super) crashed: AtomicBool,
    /// A session consumes its queues now.
    pub(super) consuming: Arc<AtomicBool>,
    /// The runner's run ended (or never began).
    pub(super) stopped: Arc<AtomicBool>,
}
