//! A TCP proxy on loopback that a test can cut and restore, to take one client off the network
//! without touching the server or the other clients.
//!
//! [`Proxy::start`] listens on a free `127.0.0.1` port and forwards every connection to an
//! upstream address. [`Proxy::cut`] shuts down every forwarded connection and, until
//! [`Proxy::restore`], holds new connections open without forwarding a byte (a black hole: the
//! client waits for an answer that never comes, instead of spinning on refused connections).
//! [`Proxy::restore`] closes the held connections, so that the client's next attempt is
//! forwarded again.
//!
//! The proxy runs on plain threads (one accepting, two per forwarded connection) and stops, with
//! every connection it holds, when it is dropped.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{TestkitError, io};

/// How long the proxy waits for the upstream to accept a connection.
const UPSTREAM_CONNECT: Duration = Duration::from_secs(10);

/// Whether a [`Proxy`] forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Connections are forwarded to the upstream.
    Open,
    /// Nothing is forwarded; new connections are held without an answer.
    Cut,
}

/// A cuttable TCP proxy on loopback (see the [module](self) documentation).
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    link: Link,
    stopping: bool,
    next_id: u64,
    /// Forwarded connections: both ends, for shutting them down.
    forwarded: HashMap<u64, [TcpStream; 2]>,
    /// Connections accepted while cut.
    held: Vec<TcpStream>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A pump thread never panics while holding the lock; recover from poisoning anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn close_forwarded(&mut self) {
        for [a, b] in self.forwarded.drain().map(|(_, s)| s) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    fn close_held(&mut self) {
        for s in self.held.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Proxy {
    /// Starts a proxy on a free `127.0.0.1` port that forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Self, TestkitError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(io("bind the proxy's port on 127.0.0.1"))?;
        let addr = listener.local_addr().map_err(io("read the proxy's port"))?;
        let shared = Arc::new(Shared {
            upstream,
            state: Mutex::new(State {
                link: Link::Open,
                stopping: false,
                next_id: 0,
                forwarded: HashMap::new(),
                held: Vec::new(),
            }),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("proxy {addr}"))
                .spawn(move || accept_loop(&listener, &shared))
                .map_err(io("start the proxy's thread"))?
        };
        Ok(Proxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Whether the proxy forwards now.
    pub fn link(&self) -> Link {
        self.shared.lock().link
    }

    /// Shuts down every forwarded connection and holds new ones without forwarding until
    /// [`Proxy::restore`]. When this returns, no byte passes the proxy any more.
    pub fn cut(&self) {
        let mut state = self.shared.lock();
        state.link = Link::Cut;
        state.close_forwarded();
    }

    /// Closes the connections held while cut and forwards new connections again.
    pub fn restore(&self) {
        let mut state = self.shared.lock();
        state.link = Link::Open;
        state.close_held();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stopping = true;
            state.close_forwarded();
            state.close_held();
        }
        // Wake the accepting thread, which sees `stopping` and ends.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        let Ok(client) = client else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let mut state = shared.lock();
        if state.stopping {
            return;
        }
        if state.link == Link::Cut {
            state.held.push(client);
            continue;
        }
        // Connecting with the lock held: a `cut` waits for this connection and then closes it.
        let Ok(server) = TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT) else {
            continue;
        };
        let _ = server.set_nodelay(true);
        let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
            client.try_clone(),
            server.try_clone(),
            client.try_clone(),
            server.try_clone(),
        ) else {
            continue;
        };
        let id = state.next_id;
        state.next_id += 1;
        state.forwarded.insert(id, [c3, s3]);
        drop(state);
        for (from, to) in [(client, s2), (server, c2)] {
            let mine = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name(format!("proxy pump {id}"))
                .spawn(move || {
                    pump(from, to);
                    close_forwarded(&mine, id);
                });
            if spawned.is_err() {
                close_forwarded(shared, id);
            }
        }
    }
}

/// Shuts down forwarded connection `id` (both directions end), if it is still there.
fn close_forwarded(shared: &Shared, id: u64) {
    if let Some([a, b]) = shared.lock().forwarded.remove(&id) {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    }
}

/// Copies `from` to `to` until either end closes or fails.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests;
