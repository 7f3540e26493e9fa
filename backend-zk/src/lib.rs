//! The shardjob registry over ZooKeeper, with the `zookeeper-client` crate.
//!
//! [`ZkRegistry::connect`] opens a session on an ensemble (a connect string with one host or
//! several) and implements [`Registry`] with ZooKeeper's own primitives:
//!
//! | model | here |
//! |---|---|
//! | namespace | a chroot, created with its ancestors when missing; ElasticJob's tools see the same tree |
//! | [`Version`] | the znode's data version |
//! | [`Revision`](shardjob_core::registry::Revision) | `czxid` / `mzxid` |
//! | ephemeral node | an ephemeral znode of the client's session ([`Stat::ephemeral_owner`] is the session id) |
//! | transaction | one `multi` request (see "Checks" below) |
//! | watch | one persistent recursive watch per [`Registry::watch`] call |
//! | deadline | every request runs under [`ZkConfig::request_timeout`] |
//!
//! # Sessions
//!
//! The client holds one ZooKeeper session at a time. Its state changes become
//! [`SessionEvent`]s on every stream: `Disconnected` → [`SessionEvent::Suspended`],
//! `SyncConnected` after that → [`SessionEvent::Reconnected`] (the session and its ephemeral
//! nodes survived; events in the gap may be lost, reload), `Expired` →
//! [`SessionEvent::Expired`]. After an expiry a background task builds a new session (retrying
//! until it succeeds or the registry is closed) and every stream re-establishes its watch on it
//! and then reports [`SessionEvent::Connected`]. The `zookeeper-client` crate declares a
//! session expired by itself after 7/5 of the negotiated timeout without contact, and
//! requests sent while disconnected wait for the reconnection: they end at the request
//! deadline with [`RegistryError::Timeout`] (a write that timed out may still be applied
//! later). A restarted server may keep a dead session's ephemeral nodes for one more session
//! timeout.
//!
//! # Checks
//!
//! ZooKeeper's `multi` only knows "this node has this data version" (`check`), so:
//!
//! * [`Check::Exists`]: `check(path, -1)` — any version, the node must exist. Atomic.
//! * [`Check::Version`]: `check(path, version)`. Atomic.
//! * [`Check::Session`]: the transaction is sent on the client object of that very session
//!   (a `zookeeper-client` client never changes its session), with a `check` of the namespace
//!   root so that even a transaction of checks only reaches the server: ZooKeeper validates the
//!   session of every request when it processes it, so the transaction either runs in that
//!   session or fails with [`RegistryError::SessionExpired`]. A check naming another session
//!   than the client's current one fails at once with [`RegistryError::SessionMismatch`].
//! * [`Check::Value`]: the node is read first; if its data differs the transaction is aborted
//!   at once with [`RegistryError::ValueMismatch`] (as of that read), otherwise the multi
//!   carries `check(path, version_read)`. A set between the read and the commit changes the
//!   version and makes the multi fail, and then the whole transaction is planned again (up to
//!   5 times). Not detected: a delete and re-create of the node that lands on the same data
//!   version between the read and the commit (ZooKeeper cannot compare anything but the data
//!   version).
//! * [`Check::Absent`]: a `create` of the node followed by a `delete` of it in the same multi:
//!   the create fails if the node exists at commit time, and nothing remains of the pair.
//!   Atomic. If the parent is missing at commit time the check is planned again on the nearest
//!   existing ancestor (create+delete of its child on the way to the node: if that child is
//!   absent, so is the node); if the parent is ephemeral (so the node cannot exist) it becomes
//!   `check(parent, version_read)`. The pair makes every watcher receive a `NodeCreated` and a
//!   `NodeDeleted` notification; the streams of this crate drop a `Created` whose node is gone
//!   (by its read, the client's own journal, or the `Deleted` later in the same burst),
//!   together with the `Deleted` that follows, so the pair is invisible to them (other
//!   ZooKeeper clients, such as ElasticJob's, do see it).
//!
//! Checks and operations on a path touched earlier in the same transaction are evaluated
//! against the transaction's own effects (a multi sees its earlier operations). A check naming
//! the wrong session, or a Value/Absent check settled by the transaction's own earlier
//! operations, fails the transaction without sending it, at that check's index (even if an
//! earlier operation would have failed on the server).
//!
//! A transaction of one create, set or delete is sent as that plain request. ZooKeeper 3.8
//! leaves the stat of a node created in a multi out of its answer (ZOOKEEPER-4026); the
//! backend then reports data version 0 and the multi's zxid, taken from another write of the
//! same multi, else from the node's `czxid` or its parent's `pzxid` read right after the
//! commit (exact unless another client changed them in between).
//!
//! # Watch events
//!
//! `zookeeper-client` 0.11 does not register persistent watches again when it reconnects (its
//! `SetWatches` request leaves them out), so a stream adds its watch anew before it reports
//! [`SessionEvent::Reconnected`]: every change after that event is delivered, changes during
//! the gap may be missed (reload, as the event says).
//!
//! ZooKeeper notifications carry no data. For `NodeCreated` / `NodeDataChanged` a stream
//! reports a state of the node at or after the change the event stands for, never an older
//! one, taken from the first of:
//!
//! * **this client's own writes**: each stream keeps a journal of the writes the client sends
//!   on the session its watch lives on; the notification of such a write carries the data
//!   sent and the stat the write's answer returned (for a node created in a multi, whose stat
//!   ZooKeeper 3.8 leaves out, data version 0 at the multi's zxid when another write of the
//!   multi tells it), exactly what a read right after the write would give. Why this is
//!   sound, and when the journal gives up and the node is read: the `journal` module;
//! * **a deletion later in the same burst**: the node is gone by any read made now; the
//!   event is dropped (a `Created` with its `Deleted`, as for a node gone when read);
//! * **a read**: the nodes left of a burst of notifications in one multi-read. The data and
//!   stat may be newer than the change (several quick changes give as many events, each with
//!   the data read then); a node that is gone by then is reported by the `Deleted` event that
//!   follows. Before reading, a burst takes the notifications that have arrived meanwhile
//!   (while it waited for the answers to the client's own writes), so that one read serves
//!   them all; a node read stands for all its later events of the burst.
//!
//! A node's events never take it back in time: its journal states and reads follow the order
//! of its changes.
//!
//! [`SessionEvent`]: shardjob_core::registry::SessionEvent
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
mod journal;
mod stream;
mod txn;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use shardjob_core::backoff::Backoff;
use shardjob_core::registry::{
    EventStream, Node, NodePath, Registry, RegistryError, SessionId, SessionInfo, Stat, TxnOp,
    TxnOpResult, Version,
};
use tokio::sync::watch;
use zookeeper_client as zk;

