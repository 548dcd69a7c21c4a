//! What a statement read: the rows of a table the current transaction has fetched, for tests that
//! prove a plan reads only the rows it should.

use sqlx::PgConnection;

use crate::Result;

/// The rows of `table` the connection's current transaction has fetched so far, by sequential
/// scans and by index (`pg_stat_xact_user_tables`). Read it before and after a statement, in the
/// same transaction: the difference is what the statement read.
pub async fn rows_fetched(conn: &mut PgConnection, table: &str) -> Result<i64> {
    let sql = "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint \
               FROM pg_stat_xact_user_tables WHERE relname = $1";
    Ok(sqlx::query_scalar(sql).bind(table).fetch_one(conn).await?)
}
