//! The shardjob registry over etcd (v3 API), with the `etcd-client` crate.
//!
//! [`EtcdRegistry::connect`] grants the session's lease and implements [`Registry`] on etcd's
//! flat key space, emulating the tree the model needs:
//!
//! | model | here |
//! |---|---|
//! | node `/a/b` in namespace `ns` | key `/ns/a/b`; the root `/` is the key `/ns` (created on connect) |
//! | [`Version`] | the key's `mod_revision` (so [`Check::Version`] compares `mod_revision`) |
//! | [`Revision`](shardjob_core::registry::Revision) | `create_revision` / `mod_revision` |
//! | session, [`SessionId`] | one lease (its id), kept alive by a task of this crate every TTL/3 |
//! | ephemeral node | a key bound to the session's lease ([`Stat::ephemeral_owner`] is the lease id) |
//! | transaction | one `Txn`: compares, then puts/deletes (see "Transactions") |
//! | children | a keys-only prefix read of `key + "/"`, keeping direct children only |
//! | watch | a prefix watch, resumed from the last seen revision + 1 after an error |
//!
//! # Sessions
//!
//! The lease's keep-alive loop runs every third of the TTL, and at once when a request or a
//! watch runs into a connection error. A failed keep-alive gives
//! [`SessionEvent::Suspended`] (the keep-alive stream is then opened again until it works),
//! a working one after that [`SessionEvent::Reconnected`], an answer of TTL 0 (the lease is
//! gone) [`SessionEvent::Expired`], after which a new lease is granted and
//! [`SessionEvent::Connected`] follows. The lease also holds a marker key,
//! `{namespace}\0session/{lease id}`, outside the node tree: it is what [`Check::Session`]
//! compares (see below). [`Registry::close`] revokes the lease, so ephemeral nodes go at once.
//!
//! # Transactions
//!
//! etcd evaluates all compares of a `Txn` before it applies any write, and refuses two writes
//! of one key in one `Txn`, while the model applies operations in order. So the backend
//! evaluates an operation on a path that an earlier operation of the same transaction wrote
//! against the transaction's own effects, sends compares only for the state before the
//! transaction, and sends one write per key (its final state). A transaction that deletes a
//! node and creates it again is refused ([`RegistryError::Backend`]). The compares:
//!
//! * [`Check::Exists`]: `create_revision(key) > 0`; [`Check::Absent`]: `create_revision(key) == 0`.
//! * [`Check::Version`]: `mod_revision(key) == version`; [`Check::Value`]: `value(key) == data`.
//! * [`Check::Session`]: the id must be the client's current lease (else
//!   [`RegistryError::SessionMismatch`] at once), and `lease(marker) == id`: the marker is
//!   deleted in the same revision as the lease's other keys when the lease ends, so the
//!   transaction commits only while the lease is alive. An ephemeral create is in any case
//!   refused by etcd when its lease is gone.
//! * create: the parent exists and is not ephemeral (`create_revision(parent) > 0`,
//!   `lease(parent) == 0`), the node does not exist.
//! * set: `mod_revision == expected` or the node exists; the put keeps the key's lease
//!   (`ignore_lease`).
//! * delete: `mod_revision == expected` or the node exists, and no key under `key + "/"`
//!   (a range compare `create_revision == 0`). When the transaction deletes some children
//!   first, the children are read and the compare becomes "no key under the prefix changed
//!   since that read" (`mod_revision < read revision + 1` over the range).
//!
//! All compares are atomic with the writes. When the `Txn` fails, the backend reads the state
//! again to name the first failing operation; if every compare holds by then (a race) the
//! transaction is sent again (up to 5 times). Identical compares (several creates under one
//! parent) are sent once. Results carry the transaction's revision; a set's stat takes the
//! node's creation revision and lease from the put's previous value. As all writes of a `Txn`
//! share its revision, a node created and set in one transaction reports one version for
//! both, and a [`Check::Version`] on a node written earlier in the same transaction fails.
//!
//! # Watches
//!
//! Every [`Registry::watch`] opens an etcd prefix watch of the node's key and keeps only the
//! keys of the node and its descendants. Events carry the data and stat of the change itself
//! (a put of a new key is `Created`, of an existing one `Changed`). When the watch stream
//! fails it is opened again from the last seen revision + 1, so no change is lost or
//! repeated. If that revision was compacted meanwhile, the stream reports
//! [`SessionEvent::Suspended`] and [`SessionEvent::Reconnected`] (the model's "events may have
//! been missed, reload") and goes on from the current revision.
//!
//! # Failures
//!
//! Reads are retried on `Unavailable` (a dead member in the balanced channel) until the
//! request deadline. Writes are retried only when the request never left: a transaction the
//! channel could not send because it could not connect to the member it picked (etcd-client
//! keeps a dead member in rotation) is sent again, unchanged, until the request deadline. Any
//! other failed write may have been applied and is not retried: the error is
//! [`RegistryError::ConnectionLoss`] or [`RegistryError::Timeout`], class transient.
//!
//! [`SessionEvent::Suspended`]: shardjob_core::registry::SessionEvent::Suspended
//! [`SessionEvent::Reconnected`]: shardjob_core::registry::SessionEvent::Reconnected
//! [`SessionEvent::Expired`]: shardjob_core::registry::SessionEvent::Expired
//! [`SessionEvent::Connected`]: shardjob_core::registry::SessionEvent::Connected
//! [`Check::Exists`]: shardjob_core::registry::Check::Exists
//! [`Check::Absent`]: shardjob_core::registry::Check::Absent
//! [`Check::Version`]: shardjob_core::registry::Check::Version
//! [`Check::Value`]: shardjob_core::registry::Check::Value
//! [`Check::Session`]: shardjob_core::registry::Check::Session
#![warn(missing_docs)]

