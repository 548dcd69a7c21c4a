use sqlx::PgPool;
use sqlx::migrate::Migrator;

/// The table in which the outbox records its applied migrations. It is not the host
/// application's `_sqlx_migrations`, so the two histories never collide.
pub const MIGRATIONS_TABLE: &str = "_outbox_migrations";

/// The outbox's embedded migrations (`migrations/outbox`), tracked in [`MIGRATIONS_TABLE`].
pub fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// Creates or upgrades the outbox tables in the pool's database. Safe to call from every instance
/// at start-up: sqlx serialises concurrent runs with an advisory lock, and applied migrations are
/// skipped. The host application's own sqlx migrations are not affected.
///
/// # Errors
/// [`Error::Migrate`](crate::Error::Migrate) if a migration fails or the recorded history does
/// not match the embedded one.
pub async fn migrate(pool: &PgPool) -> crate::Result<()> {
    migrator().run(pool).await?;
    Ok(())
}