pub use config::{ZK_MAX_PACKET, ZkAcl, ZkConfig, ZkConfigError};

/// An error from [`ZkRegistry::connect`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZkError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ZkConfigError),
    /// The first session could not be established.
    #[error("cannot connect to ZooKeeper: {0}")]
    Registry(#[from] RegistryError),
}

/// A [`Registry`] over a ZooKeeper ensemble. See the [crate documentation](crate).
///
/// Clones share the client and its session. Dropping the last clone (or [`Registry::close`])
/// closes the session; its ephemeral nodes go at once.
#[derive(Clone)]
pub struct ZkRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ZkRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkRegistry")
            .field("hosts", &self.inner.hosts)
            .field("chroot", &self.inner.chroot)
            .field("session", &self.session())
            .finish()
    }
}

/// One established ZooKeeper session.
pub(crate) struct Session {
    pub(crate) client: zk::Client,
    pub(crate) info: SessionInfo,
}

pub(crate) struct Inner {
    pub(crate) config: ZkConfig,
    hosts: String,
    chroot: Option<NodePath>,
    /// The live session; `None` between an expiry and the next session, and once closed.
    pub(crate) current: watch::Sender<Option<Arc<Session>>>,
    pub(crate) closed: AtomicBool,
    /// The streams' journals of this client's writes.
    pub(crate) journals: Arc<journal::Journals>,
}

