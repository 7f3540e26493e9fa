//! Events a registry delivers: node changes under a watched path, and session state.

use async_trait::async_trait;

use super::{NodePath, Revision, SessionId, SessionInfo, Stat};

/// What happened to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEventKind {
    /// The node was created.
    Created,
    /// The node's data was replaced.
    Changed,
    /// The node was deleted.
    Deleted,
}

/// A change of one node under a watched path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchEventKind,
    /// The node.
    pub path: NodePath,
    /// The node's data after the change; empty for a deletion.
    pub data: Vec<u8>,
    /// The node's metadata after the change; `None` for a deletion.
    pub stat: Option<Stat>,
    /// The registry revision of the write that made the change (etcd's revision, the
    /// in-memory store's), for a deletion too; `None` if the backend cannot tell (ZooKeeper,
    /// whose watch events and reads on one session come in order anyway). Comparable with a
    /// [`Tree`](super::Tree)'s revision: an event at or below it is already in that snapshot.
    pub revision: Option<Revision>,
}

impl WatchEvent {
    /// Whether a snapshot read at `snapshot` (a [`Tree`](super::Tree)'s revision) holds this
    /// change already: the event's revision is at or below the snapshot's, so applying it on
    /// top of the snapshot would undo later changes (a deletion hiding a node created again
    /// since). Without both revisions it never is: such a backend delivers events and read
    /// replies in order (ZooKeeper).
    pub fn is_in(&self, snapshot: Option<Revision>) -> bool {
        matches!((self.revision, snapshot), (Some(r), Some(s)) if r <= s)
    }
}

/// A change of the client's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    /// A new session is established (the first one, or one after an expiry). Ephemeral nodes
    /// of any earlier session are gone or going; the consumer should re-create its own and
    /// reload its view of the tree, since events may have been missed in between.
    Connected(SessionInfo),
    /// The connection is lost; the session may still be alive on the registry and will expire
    /// after its timeout unless the client reconnects first. Writes fail or wait meanwhile.
    Suspended(SessionId),
    /// The connection is back within the session timeout; the session and its ephemeral nodes
    /// survived. Events may have been missed: the consumer should reload its view.
    Reconnected(SessionId),
    /// The session ended on the registry (or the client gave up on it); its ephemeral nodes are
    /// deleted. Whether the deletions of its own ephemeral nodes reach this watch depends on the
    /// backend (with ZooKeeper and the in-memory store they do not), so reload the view rather
    /// than wait for them. A backend that can, follows with [`SessionEvent::Connected`] for a
    /// new session.
    Expired(SessionId),
    /// The client was closed on purpose; no more events follow.
    Closed,
}

/// One item from an [`EventStream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryEvent {
    /// A node under the watched path changed.
    Node(WatchEvent),
    /// The session changed state.
    Session(SessionEvent),
}

/// The events of one recursive watch, in the order the registry applied the changes, with the
/// client's session events interleaved where they happened.
#[async_trait]
pub trait EventStream: Send {
    /// The next event; `None` once the registry client is closed.
    async fn next(&mut self) -> Option<RegistryEvent>;
}