mod config;
mod stream;
mod txn;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client as etcd;
use shardjob_core::backoff::Backoff;
use shardjob_core::registry::{
    EventStream, Node, NodePath, Registry, RegistryError, Revision, SessionEvent, SessionId,
    SessionInfo, Stat, Tree, TxnOp, TxnOpResult, Version,
};
use tokio::sync::{Notify, broadcast, watch};

#[cfg(feature = "tls")]
pub use config::EtcdTls;
pub use config::{ETCD_MAX_REQUEST_BYTES, ETCD_MAX_TXN_OPS, EtcdConfig, EtcdConfigError};

/// An error from [`EtcdRegistry::connect`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] EtcdConfigError),
    /// The first session could not be established.
    #[error("cannot connect to etcd: {0}")]
    Registry(#[from] RegistryError),
}

/// A [`Registry`] over an etcd cluster. See the [crate documentation](crate).
///
/// Clones share the connection and the session. Dropping the last clone revokes the lease
/// (when a tokio runtime is still there to do it) like [`Registry::close`].
#[derive(Clone)]
pub struct EtcdRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EtcdRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdRegistry")
            .field("endpoints", &self.inner.config.endpoints)
            .field("prefix", &self.inner.prefix)
            .field("session", &self.session())
            .finish()
    }
}

/// The client's view of its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionState {
    /// The live lease; `None` between an expiry and the next lease, and once closed.
    pub(crate) info: Option<SessionInfo>,
    /// Whether the last keep-alive failed.
    pub(crate) suspended: bool,
}

pub(crate) struct Inner {
    pub(crate) config: EtcdConfig,
    pub(crate) client: etcd::Client,
    /// `""` or `/ns`.
    pub(crate) prefix: String,
    pub(crate) state: watch::Sender<SessionState>,
    pub(crate) events: broadcast::Sender<SessionEvent>,
    pub(crate) closed: AtomicBool,
    /// Asks the keep-alive loop to check the connection now.
    pub(crate) nudge: Notify,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut task) = self.task.lock()
            && let Some(task) = task.take()
        {
            task.abort();
        }
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let Some(info) = self.state.borrow().info else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut client = self.client.clone();
            let timeout = self.config.request_timeout;
            rt.spawn(async move {
                let _ = tokio::time::timeout(timeout, client.lease_revoke(info.id.0 as i64)).await;
            });
        }
    }
}