static ACL_CREATOR_ALL_ANYONE_READ: [zk::Acl; 2] = [
    zk::Acl::new_const(zk::Permission::ALL, "auth", ""),
    zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
];

impl Inner {
    pub(crate) fn acls(&self) -> zk::Acls<'static> {
        match self.config.acl {
            ZkAcl::Open => zk::Acls::anyone_all(),
            ZkAcl::CreatorAll => zk::Acls::creator_all(),
            ZkAcl::CreatorAllAnyoneRead => zk::Acls::new(&ACL_CREATOR_ALL_ANYONE_READ),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// The live session, waiting for one (after an expiry) until `deadline`.
    pub(crate) async fn session(&self) -> Result<Arc<Session>, RegistryError> {
        let mut rx = self.current.subscribe();
        loop {
            if self.is_closed() {
                return Err(RegistryError::Closed);
            }
            if let Some(s) = rx.borrow_and_update().clone() {
                return Ok(s);
            }
            if rx.changed().await.is_err() {
                return Err(RegistryError::Closed);
            }
        }
    }

    /// Opens a new session (and the chroot) with the configuration.
    async fn open(&self) -> Result<Session, RegistryError> {
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.config.session_timeout)
            .with_connection_timeout(self.config.connection_timeout);
        if let Some((user, password)) = &self.config.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let limit = self.config.session_timeout * 2 + self.config.connection_timeout;
        let client = tokio::time::timeout(limit, connector.connect(&self.hosts))
            .await
            .map_err(|_| RegistryError::Timeout)?
            .map_err(|e| map_error(e, &NodePath::root(), None))?;
        let client = match &self.chroot {
            None => client,
            Some(root) => {
                let opts = zk::CreateMode::Persistent.with_acls(self.acls());
                let made = tokio::time::timeout(
                    self.config.request_timeout,
                    client.mkdir(root.as_str(), &opts),
                )
                .await
                .map_err(|_| RegistryError::Timeout)?;
                match made {
                    Ok(()) | Err(zk::Error::NodeExists) => {}
                    Err(e) => return Err(map_error(e, root, None)),
                }
                client.chroot(root.as_str().to_owned()).map_err(|_| {
                    RegistryError::Backend(format!("ZooKeeper refused the chroot {root}"))
                })?
            }
        };
        let info = SessionInfo {
            id: SessionId(client.session_id().0 as u64),
            timeout: client.session_timeout(),
        };
        Ok(Session { client, info })
    }
}

impl ZkRegistry {
    /// Validates the configuration, opens the first session and creates the namespace node
    /// if it is missing. Must be called inside a tokio runtime (the client spawns its
    /// session task there).
    pub async fn connect(config: ZkConfig) -> Result<Self, ZkError> {
        let (hosts, chroot) = config.validate()?;
        let (current, _) = watch::channel(None);
        let inner = Arc::new(Inner {
            config,
            hosts,
            chroot,
            current,
            closed: AtomicBool::new(false),
            journals: Arc::default(),
        });
        let session = Arc::new(inner.open().await?);
        let state = session.client.state_watcher();
        let id = session.info.id;
        inner.current.send_replace(Some(session));
        tokio::spawn(supervise(Arc::downgrade(&inner), state, id));
        Ok(ZkRegistry { inner })
    }

    /// The configuration in use.
    pub fn config(&self) -> &ZkConfig {
        &self.inner.config
    }

