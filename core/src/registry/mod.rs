//! The registry model: what shardjob needs from ZooKeeper, etcd or the in-memory store.
//!
//! A registry is a tree of versioned nodes addressed by [`NodePath`]. Nodes are persistent or
//! ephemeral (bound to the client's session); writes can be grouped into atomic transactions
//! guarded by [`Check`]s; a recursive watch delivers created/changed/deleted events in order,
//! with session state changes interleaved. The model is the common ground of ZooKeeper and etcd:
//!
//! | model | ZooKeeper | etcd |
//! |---|---|---|
//! | path relative to the namespace | chroot | key prefix |
//! | parent must exist, no delete of a node with children | native | checked by the backend |
//! | ephemeral node | ephemeral znode | key bound to the session's lease |
//! | [`Version`] | data version | modification revision |
//! | [`Revision`] | zxid | revision |
//! | transaction | `multi` | `Txn` with compares |
//! | recursive watch | persistent recursive watch | prefix watch resumed by revision |
//!
//! The async [`Registry`] trait is what backends implement and drivers call. The core itself
//! never awaits anything: it emits [`RegistryOp`] values with a [`RequestId`] and is handed the
//! [`RegistryReply`] later; [`execute`] is the bridge a driver uses.

mod error;
mod event;
mod path;
mod txn;
mod types;

use async_trait::async_trait;

pub use error::{ErrorClass, RegistryError};
pub use event::{EventStream, RegistryEvent, SessionEvent, WatchEvent, WatchEventKind};
pub use path::{NodePath, PathError};
pub use txn::{Check, TxnOp, TxnOpResult};
pub use types::{CreateMode, Node, Revision, SessionId, SessionInfo, Stat, Tree, Version};

/// A client of a registry: one session at a time, renewed after expiry.
///
/// Every method has a deadline set by the backend's configuration and returns
/// [`RegistryError::Timeout`] when it passes; none waits forever. Writes that create ephemeral
/// nodes bind them to the session that is live when the write is applied; put
/// [`Check::Session`] in the transaction to make sure that is the session the caller means.
///
/// Only [`Registry::session`], [`Registry::get`], [`Registry::children`],
/// [`Registry::transact`], [`Registry::watch`] and [`Registry::close`] must be implemented; the
/// single-operation writes, [`Registry::get_tree`] and [`Registry::read_tree`] have default
/// implementations in terms of them, which a backend may replace with cheaper native calls (and,
/// for [`Registry::read_tree`], an atomic read that tells its revision).
#[async_trait]
pub trait Registry: Send + Sync {
    /// The live session, or `None` while there is none (connecting, or between an expiry and
    /// the next session). While the client is cut off (after [`SessionEvent::Suspended`]) it
    /// still reports the session it had: it cannot know whether the registry expired it
    /// meanwhile.
    fn session(&self) -> Option<SessionInfo>;

    /// Reads one node; `Ok(None)` if it does not exist.
    async fn get(&self, path: &NodePath) -> Result<Option<Node>, RegistryError>;

    /// The names of a node's children, sorted by their bytes (ascending).
    /// [`RegistryError::NoNode`] if the node does not exist.
    async fn children(&self, path: &NodePath) -> Result<Vec<String>, RegistryError>;

    /// Applies all operations or none. On failure the error is
    /// [`RegistryError::TxnAborted`] naming the first failing operation, unless the request did
    /// not reach a decision (a transient or session error).
    async fn transact(&self, ops: Vec<TxnOp>) -> Result<Vec<TxnOpResult>, RegistryError>;

    /// Starts a recursive watch of `root` and everything below it. Events of changes applied
    /// after this call returns are delivered in order; session events go to every watch.
    async fn watch(&self, root: &NodePath) -> Result<Box<dyn EventStream>, RegistryError>;

    /// Ends the session on purpose (its ephemeral nodes go at once) and stops the client.
    async fn close(&self) -> Result<(), RegistryError>;

    /// The most operations one transaction may hold, as the backend counts them (etcd counts
    /// compares and writes separately, each against its `--max-txn-ops`, and the tree
    /// emulation adds compares of its own), if the registry limits it; `None` (the default)
    /// if only the request size is limited (ZooKeeper). A hint: a driver sets
    /// [`MachineOptions::max_txn_items`](crate::machine::MachineOptions::max_txn_items) from
    /// it, and a transaction that is still too large fails with [`RegistryError::TooLarge`].
    fn max_txn_ops(&self) -> Option<usize> {
        None
    }

    /// Whether the registry stamps the nodes it writes with its own wall-clock time
    /// ([`Stat::mtime_ms`] in the answers to writes: ZooKeeper's `mtime`). `false` (the
    /// default) where it keeps none (etcd). A driver sets
    /// [`MachineOptions::registry_clock`](crate::machine::MachineOptions::registry_clock)
    /// from it.
    fn stamps_time(&self) -> bool {
        false
    }

    /// Creates one node.
    async fn create(
        &self,
        path: &NodePath,
        data: Vec<u8>,
        mode: CreateMode,
    ) -> Result<Stat, RegistryError> {
        let op = TxnOp::Create {
            path: path.clone(),
            data,
            mode,
        };
        match single(self.transact(vec![op]).await)? {
            TxnOpResult::Created(stat) => Ok(stat),
            other => Err(unexpected("create", other)),
        }
    }