impl Inner {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// The key of a node.
    pub(crate) fn key(&self, path: &NodePath) -> String {
        if path.is_root() {
            self.root_key()
        } else {
            format!("{}{}", self.prefix, path.as_str())
        }
    }

    pub(crate) fn root_key(&self) -> String {
        if self.prefix.is_empty() {
            "/".to_owned()
        } else {
            self.prefix.clone()
        }
    }

    /// The prefix of the keys of a node's descendants.
    pub(crate) fn child_prefix(&self, path: &NodePath) -> String {
        if path.is_root() {
            format!("{}/", self.prefix)
        } else {
            format!("{}{}/", self.prefix, path.as_str())
        }
    }

    /// The node a key stands for, if it is one.
    pub(crate) fn path_of(&self, key: &[u8]) -> Option<NodePath> {
        let key = std::str::from_utf8(key).ok()?;
        if key == self.root_key() {
            return Some(NodePath::root());
        }
        let rest = key.strip_prefix(self.prefix.as_str())?;
        if rest == "/" || !rest.starts_with('/') {
            return None;
        }
        NodePath::new(rest).ok()
    }

    /// The key of a lease's marker: outside the node tree.
    pub(crate) fn marker_key(&self, lease: i64) -> String {
        format!("{}\u{0}session/{lease:016x}", self.prefix)
    }

    pub(crate) fn lease(&self) -> Option<SessionInfo> {
        if self.is_closed() {
            return None;
        }
        self.state.borrow().info
    }

    pub(crate) fn emit(&self, event: SessionEvent) {
        // No receiver is fine: no stream is open.
        let _ = self.events.send(event);
    }

    /// Maps an error, and asks the keep-alive loop to look when the connection seems broken.
    pub(crate) fn error(&self, e: etcd::Error) -> RegistryError {
        let mapped = map_error(e);
        if self.is_closed() {
            return RegistryError::Closed;
        }
        if matches!(
            mapped,
            RegistryError::ConnectionLoss | RegistryError::Timeout
        ) {
            self.nudge.notify_one();
        }
        mapped
    }

    /// Grants a lease and puts its marker.
    async fn grant(&self) -> Result<SessionInfo, RegistryError> {
        let mut client = self.client.clone();
        let ttl = self.config.lease_ttl.as_secs() as i64;
        let granted = client
            .lease_grant(ttl, None)
            .await
            .map_err(|e| self.error(e))?;
        let id = granted.id();
        let marker = self.marker_key(id);
        client
            .put(
                marker,
                Vec::new(),
                Some(etcd::PutOptions::new().with_lease(id)),
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(SessionInfo {
            id: SessionId(id as u64),
            timeout: Duration::from_secs(granted.ttl().max(1) as u64),
        })
    }

    /// Runs `f` under the request deadline, retrying it while it fails with a connection
    /// error if `idempotent`.
    pub(crate) async fn run<T, F, Fut>(&self, idempotent: bool, f: F) -> Result<T, RegistryError>
    where
        F: Fn(etcd::Client) -> Fut,
        Fut: Future<Output = Result<T, RegistryError>>,
    {
        if self.is_closed() {
            return Err(RegistryError::Closed);
        }
        let work = async {
            let mut retries =
                Backoff::new(Duration::from_millis(50), Duration::from_millis(500)).retries();
            loop {
                match f(self.client.clone()).await {
                    Err(RegistryError::ConnectionLoss | RegistryError::Timeout)
                        if idempotent && !self.is_closed() =>
                    {
                        tokio::time::sleep(retries.next_pause()).await;
                    }
                    other => return other,
                }
            }
        };
        match tokio::time::timeout(self.config.request_timeout, work).await {
            Ok(r) => r,
            Err(_) if self.is_closed() => Err(RegistryError::Closed),
            Err(_) => {
                self.nudge.notify_one();
                Err(RegistryError::Timeout)
            }
        }
    }
}

/// Whether a request failed before it reached any server: the channel could not connect to
/// the member it picked. Only then may a write be sent again without knowing its outcome.
///
/// tonic turns a failed connection into an `Unavailable` status whose source chain holds the
/// connector's error: hyper-util's `ConnectError` (shown as "tcp connect error" for a refused
/// or timed-out connect; the type is not exported) over the `io::Error`. An `Unavailable`
/// status without such a source (a connection lost after the request went out, or an answer
/// of the server) is not a "never sent".
pub(crate) fn never_sent(e: &etcd::Error) -> bool {
    let etcd::Error::GRpcStatus(status) = e else {
        return false;
    };
    if !matches!(
        tonic_code::Code::of(status.code() as i32),
        tonic_code::Code::Unavailable
    ) {
        return false;
    }
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        let refused = err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
        if refused || err.to_string() == "tcp connect error" {
            return true;
        }
        source = err.source();
    }
    false
}

