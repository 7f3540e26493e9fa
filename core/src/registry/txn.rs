//! Atomic multi-operation transactions.

use super::{CreateMode, NodePath, SessionId, Stat, Version};

/// A condition a transaction checks before it applies anything.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Check {
    /// The node exists.
    Exists(NodePath),
    /// The node does not exist.
    Absent(NodePath),
    /// The node exists and has this version.
    Version(NodePath, Version),
    /// The node exists and holds exactly this data.
    Value(NodePath, Vec<u8>),
    /// The transaction runs in this session, which is still alive. Guards ephemeral nodes
    /// against being created in a newer session than the caller meant.
    Session(SessionId),
}

impl Check {
    /// The path the check is about, if any.
    pub fn path(&self) -> Option<&NodePath> {
        match self {
            Check::Exists(p) | Check::Absent(p) | Check::Version(p, _) | Check::Value(p, _) => {
                Some(p)
            }
            Check::Session(_) => None,
        }
    }
}

/// One operation of a transaction. A transaction applies all of its operations or none.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TxnOp {
    /// Fails the whole transaction unless the condition holds.
    Check(Check),
    /// Creates a node. Its parent must exist (and be persistent); the node must not.
    Create {
        /// The new node.
        path: NodePath,
        /// Its data.
        data: Vec<u8>,
        /// Persistent or bound to the caller's session.
        mode: CreateMode,
    },
    /// Replaces a node's data.
    Set {
        /// The node, which must exist.
        path: NodePath,
        /// The new data.
        data: Vec<u8>,
        /// If given, the node must have this version.
        expected: Option<Version>,
    },
    /// Deletes a node, which must exist and have no children.
    Delete {
        /// The node.
        path: NodePath,
        /// If given, the node must have this version.
        expected: Option<Version>,
    },
}

impl TxnOp {
    /// A persistent create.
    pub fn create(path: NodePath, data: impl Into<Vec<u8>>) -> Self {
        TxnOp::Create {
            path,
            data: data.into(),
            mode: CreateMode::Persistent,
        }
    }

    /// An ephemeral create, bound to the caller's session.
    pub fn create_ephemeral(path: NodePath, data: impl Into<Vec<u8>>) -> Self {
        TxnOp::Create {
            path,
            data: data.into(),
            mode: CreateMode::Ephemeral,
        }
    }

    /// An unconditional set.
    pub fn set(path: NodePath, data: impl Into<Vec<u8>>) -> Self {
        TxnOp::Set {
            path,
            data: data.into(),
            expected: None,
        }
    }

    /// An unconditional delete.
    pub fn delete(path: NodePath) -> Self {
        TxnOp::Delete {
            path,
            expected: None,
        }
    }

    /// The path the operation touches, if any.
    pub fn path(&self) -> Option<&NodePath> {
        match self {
            TxnOp::Check(c) => c.path(),
            TxnOp::Create { path, .. } | TxnOp::Set { path, .. } | TxnOp::Delete { path, .. } => {
                Some(path)
            }
        }
    }
}

/// What one operation of a committed transaction produced, in the order of the operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOpResult {
    /// A check held.
    Checked,
    /// A node was created with this metadata.
    Created(Stat),
    /// A node's data was replaced; this is its new metadata.
    Set(Stat),
    /// A node was deleted.
    Deleted,
}
