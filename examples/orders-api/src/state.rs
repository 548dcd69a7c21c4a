//! What every request handler shares: the database, the outbox, the relay's health.

use std::sync::Arc;

use outbox_producer::Outbox;
use outbox_relayer::RelayProbe;
use sqlx::PgPool;

/// What every request handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) pool: PgPool,
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) relay: RelayProbe,
}