/// Maps an `etcd-client` error.
pub(crate) fn map_error(e: etcd::Error) -> RegistryError {
    use tonic_code::Code;
    match e {
        etcd::Error::GRpcStatus(status) => {
            let msg = status.message().to_owned();
            let lower = msg.to_lowercase();
            if lower.contains("too large") || lower.contains("too many operations") {
                return RegistryError::TooLarge(format!("etcd: {msg}"));
            }
            if lower.contains("lease not found") {
                return RegistryError::SessionExpired;
            }
            if lower.contains("request timed out") {
                return RegistryError::Timeout;
            }
            if lower.contains("authentication failed")
                || lower.contains("invalid auth token")
                || lower.contains("permission denied")
                || lower.contains("user name is empty")
            {
                return RegistryError::NotAuthorized(format!("etcd: {msg}"));
            }
            match Code::of(status.code() as i32) {
                Code::Unavailable => RegistryError::ConnectionLoss,
                Code::DeadlineExceeded | Code::Cancelled => RegistryError::Timeout,
                Code::PermissionDenied | Code::Unauthenticated => {
                    RegistryError::NotAuthorized(format!("etcd: {msg}"))
                }
                Code::ResourceExhausted => RegistryError::TooLarge(format!("etcd: {msg}")),
                Code::Other => RegistryError::Backend(format!("etcd: {msg}")),
            }
        }
        etcd::Error::TransportError(e) => {
            tracing::debug!(error = %e, "etcd transport error");
            RegistryError::ConnectionLoss
        }
        etcd::Error::IoError(e) => {
            tracing::debug!(error = %e, "etcd io error");
            RegistryError::ConnectionLoss
        }
        other => RegistryError::Backend(format!("etcd: {other}")),
    }
}

/// The few gRPC codes the mapping distinguishes (without depending on tonic directly).
mod tonic_code {
    pub(crate) enum Code {
        Unavailable,
        DeadlineExceeded,
        Cancelled,
        PermissionDenied,
        Unauthenticated,
        ResourceExhausted,
        Other,
    }

    impl Code {
        /// From a gRPC status code number (tonic's `Code` discriminants are gRPC's).
        pub(crate) fn of(code: i32) -> Code {
            match code {
                14 => Code::Unavailable,
                4 => Code::DeadlineExceeded,
                1 => Code::Cancelled,
                7 => Code::PermissionDenied,
                16 => Code::Unauthenticated,
                8 => Code::ResourceExhausted,
                _ => Code::Other,
            }
        }
    }
}

