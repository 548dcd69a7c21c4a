//! A fresh database for one phase, dropped when the phase is over.

use outbox_testkit::TestDb;

use crate::error::BoxError;
use crate::wait::{FLOOR, within};

/// Runs `phase` in a fresh database and drops the database afterwards, also when the phase failed
/// (if closing it times out, `TestDb`'s drop removes it).
pub(crate) async fn with_db<T>(phase: impl AsyncFnOnce(&TestDb) -> Result<T, BoxError>) -> Result<T, BoxError> {
    let db = within("a fresh database with the migrations", FLOOR, TestDb::new()).await?;
    let outcome = phase(&db).await;
    let closed = within("the benchmark database to close and be dropped", FLOOR, db.close()).await;
    let value = outcome?;
    closed?;
    Ok(value)
}
