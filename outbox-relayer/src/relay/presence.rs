//! The relay's presence for the commit trigger. A commit that inserts outbox rows notifies only
//! while a relay waits for a notification (a notifying commit takes a server-wide lock). While this
//! relay waits, a session of its own holds an advisory lock that the trigger tries, and keeps the
//! wait hint (a sequence's value) ahead of the clock, so that commits try the locks only while some
//! relay may wait. When a claim finds work, the session releases the lock. Nothing is written per
//! wait or per pause: while another session holds an old snapshot, vacuum could remove no row
//! version written for them, and the trigger would read every one on each insert. The relay's row
//! in `outbox_relay_listeners` is written once, when it first waits, and deleted when it stops; a
//! relay whose session ends (crashed, cut off) holds no lock, so commits stop notifying it at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::Mutex;

use crate::Result;
use crate::store;

/// What an attempt to wait for a notification came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiting {
    /// The relay waits from now on: commits notify. Commits that ended just before may not have,
    /// so the table needs one more look.
    Began,
    /// The relay was waiting already, and its session still stands.
    Still,
    /// A commit is at its end right now: it does not notify, so the relay looks at the table again.
    NotNow,
    /// Another session holds this relay's presence (a name taken twice): commits do not notify
    /// this relay, which polls.
    Absent,
}

/// The presence session.
struct Session {
    conn: PgConnection,
    /// Whether the session holds the relay's row and alive lock.
    present: bool,
}

/// The presence session and what it holds.
pub(super) struct Presence {
    /// The relay's name in `outbox_relay_listeners`: its id and a random part, so that relays
    /// configured with one id do not share a presence.
    name: String,
    connect: PgConnectOptions,
    /// The session, opened when the relay first waits; `None` after it failed.
    session: Mutex<Option<Session>>,
    /// Whether the session holds the waiting lock.
    waiting: AtomicBool,
    /// The last attempt failed (said once at WARN, then at DEBUG until one succeeds).
    failing: AtomicBool,
}

impl Presence {
    /// The presence of the relay `relay_id`, whose session is opened with `connect` when first
    /// needed.
    pub(super) fn new(relay_id: &str, connect: PgConnectOptions) -> Self {
        let random = uuid::Uuid::new_v4().simple().to_string();
        let name = format!("{relay_id}#{}", &random[..8]);
        Self {
            name,
            connect,
            session: Mutex::new(None),
            waiting: AtomicBool::new(false),
            failing: AtomicBool::new(false),
        }
    }

    /// Waits for notifications for at most `ahead` before the next call: moves the wait hint ahead
    /// and takes the waiting lock (opening the session and making the relay present first if
    /// needed), or, waiting already, moves the hint on (which shows that the session still
    /// stands). On an error
    /// (logged, at WARN the first time) the session is dropped, and with it whatever it held.
    pub(super) async fn wait(&self, ahead: Duration) -> Result<Waiting> {
        let mut session = self.session.lock().await;
        let outcome = self.wait_on(&mut session, ahead).await;
        match &outcome {
            Ok(_) => self.failing.store(false, Ordering::SeqCst),
            Err(e) => {
                *session = None;
                self.waiting.store(false, Ordering::SeqCst);
                if self.failing.swap(true, Ordering::SeqCst) {
                    tracing::debug!(error = %e, "still cannot wait for notifications; polling");
                } else {
                    tracing::warn!(error = %e, "cannot wait for notifications; polling until it can");
                }
            }
        }
        outcome
    }

    async fn wait_on(&self, session: &mut Option<Session>, ahead: Duration) -> Result<Waiting> {
        let session = match session {
            Some(session) => session,
            None => {
                let conn = PgConnection::connect_with(&self.connect).await?;
                session.insert(Session { conn, present: false })
            }
        };
        if self.waiting.load(Ordering::SeqCst) {
            store::still(&mut session.conn, ahead).await?;
            return Ok(Waiting::Still);
        }
        if !session.present {
            session.present = store::present(&mut session.conn, &self.name).await?;
            if !session.present {
                tracing::debug!(name = %self.name, "another session holds this relay's presence; polling");
                return Ok(Waiting::Absent);
            }
        }
        if store::wait(&mut session.conn, &self.name, ahead).await? {
            self.waiting.store(true, Ordering::SeqCst);
            Ok(Waiting::Began)
        } else {
            Ok(Waiting::NotNow)
        }
    }

    /// Stops waiting: commits no longer notify. A failure drops the session (its locks go with it).
    pub(super) async fn busy(&self) {
        if !self.waiting.swap(false, Ordering::SeqCst) {
            return;
        }
        let mut session = self.session.lock().await;
        if let Some(s) = session.as_mut()
            && let Err(e) = store::busy(&mut s.conn, &self.name).await
        {
            tracing::debug!(error = %e, "could not release the waiting lock; closing its session");
            *session = None;
        }
    }

    /// The relay stops: its row is deleted and the session closed.
    pub(super) async fn leave(&self) {
        self.waiting.store(false, Ordering::SeqCst);
        let Some(mut session) = self.session.lock().await.take() else {
            return;
        };
        if session.present
            && let Err(e) = store::leave(&mut session.conn, &self.name).await
        {
            tracing::warn!(
                error = %e,
                "could not delete the relay's row in outbox_relay_listeners; the next relay that waits deletes it"
            );
        }
        let _ = session.conn.close().await;
    }
}