pub(crate) fn map_stat(kv: &etcd::KeyValue) -> Stat {
    Stat {
        version: Version(kv.mod_revision()),
        created: Revision(kv.create_revision().max(0) as u64),
        modified: Revision(kv.mod_revision().max(0) as u64),
        ephemeral_owner: (kv.lease() != 0).then_some(SessionId(kv.lease() as u64)),
        mtime_ms: None,
    }
}

/// The largest answer a read of a subtree may bring, in bytes. The client's default of 4 MiB
/// is reached by a job of about 30,000 items (an item is three or four keys with their
/// values); a job of the documented maximum of 100,000 items needs about 40 MiB.
const MAX_READ_BYTES: usize = 1 << 30;

/// A KV client whose answers may be as large as [`MAX_READ_BYTES`], for reads of subtrees.
fn large_reads(c: &etcd::Client) -> etcd::KvClient {
    c.kv_client().max_decoding_message_size(MAX_READ_BYTES)
}

impl EtcdRegistry {
    /// Validates the configuration, connects, grants the session's lease, creates the
    /// namespace key if it is missing and starts the keep-alive loop. Must be called inside a
    /// tokio runtime.
    pub async fn connect(config: EtcdConfig) -> Result<Self, EtcdError> {
        let prefix = config.validate()?;
        let mut options = etcd::ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
        if let Some((user, password)) = &config.user {
            options = options.with_user(user.clone(), password.clone());
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &config.tls {
            let mut t = etcd::TlsOptions::new()
                .ca_certificate(etcd::Certificate::from_pem(tls.ca_pem.clone()));
            if let Some((cert, key)) = &tls.identity {
                t = t.identity(etcd::Identity::from_pem(cert.clone(), key.clone()));
            }
            if let Some(domain) = &tls.domain {
                t = t.domain_name(domain.clone());
            }
            options = options.with_tls(t);
        }
        let endpoints: Vec<String> = config
            .endpoints
            .iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        let client = tokio::time::timeout(
            config.request_timeout,
            etcd::Client::connect(endpoints, Some(options)),
        )
        .await
        .map_err(|_| RegistryError::Timeout)?
        .map_err(map_error)?;
        let (state, _) = watch::channel(SessionState {
            info: None,
            suspended: false,
        });
        let (events, _) = broadcast::channel(256);
        let inner = Arc::new(Inner {
            config,
            client,
            prefix,
            state,
            events,
            closed: AtomicBool::new(false),
            nudge: Notify::new(),
            task: Mutex::new(None),
        });
        let info = tokio::time::timeout(inner.config.request_timeout, async {
            // The namespace node, if missing.
            let root = inner.root_key();
            let mut c = inner.client.clone();
            let txn = etcd::Txn::new()
                .when([etcd::Compare::create_revision(
                    root.clone(),
                    etcd::CompareOp::Equal,
                    0,
                )])
                .and_then([etcd::TxnOp::put(root, Vec::new(), None)]);
            c.txn(txn).await.map_err(|e| inner.error(e))?;
            inner.grant().await
        })
        .await
        .map_err(|_| RegistryError::Timeout)??;
        inner.state.send_replace(SessionState {
            info: Some(info),
            suspended: false,
        });
        let task = tokio::spawn(keep_alive(Arc::downgrade(&inner), info));
        if let Ok(mut slot) = inner.task.lock() {
            *slot = Some(task);
        }
        Ok(EtcdRegistry { inner })
    }

    /// The configuration in use.
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// A fault hook for tests: revokes the session's lease on the server, as if it had
    /// expired. Its ephemeral nodes are deleted; the keep-alive loop notices at once, reports
    /// [`SessionEvent::Expired`] and grants a new lease.
    pub async fn expire_session(&self) -> Result<(), RegistryError> {
        let info = self.inner.lease().ok_or(RegistryError::SessionExpired)?;
        let inner = &self.inner;
        self.inner
            .run(false, |mut c| async move {
                c.lease_revoke(info.id.0 as i64)
                    .await
                    .map(|_| ())
                    .map_err(|e| inner.error(e))
            })
            .await?;
        self.inner.nudge.notify_one();
        Ok(())
    }
}

/// The session's keep-alive loop: renews the lease every TTL/3 (or when nudged), reports
/// suspensions, reconnections and expiry, and grants a new lease after an expiry.
async fn keep_alive(inner: Weak<Inner>, mut info: SessionInfo) {
    let mut suspended = false;
    let mut stream: Option<(etcd::LeaseKeeper, etcd::LeaseKeepAliveStream)> = None;
    let mut retries = Backoff::new(Duration::from_millis(100), Duration::from_secs(1)).retries();
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.is_closed() {
            return;
        }
        let interval = strong.config.lease_ttl / 3;
        let probe_timeout = interval.max(Duration::from_millis(500));
        let mut client = strong.client.clone();
        let id = info.id.0 as i64;
        // One keep-alive round trip.
        let outcome: Result<i64, RegistryError> = tokio::time::timeout(probe_timeout, async {
            if stream.is_none() {
                stream = Some(client.lease_keep_alive(id).await.map_err(map_error)?);
            }
            let Some((keeper, responses)) = stream.as_mut() else {
                return Err(RegistryError::ConnectionLoss);
            };
            keeper.keep_alive().await.map_err(map_error)?;
            match responses.message().await.map_err(map_error)? {
                Some(resp) => Ok(resp.ttl()),
                None => Err(RegistryError::ConnectionLoss),
            }
        })
        .await
        .unwrap_or(Err(RegistryError::Timeout));
        let wait = match outcome {
            Ok(ttl) if ttl > 0 => {
                if suspended {
                    suspended = false;
                    strong.state.send_modify(|s| s.suspended = false);
                    strong.emit(SessionEvent::Reconnected(info.id));
                }
                retries.reset();
                interval
            }
            Ok(_) | Err(RegistryError::SessionExpired) => {
                // The lease is gone: its keys are deleted. Start a new session.
                stream = None;
                strong.state.send_replace(SessionState {
                    info: None,
                    suspended: false,
                });
                strong.emit(SessionEvent::Expired(info.id));
                suspended = false;
                tracing::warn!(lease = %info.id, "etcd lease expired; granting a new one");
                drop(strong);
                match regrant(&inner).await {
                    Some(new) => {
                        info = new;
                        continue;
                    }
                    None => return,
                }
            }
            Err(e) => {
                stream = None;
                if !suspended {
                    suspended = true;
                    strong.state.send_modify(|s| s.suspended = true);
                    strong.emit(SessionEvent::Suspended(info.id));
                    tracing::info!(lease = %info.id, error = %e, "etcd keep-alive failed");
                }
                retries.next_pause()
            }
        };
        let nudged = async {
            strong.nudge.notified().await;
        };
        let woke_early = tokio::time::timeout(wait, nudged).await.is_ok();
        drop(strong);
        if woke_early {
            // Let a burst of nudges settle.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Grants a new lease after an expiry, retrying until it works or the registry is gone.
async fn regrant(inner: &Weak<Inner>) -> Option<SessionInfo> {
    let mut retries = Backoff::new(Duration::from_millis(50), Duration::from_secs(2)).retries();
    loop {
        let strong = inner.upgrade()?;
        if strong.is_closed() {
            return None;
        }
        let granted = tokio::time::timeout(strong.config.request_timeout, strong.grant()).await;
        match granted {
            Ok(Ok(info)) => {
                strong.state.send_replace(SessionState {
                    info: Some(info),
                    suspended: false,
                });
                strong.emit(SessionEvent::Connected(info));
                tracing::info!(lease = %info.id, "new etcd lease");
                return Some(info);
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot grant an etcd lease; retrying"),
            Err(_) => tracing::warn!("granting an etcd lease timed out; retrying"),
        }
        drop(strong);
        tokio::time::sleep(retries.next_pause()).await;
    }
}

#[async_trait]
impl Registry for EtcdRegistry {
    /// The lease the client holds, also while keep-alives fail; `None` after an expiry until
    /// the next lease is granted, and once closed.
    fn session(&self) -> Option<SessionInfo> {
        self.inner.lease()
    }

    /// The configured `max_txn_ops` (the server's `--max-txn-ops`): compares and writes are
    /// each counted against it.
    fn max_txn_ops(&self) -> Option<usize> {
        Some(self.inner.config.max_txn_ops)
    }

    async fn get(&self, path: &NodePath) -> Result<Option<Node>, RegistryError> {
        let key = self.inner.key(path);
        let inner = &self.inner;
        self.inner
            .run(true, |mut c| {
                let key = key.clone();
                async move {
                    let resp = c.get(key, None).await.map_err(|e| inner.error(e))?;
                    Ok(resp.kvs().first().map(|kv| Node {
                        path: path.clone(),
                        data: kv.value().to_vec(),
                        stat: map_stat(kv),
                    }))
                }
            })
            .await
    }

    async fn children(&self, path: &NodePath) -> Result<Vec<String>, RegistryError> {
        let key = self.inner.key(path);
        let prefix = self.inner.child_prefix(path);
        let inner = &self.inner;
        self.inner
            .run(true, |c| {
                let (key, prefix) = (key.clone(), prefix.clone());
                async move {
                    // One revision for both reads.
                    let txn = etcd::Txn::new().and_then([
                        etcd::TxnOp::get(key, Some(etcd::GetOptions::new().with_count_only())),
                        etcd::TxnOp::get(
                            prefix.clone(),
                            Some(etcd::GetOptions::new().with_prefix().with_keys_only()),
                        ),
                    ]);
                    let resp = large_reads(&c).txn(txn).await.map_err(|e| inner.error(e))?;
                    let mut answers = resp.op_responses().into_iter();
                    let (
                        Some(etcd::TxnOpResponse::Get(node)),
                        Some(etcd::TxnOpResponse::Get(below)),
                    ) = (answers.next(), answers.next())
                    else {
                        return Err(RegistryError::Backend("etcd: odd txn answer".to_owned()));
                    };
                    if node.count() == 0 && !path.is_root() {
                        return Err(RegistryError::NoNode(path.clone()));
                    }
                    let mut names: Vec<String> = below
                        .kvs()
                        .iter()
                        .filter_map(|kv| {
                            let rest = kv.key().strip_prefix(prefix.as_bytes())?;
                            let rest = std::str::from_utf8(rest).ok()?;
                            (!rest.is_empty() && !rest.contains('/'))
                                .then(|| rest.to_owned())
                                .filter(|name| NodePath::root().join(name).is_ok())
                        })
                        .collect();
                    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
                    Ok(names)
                }
            })
            .await
    }

    async fn transact(&self, ops: Vec<TxnOp>) -> Result<Vec<TxnOpResult>, RegistryError> {
        let inner = &self.inner;
        txn::check_size(inner, &ops)?;
        self.inner
            .run(false, |c| {
                let ops = &ops;
                async move { txn::transact(inner, c, ops).await }
            })
            .await
    }

    async fn watch(&self, root: &NodePath) -> Result<Box<dyn EventStream>, RegistryError> {
        stream::start(&self.inner, root).await
    }

    /// Revokes the lease (its ephemeral nodes go at once) and stops the keep-alive loop;
    /// streams end with [`SessionEvent::Closed`]. Closing twice is fine. The revoke is tried
    /// within the request deadline; if the cluster cannot be reached the lease just expires.
    async fn close(&self) -> Result<(), RegistryError> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let info = self.inner.state.borrow().info;
        self.inner.state.send_replace(SessionState {
            info: None,
            suspended: false,
        });
        if let Ok(mut task) = self.inner.task.lock()
            && let Some(task) = task.take()
        {
            task.abort();
        }
        let mut result = Ok(());
        if let Some(info) = info {
            // Revoking is idempotent: retried on connection errors until the deadline.
            let inner = &self.inner;
            let work = async {
                let mut retries =
                    Backoff::new(Duration::from_millis(50), Duration::from_millis(500)).retries();
                loop {
                    let mut c = inner.client.clone();
                    match c.lease_revoke(info.id.0 as i64).await.map_err(map_error) {
                        // Already gone: the goal is reached.
                        Ok(_) | Err(RegistryError::SessionExpired) => return Ok(()),
                        Err(RegistryError::ConnectionLoss | RegistryError::Timeout) => {
                            tokio::time::sleep(retries.next_pause()).await;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            result = tokio::time::timeout(inner.config.request_timeout, work)
                .await
                .unwrap_or(Err(RegistryError::Timeout));
        }
        self.inner.emit(SessionEvent::Closed);
        result
    }

    async fn get_tree(&self, root: &NodePath) -> Result<Vec<Node>, RegistryError> {
        Ok(self.read_tree(root).await?.nodes)
    }

    /// One read of the node and of every key below it, at one revision: the response
    /// header's.
    async fn read_tree(&self, root: &NodePath) -> Result<Tree, RegistryError> {
        let key = self.inner.key(root);
        let prefix = self.inner.child_prefix(root);
        let inner = &self.inner;
        let (kvs, revision) = self
            .inner
            .run(true, |c| {
                let (key, prefix) = (key.clone(), prefix.clone());
                async move {
                    let txn = etcd::Txn::new().and_then([
                        etcd::TxnOp::get(key, None),
                        etcd::TxnOp::get(prefix, Some(etcd::GetOptions::new().with_prefix())),
                    ]);
                    let resp = large_reads(&c).txn(txn).await.map_err(|e| inner.error(e))?;
                    let revision = resp.header().map(|h| Revision(h.revision().max(0) as u64));
                    let mut kvs = Vec::new();
                    for answer in resp.op_responses() {
                        if let etcd::TxnOpResponse::Get(mut g) = answer {
                            kvs.extend(g.take_kvs());
                        }
                    }
                    Ok((kvs, revision))
                }
            })
            .await?;
        let mut nodes: Vec<Node> = kvs
            .iter()
            .filter_map(|kv| {
                let path = self.inner.path_of(kv.key())?;
                root.contains(&path).then(|| Node {
                    path,
                    data: kv.value().to_vec(),
                    stat: map_stat(kv),
                })
            })
            .collect();
        if !nodes.iter().any(|n| &n.path == root) {
            nodes.clear();
        }
        // Parents before children, siblings by name: the order of the segment lists.
        nodes.sort_by(|a, b| a.path.segments().cmp(b.path.segments()));
        Ok(Tree { nodes, revision })
    }
}

#[cfg(test)]
mod tests {
    /// A request to a port nobody listens on fails before it is sent, and is recognised so.
    #[tokio::test]
    async fn a_refused_connection_is_never_sent() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut c = etcd_client::Client::connect([format!("127.0.0.1:{port}")], None)
            .await
            .unwrap();
        let e = c.get("k", None).await.unwrap_err();
        assert!(super::never_sent(&e), "{e:?}");
        assert!(!super::never_sent(&etcd_client::Error::IoError(
            std::io::ErrorKind::ConnectionRefused.into()
        )));
    }

    #[test]
    fn segment_order_is_depth_first() {
        use shardjob_core::registry::NodePath;
        let mut v: Vec<NodePath> = ["/a/b", "/a", "/a-b", "/a/b/c", "/a/a"]
            .iter()
            .map(|s| NodePath::new(*s).unwrap())
            .collect();
        v.sort_by(|a, b| a.segments().cmp(b.segments()));
        let s: Vec<&str> = v.iter().map(|p| p.as_str()).collect();
        assert_eq!(s, ["/a", "/a/a", "/a/b", "/a/b/c", "/a-b"]);
    }
}
