//! SIGTERM and SIGINT, caught from the start so that a relay still waiting for its servers stops
//! cleanly too. One listener per process: whoever asks later sees a signal that came before.

use std::sync::Mutex;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Resolves [`Shutdown::requested`] once SIGTERM or SIGINT arrives. Clones share the signal.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown {
    received: watch::Receiver<bool>,
}

/// The process's listener, once installed.
static INSTALLED: Mutex<Option<Shutdown>> = Mutex::new(None);

impl Shutdown {
    /// Installs the handlers now (before any wait), or gives the ones installed before: the
    /// process listens in a task of its own from the first call on.
    ///
    /// # Errors
    /// If the process cannot register a signal handler.
    pub(crate) fn install() -> std::io::Result<Self> {
        let mut installed = INSTALLED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(shutdown) = &*installed {
            return Ok(shutdown.clone());
        }
        let shutdown = Self::listen()?;
        *installed = Some(shutdown.clone());
        Ok(shutdown)
    }

    fn listen() -> std::io::Result<Self> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let (tx, received) = watch::channel(false);
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
                _ = int.recv() => tracing::info!("SIGINT received; shutting down"),
            }
            let _ = tx.send(true);
        });
        Ok(Self { received })
    }

    /// Waits until a signal has arrived (at once if one already has).
    pub(crate) async fn requested(&self) {
        let mut received = self.received.clone();
        // An error means the listening task is gone: it sends before it ends, so a signal came.
        let _ = received.wait_for(|&signalled| signalled).await;
    }

    /// Whether a signal has arrived.
    pub(crate) fn is_requested(&self) -> bool {
        *self.received.borrow()
    }
}
