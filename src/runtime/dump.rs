//! The dump port: ElasticJob's snapshot protocol, served by an instance.
//!
//! A client connects, sends one line `dump@{jobName}`, and gets the job's registry tree back
//! in ElasticJob's format ([`shardjob_ops::format_dump`]: `path | value` lines, depth first,
//! IPv4 addresses masked as `ip1`, `ip2`, …); where this instance's copy of a node differs
//! from the registry, the line carries the copy too (`path | value | cachePath |
//! cacheValue`). Then the server closes the connection.
//!
//! The copy: the machine keeps facts, not nodes, so while the dump port is on the driver keeps
//! each hosted job's nodes as the machine is handed them (the snapshot of its newest load,
//! then the job's watch events, those that came during the load applied after it). A line
//! whose copy differs is an event this instance has not been delivered yet (or lost). A job
//! this instance does not host, or has not loaded yet, is dumped from the registry alone.
//! `shardjob dump JOB --instance HOST:PORT` is such a client; so is
//! `echo dump@JOB | nc HOST PORT`.
//!
//! Where it does better than ElasticJob's `SnapshotService`:
//!
//! - it binds `127.0.0.1` unless it is given another address ([`DumpAddr`]): the tree
//!   holds job parameters and commands, and the port has no authentication;
//! - it never stalls the scheduler: it runs in tasks of its own, and reads the registry with
//!   a timeout ([`REGISTRY_TIMEOUT`]);
//! - a client is bounded: the request must come within [`REQUEST_TIMEOUT`] and fit in
//!   [`MAX_REQUEST_LINE`] bytes, the answer must be taken within [`WRITE_TIMEOUT`]; at most
//!   [`MAX_CLIENTS`] are served at once, and as many more are told so within a second (beyond
//!   that, dropped); the bounds but the line's can be changed ([`DumpLimits`]);
//! - a request it cannot serve gets one line `error: …` saying why (ElasticJob answers
//!   nothing): an unknown command, a bad or unknown job, a registry that does not answer
//!   (`error: registry: …`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use shardjob_core::layout::JobPaths;
use shardjob_core::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::SchedulerState;
use super::mirror::Mirror;

/// The longest request line read, newline included.
pub const MAX_REQUEST_LINE: usize = 1024;

/// How long a client has to send its request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client has to take the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the registry has to answer the tree read of a dump.
pub const REGISTRY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many clients are served at once; one more is answered `error: busy` and closed.
pub const MAX_CLIENTS: usize = 8;

/// The bounds of the dump port; [`DumpLimits::default`] holds the constants of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpLimits {
    /// How long a client has to send its request line.
    pub request_timeout: Duration,
    /// How long a client has to take the answer.
    pub write_timeout: Duration,
    /// How long the registry has to answer the tree read of a dump.
    pub registry_timeout: Duration,
    /// How many clients are served at once (at least 1).
    pub max_clients: usize,
}

impl Default for DumpLimits {
    fn default() -> Self {
        Self {
            request_timeout: REQUEST_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            registry_timeout: REGISTRY_TIMEOUT,
            max_clients: MAX_CLIENTS,
        }
    }
}

/// How long a client turned away as busy has to send its request (read only so that the
/// connection closes cleanly) and to take the answer.
const BUSY_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// The request's command word, before the `@`.
const COMMAND: &str = "dump";

/// Where the dump port listens. From a port alone it is `127.0.0.1:{port}`; give a
/// [`SocketAddr`] (`0.0.0.0:9888`) to be reachable from other hosts. Port 0 takes a free
/// port ([`super::SchedulerHandle::dump_addr`] says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpAddr(pub SocketAddr);

