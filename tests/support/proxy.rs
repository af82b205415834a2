//! A TCP proxy on loopback that a test puts between its nodes and a store, to make
//! the store unreachable or slow on demand: it passes bytes, refuses new
//! connections, stalls (holds every byte, the connections open), cuts the
//! connections it carries, delays the store's replies, and closes connections
//! left idle (as a NAT or a load balancer with an idle timeout does).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Bytes flow both ways.
    Pass,
    /// New connections are closed at once; open ones hold their bytes.
    Refuse,
    /// Connections are accepted, but no byte goes through until the mode changes.
    Stall,
}

/// The proxy's state: its mode, and how many times it cut its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    mode: Mode,
    cuts: u64,
    /// How long each reply from the store is held before it is passed on.
    delay: std::time::Duration,
    /// Connections with no byte either way for this long are closed.
    idle: Option<std::time::Duration>,
}

/// A proxy from 127.0.0.1, port 0, to `target`; it stops when dropped (the
/// connections it carries end with it).
#[derive(Debug)]
pub(crate) struct Proxy {
    /// Where the proxy listens.
    pub(crate) addr: SocketAddr,
    state: watch::Sender<State>,
    accept: JoinHandle<()>,
    /// How many connections the proxy closed for being idle.
    idle_closed: watch::Receiver<u64>,
}

impl Proxy {
    /// Starts a proxy to `target`, passing traffic.
    pub(crate) async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("the bound address");
        let (state, watching) = watch::channel(State {
            mode: Mode::Pass,
            cuts: 0,
            delay: std::time::Duration::ZERO,
            idle: None,
        });
        let (closed, idle_closed) = watch::channel(0u64);
        let closed = std::sync::Arc::new(closed);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let now = *watching.borrow();
                if now.mode == Mode::Refuse {
                    drop(client);
                    continue;
                }
                tokio::spawn(carry(
                    client,
                    target,
                    watching.clone(),
                    now.cuts,
                    closed.clone(),
                ));
            }
        });
        Proxy {
            addr,
            state,
            accept,
            idle_closed,
        }
    }

    /// Closes, from now on, every connection idle for `idle` (no byte either way).
    pub(crate) fn close_idle_after(&self, idle: std::time::Duration) {
        self.state.send_modify(|state| state.idle = Some(idle));
    }

    /// Waits until the proxy has closed `count` idle connections in all.
    pub(crate) async fn idle_closed(&self, count: u64) {
        let mut closed = self.idle_closed.clone();
        let _ = closed.wait_for(|closed| *closed >= count).await;
    }

    /// Switches what the proxy does with traffic.
    pub(crate) fn set(&self, mode: Mode) {
        self.state.send_modify(|state| state.mode = mode);
    }

    /// Holds each reply from the store `delay` before passing it on (zero: none).
    pub(crate) fn set_delay(&self, delay: std::time::Duration) {
        self.state.send_modify(|state| state.delay = delay);
    }

    /// Closes every connection the proxy carries now.
    pub(crate) fn cut(&self) {
        self.state.send_modify(|state| state.cuts += 1);
    }

    /// The store is gone: open connections are cut, new ones refused.
    pub(crate) fn down(&self) {
        self.state.send_modify(|state| {
            state.mode = Mode::Refuse;
            state.cuts += 1;
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Carries one connection until either side closes it, the proxy cuts it, or it
/// stays idle past the proxy's idle limit (counted in `closed`).
async fn carry(
    client: TcpStream,
    target: SocketAddr,
    state: watch::Receiver<State>,
    cuts: u64,
    closed: std::sync::Arc<watch::Sender<u64>>,
) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (active, activity) = watch::channel(());
    tokio::select! {
        () = pump(client_read, server_write, state.clone(), cuts, false, &active) => {}
        () = pump(server_read, client_write, state.clone(), cuts, true, &active) => {}
        () = idle_out(state, activity) => closed.send_modify(|closed| *closed += 1),
    }
}

/// Returns once the connection has carried no byte for the proxy's idle limit.
async fn idle_out(mut state: watch::Receiver<State>, mut activity: watch::Receiver<()>) {
    loop {
        let idle = state.borrow().idle;
        let Some(idle) = idle else {
            if state.changed().await.is_err() {
                return std::future::pending().await;
            }
            continue;
        };
        tokio::select! {
            () = tokio::time::sleep(idle) => return,
            changed = activity.changed() => {
                if changed.is_err() {
                    return std::future::pending().await;
                }
            }
            _ = state.changed() => {}
        }
    }
}

/// Copies bytes one way, holding them while the proxy stalls or refuses (and, for
/// `replies`, for the set delay), until the read side ends or the proxy cuts the
/// connection.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    cuts: u64,
    replies: bool,
    active: &watch::Sender<()>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = state.wait_for(|s| s.cuts != cuts) => return,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let delay = state.borrow().delay;
        if replies && !delay.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = state.wait_for(|s| s.cuts != cuts) => return,
            }
        }
        // Hold the bytes until traffic passes again, or the connection is cut.
        match state
            .wait_for(|s| s.cuts != cuts || s.mode == Mode::Pass)
            .await
        {
            Ok(now) if now.cuts == cuts => {}
            _ => return,
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
        active.send_replace(());
    }
}

/// `url` (`scheme://[user@]host:port/…`) with its host and port replaced by `addr`.
pub(crate) fn via(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let (user, rest) = match rest.split_once('@') {
        Some((user, rest)) => (format!("{user}@"), rest),
        None => (String::new(), rest),
    };
    let path = rest.find('/').map_or("", |at| &rest[at..]);
    format!("{scheme}://{user}{addr}{path}")
}

/// The address `url` names (its host must be an IP address).
pub(crate) fn target(url: &str) -> SocketAddr {
    let rest = url.split_once("://").expect("a URL with a scheme").1;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    let host = rest.split('/').next().expect("a host");
    host.parse().expect("an IP address and port in the URL")
}
