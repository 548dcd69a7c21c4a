//! A TCP proxy on loopback in front of a server, controlled from the test: cut every open
//! connection, refuse new ones, stall, add latency, heal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Pass bytes through (optionally late).
    Pass,
    /// Accept connections but pass no bytes.
    Stall,
    /// Close new connections at once.
    Refuse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    mode: Mode,
    latency: Duration,
    /// Bumped by [`ChaosProxy::cut`]: every connection opened before the bump is closed.
    generation: u64,
}

/// A chaos proxy. Point the component under test at [`ChaosProxy::addr`] instead of the server.
///
/// ```no_run
/// # async fn demo() -> Result<(), outbox_testkit::Error> {
/// use outbox_testkit::ChaosProxy;
/// let proxy = ChaosProxy::start("127.0.0.1:5672".parse().expect("addr")).await?;
/// let url = format!("amqp://guest:guest@{}/%2f", proxy.addr());
/// // ... start a relay on `url` ...
/// proxy.cut(); // every open connection drops
/// proxy.refuse(); // and new ones are refused
/// proxy.heal(); // traffic flows again
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ChaosProxy {
    addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl ChaosProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    ///
    /// # Errors
    /// [`crate::Error::Io`] if no port can be bound.
    pub async fn start(upstream: SocketAddr) -> crate::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, _) = watch::channel(State { mode: Mode::Pass, latency: Duration::ZERO, generation: 0 });
        let state = Arc::new(tx);
        let shared = state.clone();
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let rx = shared.subscribe();
                tokio::spawn(serve(client, upstream, rx));
            }
        });
        Ok(Self { addr, state, accepted, task })
    }

    /// The address to connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections the proxy has accepted so far, refused ones included: a client's
    /// attempts to (re)connect.
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Closes every connection open now (new ones are accepted as the mode says).
    pub fn cut(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }

    /// Closes new connections at once (open ones keep flowing).
    pub fn refuse(&self) {
        self.state.send_modify(|s| s.mode = Mode::Refuse);
    }

    /// Accepts connections but passes no bytes, on open and new connections alike.
    pub fn stall(&self) {
        self.state.send_modify(|s| s.mode = Mode::Stall);
    }

    /// Delays every chunk of bytes by `latency`.
    pub fn latency(&self, latency: Duration) {
        self.state.send_modify(|s| s.latency = latency);
    }

    /// Back to passing every byte at once.
    pub fn heal(&self) {
        self.state.send_modify(|s| {
            s.mode = Mode::Pass;
            s.latency = Duration::ZERO;
        });
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

async fn serve(client: TcpStream, upstream: SocketAddr, mut state: watch::Receiver<State>) {
    let born = *state.borrow();
    if born.mode == Mode::Refuse {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pipe(cr, sw, state.clone(), born.generation);
    let down = pipe(sr, cw, state.clone(), born.generation);
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = state.wait_for(|s| s.generation != born.generation) => {}
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    generation: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        loop {
            let s = *state.borrow();
            if s.generation != generation {
                return;
            }
            if s.mode != Mode::Stall {
                if !s.latency.is_zero() {
                    tokio::time::sleep(s.latency).await;
                }
                break;
            }
            if state.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