    /// Replaces one node's data, if it has version `expected` when given.
    async fn set(
        &self,
        path: &NodePath,
        data: Vec<u8>,
        expected: Option<Version>,
    ) -> Result<Stat, RegistryError> {
        let op = TxnOp::Set {
            path: path.clone(),
            data,
            expected,
        };
        match single(self.transact(vec![op]).await)? {
            TxnOpResult::Set(stat) => Ok(stat),
            other => Err(unexpected("set", other)),
        }
    }

    /// Deletes one childless node, if it has version `expected` when given.
    async fn delete(
        &self,
        path: &NodePath,
        expected: Option<Version>,
    ) -> Result<(), RegistryError> {
        let op = TxnOp::Delete {
            path: path.clone(),
            expected,
        };
        match single(self.transact(vec![op]).await)? {
            TxnOpResult::Deleted => Ok(()),
            other => Err(unexpected("delete", other)),
        }
    }

    /// Reads `root` and every node below it, parents before children, siblings by name.
    /// Not atomic: nodes that vanish during the walk are skipped. Empty if `root` is missing.
    async fn get_tree(&self, root: &NodePath) -> Result<Vec<Node>, RegistryError> {
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(path) = stack.pop() {
            let Some(node) = self.get(&path).await? else {
                continue;
            };
            out.push(node);
            let names = match self.children(&path).await {
                Ok(names) => names,
                Err(RegistryError::NoNode(_)) => continue,
                Err(e) => return Err(e),
            };
            for name in names.iter().rev() {
                stack.push(path.join(name)?);
            }
        }
        Ok(out)
    }

    /// [`Registry::get_tree`] with the revision the read reflects, if the backend reads the
    /// subtree atomically and can tell it; the default says `None` (a walk of many reads has
    /// no one revision). A backend that overrides it should make [`Registry::get_tree`] its
    /// nodes.
    async fn read_tree(&self, root: &NodePath) -> Result<Tree, RegistryError> {
        Ok(Tree {
            nodes: self.get_tree(root).await?,
            revision: None,
        })
    }

    /// Deletes `root` and everything below it, children first. Not atomic: a node created
    /// concurrently may make it fail with [`RegistryError::NotEmpty`]; nodes already gone are
    /// fine. Succeeds if `root` does not exist.
    async fn delete_tree(&self, root: &NodePath) -> Result<(), RegistryError> {
        let nodes = self.get_tree(root).await?;
        for node in nodes.iter().rev() {
            match self.delete(&node.path, None).await {
                Ok(()) | Err(RegistryError::NoNode(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Creates `path` and any missing ancestors as empty persistent nodes; fine if they exist.
    async fn ensure_path(&self, path: &NodePath) -> Result<(), RegistryError> {
        let mut missing = Vec::new();
        let mut at = Some(path.clone());
        while let Some(p) = at {
            if p.is_root() || self.get(&p).await?.is_some() {
                break;
            }
            at = p.parent();
            missing.push(p);
        }
        for p in missing.iter().rev() {
            match self.create(p, Vec::new(), CreateMode::Persistent).await {
                Ok(_) | Err(RegistryError::NodeExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn single(result: Result<Vec<TxnOpResult>, RegistryError>) -> Result<TxnOpResult, RegistryError> {
    match result {
        Ok(mut results) if results.len() == 1 => Ok(results.remove(0)),
        Ok(results) => Err(RegistryError::Backend(format!(
            "one-operation transaction returned {} results",
            results.len()
        ))),
        // A one-operation transaction failing at its only operation is that operation's error.
        Err(RegistryError::TxnAborted { index: 0, cause }) => Err(*cause),
        Err(e) => Err(e),
    }
}

fn unexpected(what: &str, got: TxnOpResult) -> RegistryError {
    RegistryError::Backend(format!("{what} returned {got:?}"))
}

/// Identifies one request the core made, so the reply can be matched to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// A registry request in sans-IO form: what the core asks a driver to do.
///
/// Watches are not requests: a driver keeps one recursive watch per instance and feeds its
/// events to the core as they come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryOp {
    /// [`Registry::get`].
    Get(NodePath),
    /// [`Registry::children`].
    Children(NodePath),
    /// [`Registry::read_tree`].
    GetTree(NodePath),
    /// [`Registry::transact`].
    Transact(Vec<TxnOp>),
}

/// The answer to a [`RegistryOp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryReply {
    /// For [`RegistryOp::Get`].
    Node(Option<Node>),
    /// For [`RegistryOp::Children`].
    Children(Vec<String>),
    /// For [`RegistryOp::GetTree`]: the nodes, and the revision they were read at if the
    /// backend tells it ([`Registry::read_tree`]).
    Tree(Tree),
    /// For [`RegistryOp::Transact`].
    Transacted(Vec<TxnOpResult>),
    /// The request failed.
    Failed(RegistryError),
}

/// Runs one [`RegistryOp`] against a registry: the whole of a driver's request handling.
pub async fn execute<R: Registry + ?Sized>(registry: &R, op: RegistryOp) -> RegistryReply {
    let reply = match op {
        RegistryOp::Get(path) => registry.get(&path).await.map(RegistryReply::Node),
        RegistryOp::Children(path) => registry.children(&path).await.map(RegistryReply::Children),
        RegistryOp::GetTree(path) => registry.read_tree(&path).await.map(RegistryReply::Tree),
        RegistryOp::Transact(ops) => registry.transact(ops).await.map(RegistryReply::Transacted),
    };
    reply.unwrap_or_else(RegistryReply::Failed)
}
