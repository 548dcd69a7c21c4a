use sqlx::PgPool;
use sqlx::migrate::Migrator;

/// The table in which the inbox records its applied migrations. It is not the host
/// application's `_sqlx_migrations`, so the two histories never collide.
pub const MIGRATIONS_TABLE: &str = "_inbox_migrations";

/// The inbox's embedded migrations (`migrations/inbox`), tracked in [`MIGRATIONS_TABLE`].
pub fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// Creates or upgrades the inbox tables in the pool's database. Safe to call from every instance
/// at start-up; the host application's own sqlx migrations are not affected.
///
/// # Errors
/// The migration error if a migration fails or the recorded history does not match.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    migrator().run(pool).await
}
