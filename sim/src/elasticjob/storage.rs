//! ElasticJob's `JobNodeStorage` over the simulated registry: each call one or more requests,
//! in the order ElasticJob's ZooKeeper registry center makes them, with its error handling
//! (`RegExceptionHandler` swallows "no node", "node exists" and a lost connection: the write is
//! silently dropped).

use shardjob_core::registry::{
    CreateMode, NodePath, RegistryError, RegistryOp, RegistryReply, TxnOp, TxnOpResult,
};

use super::jvm::Jvm;
use super::view::Snap;

/// A job's node path.
pub(crate) fn path(job: &str, rel: &str) -> Option<NodePath> {
    if rel.is_empty() {
        NodePath::new(format!("/{job}")).ok()
    } else {
        NodePath::new(format!("/{job}/{rel}")).ok()
    }
}

/// The revision a write's reply reports (the creation or the new data), if it applied.
fn written(reply: &RegistryReply) -> Option<u64> {
    match reply {
        RegistryReply::Transacted(results) => results.iter().rev().find_map(|r| match r {
            TxnOpResult::Created(stat) | TxnOpResult::Set(stat) => Some(stat.modified.0),
            _ => None,
        }),
        _ => None,
    }
}

/// Whether a reply failed because a node had children.
fn not_empty(reply: &RegistryReply) -> bool {
    match reply {
        RegistryReply::Failed(RegistryError::NotEmpty(_)) => true,
        RegistryReply::Failed(RegistryError::TxnAborted { cause, .. }) => {
            matches!(**cause, RegistryError::NotEmpty(_))
        }
        _ => false,
    }
}

/// Whether a reply failed because a node was missing.
fn no_node(reply: &RegistryReply) -> bool {
    match reply {
        RegistryReply::Failed(RegistryError::NoNode(_)) => true,
        RegistryReply::Failed(RegistryError::TxnAborted { cause, .. }) => {
            matches!(**cause, RegistryError::NoNode(_))
        }
        _ => false,
    }
}

impl Jvm {
    /// One direct read of the job's subtree (an empty snapshot if it fails).
    pub(crate) async fn read(&self, job: &str) -> Snap {
        self.read_under(job, "").await
    }

    /// One direct read of a subtree of the job.
    pub(crate) async fn read_under(&self, job: &str, rel: &str) -> Snap {
        let Some(p) = path(job, rel) else {
            return Snap::default();
        };
        match self.call(RegistryOp::GetTree(p)).await {
            RegistryReply::Tree(tree) => Snap::new(job, &tree.nodes),
            _ => Snap::default(),
        }
    }

    /// `isExisted`: a direct check (a failure reads as absent).
    pub(crate) async fn exists(&self, job: &str, rel: &str) -> bool {
        self.get_directly(job, rel).await.is_some()
    }

    /// `getDirectly`: the node's data from the registry.
    pub(crate) async fn get_directly(&self, job: &str, rel: &str) -> Option<String> {
        let p = path(job, rel)?;
        match self.call(RegistryOp::Get(p)).await {
            RegistryReply::Node(Some(node)) => {
                Some(String::from_utf8_lossy(&node.data).into_owned())
            }
            _ => None,
        }
    }

    /// `get`: the node's data from the cache, read directly if the cache does not hold it.
    pub(crate) async fn cached(&self, job: &str, rel: &str) -> Option<String> {
        if let Some(v) = self
            .job(job, |j| j.cache.get(rel).map(str::to_owned))
            .flatten()
        {
            return Some(v);
        }
        self.get_directly(job, rel).await
    }