impl From<u16> for DumpAddr {
    fn from(port: u16) -> Self {
        DumpAddr(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
    }
}

impl From<SocketAddr> for DumpAddr {
    fn from(addr: SocketAddr) -> Self {
        DumpAddr(addr)
    }
}

/// The dump port's listener, bound by the builder (so that a port taken fails the build).
pub(crate) struct DumpServer {
    listener: TcpListener,
    registry: Arc<dyn Registry>,
    mirror: Mirror,
    limits: DumpLimits,
}

impl DumpServer {
    /// Binds `addr`.
    pub async fn bind(
        addr: DumpAddr,
        limits: DumpLimits,
        registry: Arc<dyn Registry>,
        mirror: Mirror,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr.0).await?;
        Ok(Self {
            listener,
            registry,
            mirror,
            limits: DumpLimits {
                max_clients: limits.max_clients.max(1),
                ..limits
            },
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the scheduler stops.
    pub async fn run(self, mut state: watch::Receiver<SchedulerState>) {
        let limits = self.limits;
        let slots = Arc::new(Semaphore::new(limits.max_clients));
        let refusals = Arc::new(Semaphore::new(limits.max_clients));
        loop {
            if *state.borrow_and_update() != SchedulerState::Running {
                return;
            }
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                changed = state.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => return,
                },
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!("dump port: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                // Told so once its request is read: closing on bytes unread would reset the
                // connection, and the client would lose the line. As many again at most;
                // beyond, dropped at once.
                if let Ok(turn) = Arc::clone(&refusals).try_acquire_owned() {
                    tokio::spawn(async move {
                        let mut stream = stream;
                        let wait = limits.request_timeout.min(BUSY_READ_TIMEOUT);
                        let _ = read_request(&mut stream, wait).await;
                        let line = format!(
                            "error: busy: {} dumps are being served; try again\n",
                            limits.max_clients
                        );
                        let _ = answer(stream, line.as_bytes(), wait, turn).await;
                    });
                }
                continue;
            };
            let registry = Arc::clone(&self.registry);
            let mirror = self.mirror.clone();
            tokio::spawn(async move {
                serve(stream, &*registry, &mirror, limits, slot).await;
                tracing::debug!(%peer, "dump port: client served");
            });
        }
    }
}

/// What a request line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Request {
    /// `dump@{job}`.
    Dump(String),
    /// Anything else: the answer says why it is refused.
    Refused(String),
}

/// Parses a request line (without its line end).
fn parse(line: &str) -> Request {
    let line = line.trim();
    match line.split_once('@') {
        Some((COMMAND, job)) => match JobPaths::new(job) {
            Ok(_) => Request::Dump(job.to_owned()),
            Err(e) => Request::Refused(format!("error: bad job name {job:?}: {e}")),
        },
        _ => {
            let shown: String = line.chars().take(64).collect();
            Request::Refused(format!(
                "error: unknown request {shown:?}: send one line dump@JOB_NAME"
            ))
        }
    }
}

/// Reads the request line: up to a newline or the end of input, within `timeout` and
/// [`MAX_REQUEST_LINE`] bytes. `Err` is the answer for a client that broke a bound.
async fn read_request(stream: &mut TcpStream, timeout: Duration) -> Result<String, String> {
    let mut buf = Vec::with_capacity(64);
    let read = async {
        let mut chunk = [0u8; 256];
        loop {
            let n = match stream.read(&mut chunk).await {
                Ok(n) => n,
                Err(e) => return Err(format!("error: cannot read the request: {e}")),
            };
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = buf.iter().position(|b| *b == b'\n') {
                buf.truncate(end);
                return Ok(());
            }
            if buf.len() > MAX_REQUEST_LINE {
                return Err(format!(
                    "error: request longer than {MAX_REQUEST_LINE} bytes: send one line dump@JOB_NAME"
                ));
            }
        }
    };
    match tokio::time::timeout(timeout, read).await {
        Err(_) => Err(format!(
            "error: no request within {}s: send one line dump@JOB_NAME",
            timeout.as_secs()
        )),
        Ok(Err(answer)) => Err(answer),
        Ok(Ok(())) => String::from_utf8(buf)
            .map_err(|_| "error: the request is not UTF-8: send one line dump@JOB_NAME".to_owned()),
    }
}

/// The answer to `dump@{job}`: the dump, or one `error:` line.
async fn dump_text(
    registry: &dyn Registry,
    mirror: &Mirror,
    job: &str,
    timeout: Duration,
) -> String {
    let Ok(paths) = JobPaths::new(job) else {
        return format!("error: bad job name {job:?}\n");
    };
    let nodes = match tokio::time::timeout(timeout, registry.get_tree(paths.root())).await {
        Err(_) => {
            return format!(
                "error: registry: no answer within {}s reading job {job:?}\n",
                timeout.as_secs()
            );
        }
        Ok(Err(e)) => return format!("error: registry: reading job {job:?}: {e}\n"),
        Ok(Ok(nodes)) => nodes,
    };
    if nodes.is_empty() {
        return format!("error: no job {job:?} in this namespace\n");
    }
    let cache = mirror.beside(job, &nodes);
    // Formatting a large tree is work of milliseconds: off the runtime's worker threads.
    let name = job.to_owned();
    tokio::task::spawn_blocking(move || shardjob_ops::format_dump(&name, &nodes, cache.as_ref()))
        .await
        .unwrap_or_else(|e| format!("error: the dump of job {job:?} failed: {e}\n"))
}

/// Serves one client; its slot is given back once the answer is written, before the
/// connection is closed (so a client that has read to the end finds the slot free).
async fn serve(
    mut stream: TcpStream,
    registry: &dyn Registry,
    mirror: &Mirror,
    limits: DumpLimits,
    slot: OwnedSemaphorePermit,
) {
    let text = match read_request(&mut stream, limits.request_timeout).await {
        Err(answer) => answer + "\n",
        Ok(line) => match parse(&line) {
            Request::Refused(answer) => answer + "\n",
            Request::Dump(job) => dump_text(registry, mirror, &job, limits.registry_timeout).await,
        },
    };
    if let Err(e) = answer(stream, text.as_bytes(), limits.write_timeout, slot).await {
        tracing::debug!("dump port: answer not delivered: {e}");
    }
}

/// Writes the answer within `timeout`, gives the slot back, and closes.
async fn answer(
    mut stream: TcpStream,
    text: &[u8],
    timeout: Duration,
    slot: OwnedSemaphorePermit,
) -> std::io::Result<()> {
    let write = async {
        stream.write_all(text).await?;
        drop(slot);
        stream.shutdown().await
    };
    tokio::time::timeout(timeout, write)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "client did not read"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        assert_eq!(parse("dump@settle"), Request::Dump("settle".to_owned()));
        assert_eq!(parse("dump@settle\r"), Request::Dump("settle".to_owned()));
        assert!(
            matches!(parse("dump@"), Request::Refused(a) if a.starts_with("error: bad job name"))
        );
        assert!(
            matches!(parse("dump@a/b"), Request::Refused(a) if a.starts_with("error: bad job name"))
        );
        assert!(
            matches!(parse("stat"), Request::Refused(a) if a.contains("unknown request \"stat\""))
        );
        assert!(matches!(parse("DUMP@x"), Request::Refused(_)));
        assert_eq!(
            DumpAddr::from(9888).0,
            "127.0.0.1:9888".parse::<SocketAddr>().unwrap()
        );
    }
}