    async fn run<T, F, Fut>(&self, f: F) -> Result<T, RegistryError>
    where
        F: FnOnce(Arc<Session>) -> Fut + Send,
        Fut: Future<Output = Result<T, RegistryError>> + Send,
        T: Send,
    {
        let work = async {
            let session = self.inner.session().await?;
            f(session).await
        };
        match tokio::time::timeout(self.inner.config.request_timeout, work).await {
            Ok(result) => result.map_err(|e| self.closed_or(e)),
            Err(_) => Err(self.closed_or(RegistryError::Timeout)),
        }
    }

    fn closed_or(&self, e: RegistryError) -> RegistryError {
        if self.inner.is_closed() {
            RegistryError::Closed
        } else {
            e
        }
    }
}

/// Follows the sessions' states: after an expiry, opens the next session.
async fn supervise(inner: Weak<Inner>, mut state: zk::StateWatcher, mut id: SessionId) {
    loop {
        let mut s = state.peek_state();
        while !s.is_terminated() {
            s = state.changed().await;
        }
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.is_closed() {
            return;
        }
        tracing::warn!(session = %id, state = ?s, "ZooKeeper session ended; opening a new one");
        // Requests wait for the next session instead of using the dead one.
        strong.current.send_if_modified(|cur| {
            if cur.as_ref().is_some_and(|c| c.info.id == id) {
                *cur = None;
                true
            } else {
                false
            }
        });
        drop(strong);
        let mut retries = Backoff::new(Duration::from_millis(50), Duration::from_secs(2)).retries();
        let session = loop {
            let Some(strong) = inner.upgrade() else {
                return;
            };
            if strong.is_closed() {
                return;
            }
            match strong.open().await {
                Ok(session) => break session,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open a ZooKeeper session; retrying");
                }
            }
            drop(strong);
            tokio::time::sleep(retries.next_pause()).await;
        };
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.is_closed() {
            return;
        }
        state = session.client.state_watcher();
        id = session.info.id;
        tracing::info!(session = %id, "new ZooKeeper session");
        strong.current.send_replace(Some(Arc::new(session)));
    }
}

/// Maps a ZooKeeper error about `path` (a create's parent for `NoNode`, given as `parent`).
pub(crate) fn map_error(e: zk::Error, path: &NodePath, expected: Option<Version>) -> RegistryError {
    match e {
        zk::Error::NoNode => RegistryError::NoNode(path.clone()),
        zk::Error::NodeExists => RegistryError::NodeExists(path.clone()),
        zk::Error::BadVersion => RegistryError::BadVersion {
            path: path.clone(),
            expected: expected.unwrap_or(Version(-1)),
        },
        zk::Error::NotEmpty => RegistryError::NotEmpty(path.clone()),
        zk::Error::NoChildrenForEphemerals => {
            RegistryError::NoChildrenForEphemerals(path.parent().unwrap_or_else(NodePath::root))
        }
        zk::Error::SessionExpired | zk::Error::SessionMoved => RegistryError::SessionExpired,
        zk::Error::ConnectionLoss => RegistryError::ConnectionLoss,
        zk::Error::Timeout => RegistryError::Timeout,
        zk::Error::NoAuth => {
            RegistryError::NotAuthorized(format!("the ACL of {path} forbids this request"))
        }
        zk::Error::AuthFailed => {
            RegistryError::NotAuthorized("ZooKeeper rejected the credentials".to_owned())
        }
        zk::Error::InvalidAcl => RegistryError::NotAuthorized(format!("invalid ACL for {path}")),
        zk::Error::ClientClosed => RegistryError::ConnectionLoss,
        zk::Error::NoHosts => RegistryError::ConnectionLoss,
        other => RegistryError::Backend(format!("ZooKeeper: {other} (at {path})")),
    }
}

