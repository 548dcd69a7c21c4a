//! Who the members of a fleet are: every process holds a session advisory lock in the fleet's
//! database, `(MEMBER_CLASS, its member id)`, on a connection of its own; the members are the
//! holders of such locks, which any role may read in `pg_locks`. A process that dies or loses its
//! connection holds no lock any more, so the others see it gone at their next look. Nothing is
//! written: no row versions pile up while another session holds an old snapshot.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use super::database::FleetDatabase;
use sqlx::{Connection, PgConnection};

/// The advisory lock class of a fleet's members ("oumf").
const MEMBER_CLASS: i32 = 1_869_967_718;

/// The members' lock ids in the fleet's database.
const MEMBERS: &str = "SELECT objid::int8 FROM pg_locks \
    WHERE locktype = 'advisory' AND granted AND classid = $1::int8::oid AND objsubid = 2 \
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

/// This process's membership, and what it last knew of the others.
pub(super) struct Members {
    /// This process's member id (a lock id, positive).
    me: u32,
    /// The session holding this process's lock in the fleet's database, and where that is.
    session: Option<(u64, PgConnection)>,
    /// The members at the last look that succeeded (this process among them).
    known: Vec<u32>,
    /// The last look failed (said once at WARN, then at DEBUG until one succeeds).
    failing: bool,
}

impl Members {
    /// A process that is a member of no fleet yet.
    pub(super) fn new() -> Self {
        let me = new_id();
        Self { me, session: None, known: vec![me], failing: false }
    }

    /// This process's member id.
    pub(super) fn me(&self) -> u32 {
        self.me
    }

    /// The members now, as the fleet's database shows them; while it cannot be reached, those of
    /// the last look that succeeded (at first, this process alone: it then relays every database,
    /// which is safe, only costlier). A fleet database that moved (another name or URL) is joined
    /// anew.
    pub(super) async fn look(&mut self, database: &FleetDatabase, timeout: Duration) -> &[u32] {
        let (name, place) = (database.name(), database.fingerprint());
        if self.session.as_ref().is_some_and(|(p, _)| *p != place) {
            self.leave().await;
        }
        match tokio::time::timeout(timeout, self.try_look(place, database.connect_options())).await {
            Ok(Ok(members)) => {
                if self.failing {
                    tracing::info!(database = name, members = members.len(), "the fleet's members are known again");
                }
                self.failing = false;
                self.known = members;
            }
            Ok(Err(e)) => self.failed(name, &e.to_string()),
            Err(_) => self.failed(name, "no answer in time"),
        }
        &self.known
    }

    async fn try_look(&mut self, place: u64, connect: &PgConnectOptions) -> sqlx::Result<Vec<u32>> {
        if self.session.is_none() {
            let mut conn = PgConnection::connect_with(&session_options(connect)).await?;
            while !sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1, $2)")
                .bind(MEMBER_CLASS)
                .bind(self.me as i32)
                .fetch_one(&mut conn)
                .await?
            {
                // Another process drew the same id: draw again.
                self.me = new_id();
            }
            self.session = Some((place, conn));
        }
        let Some((_, conn)) = self.session.as_mut() else { return Ok(vec![self.me]) };
        let result = sqlx::query_scalar::<_, i64>(MEMBERS).bind(i64::from(MEMBER_CLASS)).fetch_all(&mut *conn).await;
        match result {
            Ok(ids) => {
                let mut members: Vec<u32> = ids.into_iter().filter_map(|id| u32::try_from(id).ok()).collect();
                members.sort_unstable();
                members.dedup();
                Ok(members)
            }
            Err(e) => {
                // The session may be gone, and this process's lock with it: start again next time.
                self.session = None;
                Err(e)
            }
        }
    }

    fn failed(&mut self, name: &str, why: &str) {
        self.session = None;
        if self.failing {
            tracing::debug!(database = name, reason = why, "the fleet's members are still unknown");
        } else {
            tracing::warn!(
                database = name,
                reason = why,
                members = self.known.len(),
                "cannot read the fleet's members; keeping the last ones known"
            );
        }
        self.failing = true;
    }

    /// Leaves the fleet: closes the session, which releases the lock.
    pub(super) async fn leave(&mut self) {
        if let Some((_, conn)) = self.session.take() {
            let _ = conn.close().await;
        }
    }
}

/// The membership session's options: the server probes the connection (TCP keepalives every
/// 5 s after 10 s idle, 3 probes), so that a process whose host died or was cut off stops being a
/// member within about 25 s, not the system's default of two hours; a slow statement is logged at
/// INFO, as the relays' are.
fn session_options(connect: &PgConnectOptions) -> PgConnectOptions {
    use sqlx::ConnectOptions;
    let keepalives = [("tcp_keepalives_idle", "10"), ("tcp_keepalives_interval", "5"), ("tcp_keepalives_count", "3")];
    connect.clone().options(keepalives).log_slow_statements(tracing::log::LevelFilter::Info, Duration::from_secs(1))
}

/// A member id: a random positive lock id.
fn new_id() -> u32 {
    (uuid::Uuid::new_v4().as_u128() & 0x7fff_ffff) as u32
}
