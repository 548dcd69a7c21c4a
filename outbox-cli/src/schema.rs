//! Whether the database holds the outbox tables this version of `outbox` expects, checked before
//! `status` and `relay` so that an unmigrated database gets a hint instead of endless retries.

use std::collections::HashSet;

use sqlx::PgConnection;

use crate::error::CliError;

/// Tables the relay and `status` use.
const TABLES: [&str; 3] = ["outbox_events", "outbox_entity_sequences", "outbox_relay_listeners"];

/// Succeeds if every outbox table exists and, where the migration history is kept, every
/// migration of this version has been applied.
///
/// # Errors
/// [`CliError::NotMigrated`], [`CliError::MigrationsBehind`], or the database's error.
pub(crate) async fn check_outbox(conn: &mut PgConnection) -> Result<(), CliError> {
    let missing: i64 =
        sqlx::query_scalar("SELECT count(*) FROM unnest($1::text[]) AS t(name) WHERE to_regclass(name) IS NULL")
            .bind(TABLES)
            .fetch_one(&mut *conn)
            .await?;
    if missing > 0 {
        return Err(CliError::NotMigrated);
    }
    let behind = migrations_behind(conn).await?;
    if behind > 0 {
        return Err(CliError::MigrationsBehind(behind));
    }
    Ok(())
}

/// How many of the embedded outbox migrations the history table lacks (0 without a history
/// table: tables created some other way are taken as they are).
async fn migrations_behind(conn: &mut PgConnection) -> Result<usize, CliError> {
    let table = outbox_producer::MIGRATIONS_TABLE;
    let exists: bool =
        sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL").bind(table).fetch_one(&mut *conn).await?;
    if !exists {
        return Ok(0);
    }
    let sql = format!("SELECT version FROM \"{table}\" WHERE success");
    let applied: HashSet<i64> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_all(&mut *conn).await?.into_iter().collect();
    let migrator = outbox_producer::migrator();
    Ok(migrator.iter().filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version)).count())
}

/// Succeeds if the inbox tables exist.
///
/// # Errors
/// [`CliError::InboxNotMigrated`], or the database's error.
pub(crate) async fn check_inbox(conn: &mut PgConnection) -> Result<(), CliError> {
    let missing: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM unnest(ARRAY['inbox_events', 'inbox_entities']) AS t(name) WHERE to_regclass(name) IS NULL",
    )
    .fetch_one(&mut *conn)
    .await?;
    if missing > 0 { Err(CliError::InboxNotMigrated) } else { Ok(()) }
}

/// A pool over a database that answers within `timeout` and holds the outbox tables.
pub(crate) async fn outbox_pool(
    options: sqlx::postgres::PgConnectOptions,
    timeout: std::time::Duration,
) -> Result<sqlx::PgPool, CliError> {
    checked_pool(options, timeout, Side::Outbox).await
}

/// A pool over a database that answers within `timeout` and holds the inbox tables.
pub(crate) async fn inbox_pool(
    options: sqlx::postgres::PgConnectOptions,
    timeout: std::time::Duration,
) -> Result<sqlx::PgPool, CliError> {
    checked_pool(options, timeout, Side::Inbox).await
}

/// Which tables a command needs.
enum Side {
    Outbox,
    Inbox,
}

async fn checked_pool(
    options: sqlx::postgres::PgConnectOptions,
    timeout: std::time::Duration,
    side: Side,
) -> Result<sqlx::PgPool, CliError> {
    let mut conn = crate::connect::within(&options, timeout).await?;
    match side {
        Side::Outbox => check_outbox(&mut conn).await?,
        Side::Inbox => check_inbox(&mut conn).await?,
    }
    drop(conn);
    Ok(crate::connect::pool(options, timeout))
}