pub(crate) fn map_stat(stat: &zk::Stat) -> Stat {
    Stat {
        version: Version(i64::from(stat.version)),
        created: shardjob_core::registry::Revision(stat.czxid.max(0) as u64),
        modified: shardjob_core::registry::Revision(stat.mzxid.max(0) as u64),
        ephemeral_owner: (stat.ephemeral_owner != 0)
            .then_some(SessionId(stat.ephemeral_owner as u64)),
        mtime_ms: (stat.mtime > 0).then_some(stat.mtime),
    }
}

#[async_trait]
impl Registry for ZkRegistry {
    /// ZooKeeper stamps every node it writes with its leader's clock (`mtime`).
    fn stamps_time(&self) -> bool {
        true
    }

    /// The session the client holds, also while disconnected; `None` after an expiry until
    /// the next session is established, and once closed.
    fn session(&self) -> Option<SessionInfo> {
        if self.inner.is_closed() {
            return None;
        }
        let current = self.inner.current.borrow();
        current
            .as_ref()
            .filter(|s| !s.client.state().is_terminated())
            .map(|s| s.info)
    }

    async fn get(&self, path: &NodePath) -> Result<Option<Node>, RegistryError> {
        self.run(|s| async move {
            match s.client.get_data(path.as_str()).await {
                Ok((data, stat)) => Ok(Some(Node {
                    path: path.clone(),
                    data,
                    stat: map_stat(&stat),
                })),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(map_error(e, path, None)),
            }
        })
        .await
    }

    async fn children(&self, path: &NodePath) -> Result<Vec<String>, RegistryError> {
        self.run(|s| async move {
            let mut names = s
                .client
                .list_children(path.as_str())
                .await
                .map_err(|e| map_error(e, path, None))?;
            names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            Ok(names)
        })
        .await
    }

    async fn transact(&self, ops: Vec<TxnOp>) -> Result<Vec<TxnOpResult>, RegistryError> {
        txn::check_size(&ops, &self.inner)?;
        let inner = &self.inner;
        self.run(|s| async move { txn::transact(inner, &s, ops).await })
            .await
    }

    async fn watch(&self, root: &NodePath) -> Result<Box<dyn EventStream>, RegistryError> {
        let (watcher, session) = self
            .run(|s| async move {
                let w = s
                    .client
                    .watch(root.as_str(), zk::AddWatchMode::PersistentRecursive)
                    .await
                    .map_err(|e| map_error(e, root, None))?;
                Ok((w, s.info))
            })
            .await?;
        // The watch is in place on the server: writes sent from now on are notified to it.
        let journal = journal::Journal::new(root.clone());
        self.inner.journals.add(&journal);
        journal.open(session.id);
        Ok(stream::start(
            Arc::downgrade(&self.inner),
            root.clone(),
            watcher,
            session,
            stream::Own {
                journals: Arc::clone(&self.inner.journals),
                journal,
            },
        ))
    }

    /// Closes the session (its ephemeral nodes go at once) and waits, up to the request
    /// deadline, until the server confirmed. Streams end with [`SessionEvent::Closed`].
    /// Closing twice is fine.
    ///
    /// [`SessionEvent::Closed`]: shardjob_core::registry::SessionEvent::Closed
    async fn close(&self) -> Result<(), RegistryError> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let Some(session) = self.inner.current.send_replace(None) else {
            return Ok(());
        };
        let mut state = session.client.state_watcher();
        // The session closes when the last handle of its client is dropped (requests in
        // flight hold one until they end).
        drop(session);
        let wait = async {
            let mut s = state.peek_state();
            while !s.is_terminated() {
                s = state.changed().await;
            }
        };
        match tokio::time::timeout(self.inner.config.request_timeout, wait).await {
            Ok(()) => Ok(()),
            Err(_) => Err(RegistryError::Timeout),
        }
    }

    async fn get_tree(&self, root: &NodePath) -> Result<Vec<Node>, RegistryError> {
        // Breadth by breadth with one multi-read per level: far fewer round trips than the
        // default walk.
        let inner = &self.inner;
        self.run(|s| async move { txn::get_tree(inner, &s, root).await })
            .await
    }
}
