//! Registry errors and their classification.

use super::path::PathError;
use super::{NodePath, SessionId, Version};

/// How a caller should react to a [`RegistryError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The registry could not be reached or answered too late; the same request may succeed
    /// later. Whether a write took effect is unknown: re-read before retrying.
    Transient,
    /// The registry is reachable but the state is not what the request assumed (a node exists,
    /// is missing, has another version or value). Re-read and decide again.
    Conflict,
    /// The session the request was made for is gone: ephemeral nodes and anything owned through
    /// them are lost. Stop what depends on them.
    LostSession,
    /// A bad request or configuration (path, permissions, size); retrying will not help.
    Fatal,
}

/// An error from a registry operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The node does not exist (or its parent, for a create).
    #[error("no node at {0}")]
    NoNode(NodePath),
    /// The node already exists.
    #[error("node {0} already exists")]
    NodeExists(NodePath),
    /// The node exists but does not have the expected version.
    #[error("node {path} does not have version {expected:?}")]
    BadVersion {
        /// The node.
        path: NodePath,
        /// The version the request expected.
        expected: Version,
    },
    /// The node does not hold the expected value.
    #[error("node {0} does not hold the expected value")]
    ValueMismatch(NodePath),
    /// The node has children and cannot be deleted.
    #[error("node {0} has children")]
    NotEmpty(NodePath),
    /// An ephemeral node cannot have children.
    #[error("node {0} is ephemeral and cannot have children")]
    NoChildrenForEphemerals(NodePath),
    /// A transaction was not applied because one of its operations failed.
    #[error("transaction aborted at operation {index}: {cause}")]
    TxnAborted {
        /// The position of the failed operation in the transaction.
        index: usize,
        /// Why it failed.
        cause: Box<RegistryError>,
    },
    /// The request was made for a session that is no longer the client's live session.
    #[error(
        "session {expected} is not the live session ({})",
        live_session(actual)
    )]
    SessionMismatch {
        /// The session the request named.
        expected: SessionId,
        /// The client's live session, if it has one.
        actual: Option<SessionId>,
    },
    /// The session has expired.
    #[error("session expired")]
    SessionExpired,
    /// The client has no connection to the registry at the moment.
    #[error("not connected to the registry")]
    ConnectionLoss,
    /// The request took longer than its deadline.
    #[error("registry request timed out")]
    Timeout,
    /// The client was closed.
    #[error("registry client is closed")]
    Closed,
    /// The registry refused the credentials or the node's ACL forbids the request.
    #[error("not authorized: {0}")]
    NotAuthorized(String),
    /// A path built from input is not a valid registry path.
    #[error(transparent)]
    InvalidPath(#[from] PathError),
    /// The request is too large for the registry (ZooKeeper's `jute.maxbuffer`, etcd's
    /// `--max-request-bytes` or `--max-txn-ops`).
    #[error("request too large: {0}")]
    TooLarge(String),
    /// Any other error reported by a backend, with its message.
    #[error("registry backend error: {0}")]
    Backend(String),
}

impl RegistryError {
    /// How a caller should react to this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            RegistryError::NoNode(_)
            | RegistryError::NodeExists(_)
            | RegistryError::BadVersion { .. }
            | RegistryError::ValueMismatch(_)
            | RegistryError::NotEmpty(_) => ErrorClass::Conflict,
            RegistryError::TxnAborted { cause, .. } => cause.class(),
            RegistryError::SessionMismatch { .. } | RegistryError::SessionExpired => {
                ErrorClass::LostSession
            }
            RegistryError::ConnectionLoss | RegistryError::Timeout | RegistryError::Backend(_) => {
                ErrorClass::Transient
            }
            RegistryError::NoChildrenForEphemerals(_)
            | RegistryError::Closed
            | RegistryError::NotAuthorized(_)
            | RegistryError::InvalidPath(_)
            | RegistryError::TooLarge(_) => ErrorClass::Fatal,
        }
    }

    /// The error behind a transaction abort, or the error itself.
    pub fn root_cause(&self) -> &RegistryError {
        match self {
            RegistryError::TxnAborted { cause, .. } => cause.root_cause(),
            other => other,
        }
    }
}

/// The client's live session in words, for [`RegistryError::SessionMismatch`].
fn live_session(actual: &Option<SessionId>) -> String {
    match actual {
        Some(s) => format!("the live one is {s}"),
        None => "the client has none now".to_owned(),
    }
}