    /// Creates a node and, as Curator's `creatingParentsIfNeeded`, its missing parents
    /// (persistent, empty). Returns the reply to the node's creation.
    async fn create_with_parents(
        &self,
        job: &str,
        rel: &str,
        value: &str,
        mode: CreateMode,
    ) -> RegistryReply {
        let Some(p) = path(job, rel) else {
            return RegistryReply::Failed(RegistryError::ConnectionLoss);
        };
        let create = |p: NodePath, value: &str, mode| {
            RegistryOp::Transact(vec![TxnOp::Create {
                path: p,
                data: value.as_bytes().to_vec(),
                mode,
            }])
        };
        let reply = self.call(create(p.clone(), value, mode)).await;
        if !no_node(&reply) {
            return reply;
        }
        // The parents, top down (one that exists already refuses, which is fine).
        let mut parents = Vec::new();
        let mut at = p.parent();
        while let Some(parent) = at {
            if parent.is_root() {
                break;
            }
            at = parent.parent();
            parents.push(parent);
        }
        for parent in parents.into_iter().rev() {
            self.call(create(parent, "", CreateMode::Persistent)).await;
        }
        self.call(create(p, value, mode)).await
    }

    /// `persist`: creates the node (and its parents) if it does not exist, else replaces its
    /// data. Returns the revision of the write, if it applied.
    pub(crate) async fn persist(&self, job: &str, rel: &str, value: &str) -> Option<u64> {
        if self.exists(job, rel).await {
            let p = path(job, rel)?;
            let reply = self
                .call(RegistryOp::Transact(vec![
                    TxnOp::Check(shardjob_core::registry::Check::Exists(p.clone())),
                    TxnOp::set(p, value.as_bytes().to_vec()),
                ]))
                .await;
            written(&reply)
        } else {
            let reply = self
                .create_with_parents(job, rel, value, CreateMode::Persistent)
                .await;
            written(&reply)
        }
    }

    /// `persistEphemeral`: deletes the node if it exists, then creates it bound to the
    /// session (parents persistent). Returns the revision of the creation, if it applied.
    pub(crate) async fn persist_ephemeral(&self, job: &str, rel: &str, value: &str) -> Option<u64> {
        if self.exists(job, rel).await {
            self.remove(job, rel).await;
        }
        let reply = self
            .create_with_parents(job, rel, value, CreateMode::Ephemeral)
            .await;
        written(&reply)
    }

    /// `createJobNodeIfNeeded`: if the job's root exists and the node does not, `persist`s
    /// it empty.
    pub(crate) async fn create_if_needed(&self, job: &str, rel: &str) -> Option<u64> {
        if self.exists(job, "").await && !self.exists(job, rel).await {
            return self.persist(job, rel, "").await;
        }
        None
    }

    /// `removeJobNodeIfExisted`: a direct check, then the removal (children too). Returns
    /// whether the removal applied.
    pub(crate) async fn remove_if_exists(&self, job: &str, rel: &str) -> bool {
        self.remove_if_exists_ending(job, rel, Vec::new()).await
    }

    /// [`Jvm::remove_if_exists`] of a node whose removal commits the end of runs.
    pub(crate) async fn remove_if_exists_ending(
        &self,
        job: &str,
        rel: &str,
        ends: Vec<(u64, u32)>,
    ) -> bool {
        if !self.exists(job, rel).await {
            return false;
        }
        self.remove_ending(job, rel, ends).await
    }

    /// `remove`: deletes the node and everything below it.
    pub(crate) async fn remove(&self, job: &str, rel: &str) -> bool {
        self.remove_ending(job, rel, Vec::new()).await
    }

    async fn remove_ending(&self, job: &str, rel: &str, ends: Vec<(u64, u32)>) -> bool {
        let Some(p) = path(job, rel) else {
            return false;
        };
        // Curator's `deletingChildrenIfNeeded`: a node with children has them deleted first
        // (rare here: a surplus `sharding/{i}`; one transaction, deepest first).
        let reply = self
            .call_ending(
                RegistryOp::Transact(vec![TxnOp::delete(p.clone())]),
                ends.clone(),
            )
            .await;
        if !not_empty(&reply) {
            return matches!(reply, RegistryReply::Transacted(_));
        }
        let below = match self.call(RegistryOp::GetTree(p)).await {
            RegistryReply::Tree(tree) => tree.nodes,
            _ => return false,
        };
        let ops: Vec<TxnOp> = below
            .iter()
            .rev()
            .map(|n| TxnOp::delete(n.path.clone()))
            .collect();
        matches!(
            self.call_ending(RegistryOp::Transact(ops), ends).await,
            RegistryReply::Transacted(_)
        )
    }
}
