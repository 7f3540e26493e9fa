//! Node metadata: versions, revisions, sessions, stats.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::NodePath;

/// The version of one node's data, as the backend defines it (ZooKeeper's data version, etcd's
/// modification revision, a counter in the in-memory store).
///
/// Opaque: compare two versions of the same node for equality, and pass one back in a
/// [`Check::Version`](super::Check::Version) or a conditional set/delete. Do not do arithmetic
/// on it or compare versions of different nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Version(pub i64);

/// A registry-wide modification stamp that only grows: ZooKeeper's zxid, etcd's revision.
///
/// Unlike [`Version`], revisions of different nodes are comparable, and a node deleted and
/// created again gets a higher revision. This is what fencing tokens are made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Revision(pub u64);

/// The id of one registry session (a ZooKeeper session, an etcd lease, an in-memory session).
///
/// Ephemeral nodes belong to the session that created them and vanish when it ends. A client
/// that loses its session gets a new one with a different id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(pub u64);

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({:#x})", self.0)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A session as the client sees it once it is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session's id.
    pub id: SessionId,
    /// The timeout the registry granted (ZooKeeper's negotiated timeout, the etcd lease TTL):
    /// after this long without contact the registry ends the session and deletes its
    /// ephemeral nodes.
    pub timeout: Duration,
}

/// How a node lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CreateMode {
    /// Stays until deleted.
    Persistent,
    /// Deleted by the registry when the creating session ends. Cannot have children.
    Ephemeral,
}

/// Metadata of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stat {
    /// The data version, for conditional writes.
    pub version: Version,
    /// The revision at which the node was created.
    pub created: Revision,
    /// The revision of the node's last change (its creation if never changed).
    pub modified: Revision,
    /// The owning session of an ephemeral node; `None` for a persistent node.
    pub ephemeral_owner: Option<SessionId>,
    /// The registry's own wall-clock time of the node's last change, epoch milliseconds
    /// (ZooKeeper's `mtime`, set by its leader when it commits the change). `None` where the
    /// backend keeps no such time (etcd) or leaves it out of an answer (ZooKeeper 3.8's
    /// answers to the creations of a multi, ZOOKEEPER-4026). The machine compares it with
    /// its own clock around a write to know how far its clock is off the registry's.
    pub mtime_ms: Option<i64>,
}

/// A node with its data and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Where the node is.
    pub path: NodePath,
    /// The node's data (ElasticJob nodes hold UTF-8 text, often empty).
    pub data: Vec<u8>,
    /// The node's metadata.
    pub stat: Stat,
}

impl Node {
    /// The data as UTF-8 text, or `None` if it is not valid UTF-8.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.data).ok()
    }
}

/// A subtree read at once: what [`Registry::read_tree`](super::Registry::read_tree) returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tree {
    /// The nodes, parents before children, siblings by name.
    pub nodes: Vec<Node>,
    /// The registry revision the whole read reflects, if the read was atomic and the backend
    /// tells it (etcd's header revision, the in-memory store's); `None` otherwise (ZooKeeper,
    /// whose tree read is a walk of many reads). Every change at or below it is in `nodes`,
    /// none above it is: a [`WatchEvent`](super::WatchEvent) whose revision is at or below it
    /// is stale for this snapshot.
    pub revision: Option<Revision>,
}
