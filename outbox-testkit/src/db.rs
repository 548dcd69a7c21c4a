use std::str::FromStr;
use std::sync::Once;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use crate::Result;

/// Prefix of every database a [`TestDb`] creates.
const PREFIX: &str = "outbox_t_";
/// Databases left behind by killed test processes are dropped once they are this old.
const STALE_AFTER_SECS: u64 = 3 * 3600;

/// The admin connection URL: `OUTBOX_TEST_DATABASE_URL`, `DATABASE_URL`, or the local server.
pub(crate) fn admin_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A database of its own for one test, dropped afterwards.
///
/// [`TestDb::new`] creates `outbox_t_<time>_<random>` on the server, applies the outbox and inbox
/// migrations, and opens a small pool. [`TestDb::close`] drops it; if the test panics or forgets,
/// `Drop` does it on a helper thread (`DROP DATABASE ... WITH (FORCE)`). Databases left by killed
/// test processes are removed by the next run once they are three hours old.
#[derive(Debug)]
pub struct TestDb {
    name: String,
    admin: PgConnectOptions,
    options: PgConnectOptions,
    pool: PgPool,
    dropped: bool,
}

impl TestDb {
    /// A fresh database with the outbox and inbox migrations applied.
    ///
    /// # Errors
    /// If the server cannot be reached or a migration fails.
    pub async fn new() -> Result<Self> {
        let db = Self::empty().await?;
        outbox_producer::migrate(&db.pool).await?;
        outbox_inbox::migrate(&db.pool).await?;
        Ok(db)
    }

    /// A fresh database with no tables at all.
    ///
    /// # Errors
    /// If the server cannot be reached.
    pub async fn empty() -> Result<Self> {
        let admin = PgConnectOptions::from_str(&admin_url())?;
        let mut conn = PgConnection::connect_with(&admin).await?;
        static SWEEP: Once = Once::new();
        let mut sweep = false;
        SWEEP.call_once(|| sweep = true);
        if sweep {
            drop_stale(&mut conn).await;
        }
        let name = format!("{PREFIX}{}_{}", now_secs(), crate::unique_suffix());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut conn).await?;
        conn.close().await?;
        let options = admin.clone().database(&name);
        let pool = PgPoolOptions::new().max_connections(10).connect_with(options.clone()).await?;
        Ok(Self { name, admin, options, pool, dropped: false })
    }

    /// The pool of the test database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The name of the test database.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connection options of the test database, for pools or connections of your own.
    pub fn connect_options(&self) -> &PgConnectOptions {
        &self.options
    }

    /// A connection URL of the test database, for child processes.
    pub fn url(&self) -> String {
        self.options.to_url_lossy().to_string()
    }

    /// Closes the pool and drops the database.
    ///
    /// # Errors
    /// If the server cannot be reached.
    pub async fn close(mut self) -> Result<()> {
        self.pool.close().await;
        drop_database(&self.admin, &self.name).await?;
        self.dropped = true;
        Ok(())
    }
}

async fn drop_database(admin: &PgConnectOptions, name: &str) -> Result<()> {
    let mut conn = PgConnection::connect_with(admin).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

/// Drops test databases whose creation time (in their name) is older than [`STALE_AFTER_SECS`].
async fn drop_stale(conn: &mut PgConnection) {
    let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'outbox\\_t\\_%'")
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_default();
    let cutoff = now_secs().saturating_sub(STALE_AFTER_SECS);
    for name in names {
        let created =
            name.strip_prefix(PREFIX).and_then(|rest| rest.split('_').next()).and_then(|t| t.parse::<u64>().ok());
        if created.is_some_and(|t| t < cutoff) {
            let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
            if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *conn).await {
                tracing::warn!(database = %name, error = %e, "could not drop a stale test database");
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let admin = self.admin.clone();
        let name = std::mem::take(&mut self.name);
        // Drop runs inside the test's runtime, which cannot be blocked on: use a thread of its own.
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
            if let Ok(rt) = rt
                && let Err(e) = rt.block_on(drop_database(&admin, &name))
            {
                tracing::warn!(database = %name, error = %e, "could not drop the test database");
            }
        });
        let _ = handle.join();
    }
}
