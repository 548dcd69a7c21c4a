//! The benchmark's databases: `outbox_bench_fleet_<suffix>_<n>`, cloned from a migrated template,
//! listed in a file as `outbox relay --databases-file` reads it, filled, and dropped at the end
//! (by `Drop` too, should the benchmark fail).

use std::path::PathBuf;

use outbox_producer::Outbox;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::error::BoxError;
use crate::producer::event;

/// `application_name` of the fleet process's connections (set in the list), to find its backends.
pub(super) const APPLICATION_NAME: &str = "outbox-bench-fleet";

/// The benchmark's databases.
pub(super) struct Databases {
    admin: PgConnectOptions,
    prefix: String,
    count: usize,
    dir: PathBuf,
}

impl Databases {
    /// Creates `count` databases with the outbox migrations applied.
    pub(super) async fn create(count: usize) -> Result<Self, BoxError> {
        let admin: PgConnectOptions = server_url().parse()?;
        let prefix = format!("outbox_bench_fleet_{}", outbox_testkit::unique_suffix());
        let dir = std::env::temp_dir().join(&prefix);
        std::fs::create_dir_all(&dir)?;
        let databases = Self { admin, prefix, count, dir };
        let mut conn = PgConnection::connect_with(&databases.admin).await?;
        let template = format!("{}_template", databases.prefix);
        execute(&mut conn, &format!("CREATE DATABASE \"{template}\"")).await?;
        let pool = sqlx::PgPool::connect_with(databases.admin.clone().database(&template)).await?;
        outbox_producer::migrate(&pool).await?;
        pool.close().await;
        for i in 0..count {
            execute(&mut conn, &format!("CREATE DATABASE \"{}_{i}\" TEMPLATE \"{template}\"", databases.prefix))
                .await?;
        }
        execute(&mut conn, &format!("CREATE DATABASE \"{}_bare\"", databases.prefix)).await?;
        conn.close().await?;
        Ok(databases)
    }

    /// Where database `i` is.
    pub(super) fn options(&self, i: usize) -> PgConnectOptions {
        self.admin.clone().database(&format!("{}_{i}", self.prefix))
    }

    /// A list file of the first `n` databases; its path.
    pub(super) fn list(&self, n: usize) -> Result<PathBuf, BoxError> {
        let text: String = (0..n).map(|i| format!("tenant-{i} {}\n", listed(&self.options(i)))).collect();
        let path = self.dir.join(format!("databases-{n}"));
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// A list file of the first `n` databases and two faulty ones: `down`, the first database
    /// through `stalled` (a proxy that passes no bytes), and `unmigrated`, a database without the
    /// outbox's tables; its path.
    pub(super) fn list_with_faults(&self, n: usize, stalled: std::net::SocketAddr) -> Result<PathBuf, BoxError> {
        let path = self.list(n)?;
        let down = self.options(0).host(&stalled.ip().to_string()).port(stalled.port());
        let bare = self.admin.clone().database(&format!("{}_bare", self.prefix));
        let faults = format!("down {}\nunmigrated {}\n", listed(&down), listed(&bare));
        let text = std::fs::read_to_string(&path)? + &faults;
        let path = self.dir.join(format!("databases-{n}-with-faults"));
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Connections to the benchmark's databases now, on the whole server.
    pub(super) async fn connections(&self, conn: &mut PgConnection) -> Result<i64, BoxError> {
        let like = format!("{}\\_%", self.prefix);
        Ok(sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname LIKE $1")
            .bind(like)
            .fetch_one(conn)
            .await?)
    }

    /// The server's address, for a proxy in front of it.
    pub(super) fn server_addr(&self) -> Result<std::net::SocketAddr, BoxError> {
        use std::net::ToSocketAddrs;
        let mut addrs = (self.admin.get_host(), self.admin.get_port()).to_socket_addrs()?;
        Ok(addrs.next().ok_or("the database server's host has no address")?)
    }

    /// A pool of one admin connection.
    pub(super) async fn admin_pool(&self) -> Result<sqlx::PgPool, BoxError> {
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1);
        Ok(pool.connect_with(self.admin.clone()).await?)
    }

    /// An admin connection (to the server's own database).
    pub(super) async fn admin(&self) -> Result<PgConnection, BoxError> {
        Ok(PgConnection::connect_with(&self.admin).await?)
    }

    /// Commits `total` events spread evenly over the first `n` databases, `entities` entities in
    /// all (each database its own), 500 per transaction, one database at a time.
    pub(super) async fn fill(&self, n: usize, total: u64, entities: u64) -> Result<(), BoxError> {
        let outbox = Outbox::new();
        let per_db = total / n as u64;
        let entities_per_db = (entities / n as u64).max(1);
        for i in 0..n {
            let mut conn = PgConnection::connect_with(&self.options(i)).await?;
            execute(&mut conn, "TRUNCATE outbox_events").await?;
            for first in (0..per_db).step_by(500) {
                let events = (first..(first + 500).min(per_db)).map(|k| {
                    let order = (k % entities_per_db) as i64;
                    Ok::<_, BoxError>(event(order)?.entity(format!("t{i}-order-{order}")))
                });
                let events = events.collect::<Result<Vec<_>, _>>()?;
                let mut tx = conn.begin().await?;
                outbox.enqueue_many(&mut tx, events).await?;
                tx.commit().await?;
            }
            execute(&mut conn, "VACUUM ANALYZE outbox_events").await?;
            conn.close().await?;
        }
        Ok(())
    }

    async fn drop_all(admin: PgConnectOptions, prefix: String, count: usize) -> Result<(), BoxError> {
        let mut conn = PgConnection::connect_with(&admin).await?;
        for i in (0..count).map(|i| i.to_string()).chain(["template".to_owned(), "bare".to_owned()]) {
            execute(&mut conn, &format!("DROP DATABASE IF EXISTS \"{prefix}_{i}\" WITH (FORCE)")).await?;
        }
        Ok(())
    }
}

impl Drop for Databases {
    fn drop(&mut self) {
        let (admin, prefix, count) = (self.admin.clone(), std::mem::take(&mut self.prefix), self.count);
        let _ = std::fs::remove_dir_all(&self.dir);
        // The runtime cannot be blocked on: a thread of its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(Self::drop_all(admin, prefix, count)).map_err(|e| e.to_string())
        });
        if let Ok(Err(e)) = dropped.join() {
            eprintln!("outbox-bench: the fleet's databases were not all dropped: {e}");
        }
    }
}

/// The URL of `options` as the list holds it, naming the fleet process's connections
/// [`APPLICATION_NAME`] (a URL built from options leaves the name out).
fn listed(options: &PgConnectOptions) -> String {
    format!("{}&application_name={APPLICATION_NAME}", options.to_url_lossy())
}

async fn execute(conn: &mut PgConnection, sql: &str) -> Result<(), BoxError> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(conn).await?;
    Ok(())
}

/// The database server: `OUTBOX_TEST_DATABASE_URL`, `DATABASE_URL`, or the local one.
fn server_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}
