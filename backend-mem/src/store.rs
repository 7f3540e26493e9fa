//! The synchronous, deterministic registry store behind [`MemServer`](crate::MemServer) and the
//! simulator.
//!
//! A [`Store`] is plain data: a tree of versioned nodes, sessions and recursive watches. It reads
//! no clock, starts no thread and draws no random number; every operation where time matters
//! takes `now`, the time since the store's epoch, and the store only ever moves its own notion of
//! time forward (an earlier `now` than one seen before counts as the later one). Iteration order
//! is `BTreeMap` order everywhere, so the same calls give the same results, ids and events.
//!
//! # Semantics
//!
//! * **Revisions.** The store keeps one global [`Revision`] counter, starting at 0 (the root's
//!   revision). Every committed transaction that writes something takes the next revision, and
//!   all its writes carry it (like etcd); a transaction of checks only takes none. The deletion
//!   of a session's ephemeral nodes when it ends is one write of its own.
//! * **Versions.** A node's data [`Version`] is 0 when it is created and grows by 1 with every
//!   set.
//! * **Transactions** apply in order, each operation seeing the effects of the ones before it,
//!   and are all-or-nothing: the first failing operation gives
//!   [`RegistryError::TxnAborted`] with its index and cause, and nothing is changed (no
//!   revision, no event).
//! * **Sessions** are numbered 1, 2, 3… A session is alive, expired or closed
//!   ([`SessionStatus`]); independently its client is connected, suspended (cut off by a
//!   partition) or killed (crashed) ([`Link`]). Requests from a cut-off or killed client fail with
//!   [`RegistryError::ConnectionLoss`], from an expired session with
//!   [`RegistryError::SessionExpired`], from a closed one with [`RegistryError::Closed`]. A
//!   connected client heartbeats, so its session never expires by itself; a suspended session
//!   expires once `now >= since + timeout`, a killed one once `now >= last_contact + timeout`.
//!   Expiries are processed lazily by [`Store::advance_to`], which every operation calls first,
//!   in session-id order.
//! * **Watches** are recursive and belong to a session. Each has a FIFO queue; node events of a
//!   commit go to every watch whose root contains the node, session events only to the watches
//!   of that session. [`Store::take_events`] returns the deliverable prefix of the queue: nothing
//!   while the watch is held or before its `not_before` time, and events one by one while their
//!   own delivery time (commit time plus the watch's latency) has come, so the order is always
//!   kept.
//! * **Suspension** queues: the watch gets [`SessionEvent::Suspended`] at once (the client
//!   notices its own disconnection), node events committed meanwhile are parked, and on
//!   [`Store::resume`] it gets [`SessionEvent::Reconnected`] followed by the parked events in
//!   commit order, like a reconnecting ZooKeeper client. If the session expires while suspended,
//!   the parked events are dropped and the client learns [`SessionEvent::Expired`] when it is
//!   resumed.
//! * **Session end.** An expired session's watches get [`SessionEvent::Expired`] and then no
//!   node events (not even the deletion of the session's own ephemeral nodes, as in ZooKeeper)
//!   until [`Store::reconnect`] moves them to a new session and queues
//!   [`SessionEvent::Connected`]. A closed session's watches get [`SessionEvent::Closed`] and
//!   end. A killed client's watches end at once with nothing more (the process is gone).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::time::Duration;

use shardjob_core::registry::{
    Check, CreateMode, Node, NodePath, RegistryError, RegistryEvent, Revision, SessionEvent,
    SessionId, SessionInfo, Stat, Tree, TxnOp, TxnOpResult, Version, WatchEvent, WatchEventKind,
};

/// Identifies one watch in a [`Store`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WatchId(pub u64);

/// The registry side of a session: whether it still exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionStatus {
    /// The session exists; its ephemeral nodes are there.
    Alive,
    /// The session timed out or was expired by a hook; its ephemeral nodes are gone.
    Expired,
    /// The client closed the session; its ephemeral nodes are gone.
    Closed,
}

/// The client side of a session: whether its client can reach the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// The client is connected and heartbeating.
    Connected,
    /// The client is cut off (a partition) since this time; it may come back.
    Suspended {
        /// When the client lost contact.
        since: Duration,
    },
    /// The client is gone for good (crashed); the session lingers until it times out.
    Killed {
        /// When the store last heard from the client.
        last_contact: Duration,
    },
}

/// A snapshot of one session, for tests, hooks and checkers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    /// Id and timeout.
    pub info: SessionInfo,
    /// Whether the session still exists.
    pub status: SessionStatus,
    /// Whether its client is connected.
    pub link: Link,
    /// The ephemeral nodes it owns, in path order.
    pub ephemerals: Vec<NodePath>,
    /// Its watches, in id order.
    pub watches: Vec<WatchId>,
    /// The session its client got after this one expired, if [`Store::reconnect`] renewed it.
    pub replaced_by: Option<SessionId>,
    /// The revision of the write that deleted its ephemeral nodes when it ended; `None` while
    /// it lives, or if it owned none then.
    pub ended_at: Option<Revision>,
}

impl SessionView {
    /// When the session will expire if nothing changes: `None` while it is connected or ended.
    pub fn deadline(&self) -> Option<Duration> {
        deadline(self.status, self.link, self.info.timeout)
    }
}

fn deadline(status: SessionStatus, link: Link, timeout: Duration) -> Option<Duration> {
    match (status, link) {
        (SessionStatus::Alive, Link::Suspended { since }) => since.checked_add(timeout),
        (SessionStatus::Alive, Link::Killed { last_contact }) => last_contact.checked_add(timeout),
        _ => None,
    }
}

/// One node. Kept small, since a store holds every node of every job: the path is the map's
/// key, children are found by ranging over the paths that follow it (a parent sorts before its
/// children), and the metadata is packed.
#[derive(Debug, Clone)]
struct NodeEntry {
    data: Box<[u8]>,
    version: i64,
    created: u64,
    modified: u64,
    /// The store's wall-clock time of the last change, if it keeps one
    /// ([`Store::set_wall_origin`]).
    mtime: Option<i64>,
    /// The owning session's id for an ephemeral node, 0 for a persistent one (ids start at 1).
    owner: u64,
    /// How many children the node has.
    children: u32,
}

impl NodeEntry {
    fn new(data: Box<[u8]>, stat: Stat) -> Self {
        Self {
            data,
            version: stat.version.0,
            created: stat.created.0,
            modified: stat.modified.0,
            mtime: stat.mtime_ms,
            owner: stat.ephemeral_owner.map_or(0, |s| s.0),
            children: 0,
        }
    }

    fn stat(&self) -> Stat {
        Stat {
            version: Version(self.version),
            created: Revision(self.created),
            modified: Revision(self.modified),
            ephemeral_owner: self.owner(),
            mtime_ms: self.mtime,
        }
    }

    fn owner(&self) -> Option<SessionId> {
        (self.owner != 0).then_some(SessionId(self.owner))
    }

    fn node(&self, path: NodePath) -> Node {
        Node {
            path,
            data: self.data.to_vec(),
            stat: self.stat(),
        }
    }
}

#[derive(Debug)]
struct SessionEntry {
    timeout: Duration,
    status: SessionStatus,
    link: Link,
    ephemerals: BTreeSet<NodePath>,
    watches: BTreeSet<WatchId>,
    /// The session its client got after this one expired ([`Store::reconnect`]).
    replaced_by: Option<SessionId>,
    /// The revision of the write that deleted its ephemeral nodes when it ended.
    ended_at: Option<Revision>,
}

#[derive(Debug)]
struct Queued {
    at: Duration,
    event: RegistryEvent,
}

#[derive(Debug)]
struct WatchEntry {
    session: SessionId,
    root: NodePath,
    queue: VecDeque<Queued>,
    parked: Vec<RegistryEvent>,
    held: bool,
    not_before: Duration,
    latency: Duration,
    ended: bool,
}

impl WatchEntry {
    fn push(&mut self, now: Duration, event: RegistryEvent) {
        if !self.ended {
            let at = now.saturating_add(self.latency);
            self.queue.push_back(Queued { at, event });
        }
    }

    /// Where a node event at `path` goes: `Some(false)` to the queue (the session is alive and
    /// connected), `Some(true)` to the parked events (alive, suspended), `None` nowhere.
    fn route(&self, sessions: &BTreeMap<SessionId, SessionEntry>, path: &NodePath) -> Option<bool> {
        if self.ended || !self.root.contains(path) {
            return None;
        }
        match sessions.get(&self.session).map(|s| (s.status, s.link)) {
            Some((SessionStatus::Alive, Link::Connected)) => Some(false),
            Some((SessionStatus::Alive, Link::Suspended { .. })) => Some(true),
            _ => None,
        }
    }

    /// Queues a node event, or parks it while the session is suspended.
    fn deliver(&mut self, now: Duration, event: RegistryEvent, parked: bool) {
        if parked {
            self.parked.push(event);
        } else {
            self.push(now, event);
        }
    }

    /// When the front of the queue becomes deliverable (ignoring `held`).
    fn front_time(&self) -> Option<Duration> {
        self.queue.front().map(|q| q.at.max(self.not_before))
    }

    fn end(&mut self) {
        self.ended = true;
        self.parked.clear();
        self.held = false;
        self.not_before = Duration::ZERO;
    }
}

enum Undo {
    Created(NodePath),
    Set(NodePath, Box<[u8]>, Stat),
    Deleted(NodePath, NodeEntry),
}

/// The in-memory registry: nodes, sessions and watches, driven by explicit time.
///
/// See the [module documentation](self) for the semantics. Requests take the calling session and
/// `now`; hooks ([`Store::suspend`], [`Store::resume`], [`Store::kill`],
/// [`Store::expire_session`], [`Store::hold_watch`], [`Store::delay_watch`],
/// [`Store::set_watch_latency`]) inject faults.
#[derive(Debug)]
pub struct Store {
    nodes: BTreeMap<NodePath, NodeEntry>,
    revision: u64,
    sessions: BTreeMap<SessionId, SessionEntry>,
    /// The sessions that have a deadline (alive, client not connected), so that time steps
    /// look at those only: a store keeps every session it ever opened.
    timed: BTreeSet<SessionId>,
    next_session: u64,
    watches: BTreeMap<WatchId, WatchEntry>,
    next_watch: u64,
    /// Grows whenever any watch may have something new to deliver: an event queued or
    /// parked, a hold, delay or latency changed, a watch made, ended or removed (see
    /// [`Store::watch_changes`]).
    watch_changes: u64,
    now: Duration,
    /// The wall-clock time (epoch ms) at time zero, if the store keeps modification times.
    wall_origin: Option<i64>,
    max_txn_ops: Option<usize>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// An empty store: only the root `/` (empty data, version 0, revision 0), no session, time 0.
    pub fn new() -> Self {
        let root = NodeEntry::new(
            Box::default(),
            Stat {
                version: Version(0),
                created: Revision(0),
                modified: Revision(0),
                ephemeral_owner: None,
                mtime_ms: None,
            },
        );
        Self {
            nodes: BTreeMap::from([(NodePath::root(), root)]),
            revision: 0,
            sessions: BTreeMap::new(),
            timed: BTreeSet::new(),
            next_session: 1,
            watches: BTreeMap::new(),
            next_watch: 1,
            watch_changes: 0,
            now: Duration::ZERO,
            wall_origin: None,
            max_txn_ops: None,
        }
    }

    // ----------------------------------------------------------------------------------------
    // Time
    // ----------------------------------------------------------------------------------------

    /// The latest time the store has seen.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Makes the store keep a wall-clock modification time on every node it creates or changes
    /// from now on, as ZooKeeper's `mtime`: `origin_ms` (epoch ms) plus the store's time
    /// ([`Stat::mtime_ms`]). `None` (the default) keeps none, as etcd.
    pub fn set_wall_origin(&mut self, origin_ms: Option<i64>) {
        self.wall_origin = origin_ms;
    }

    /// The wall-clock origin set with [`Store::set_wall_origin`].
    pub fn wall_origin(&self) -> Option<i64> {
        self.wall_origin
    }

    /// The store's wall-clock time now, if it keeps one.
    fn wall_ms(&self) -> Option<i64> {
        let now = i64::try_from(self.now.as_millis()).unwrap_or(i64::MAX);
        self.wall_origin.map(|o| o.saturating_add(now))
    }

    /// Moves time forward to `now` and expires, in session-id order, every session whose
    /// deadline has come. Returns the sessions it expired. Every other operation calls this
    /// first.
    pub fn advance_to(&mut self, now: Duration) -> Vec<SessionId> {
        self.now = self.now.max(now);
        if self.timed.is_empty() {
            // The common case, and this is called before every operation.
            return Vec::new();
        }
        let due: Vec<SessionId> = self
            .timed
            .iter()
            .filter(|id| {
                self.sessions.get(id).is_some_and(|s| {
                    deadline(s.status, s.link, s.timeout).is_some_and(|d| d <= self.now)
                })
            })
            .copied()
            .collect();
        for id in &due {
            self.expire_now(*id);
        }
        due
    }

    /// The earliest future time at which something happens by itself: a session expires or a
    /// delayed event becomes deliverable. `None` if nothing is pending on time.
    pub fn next_deadline(&self) -> Option<Duration> {
        let sessions = self
            .timed
            .iter()
            .filter_map(|id| self.sessions.get(id))
            .filter_map(|s| deadline(s.status, s.link, s.timeout));
        let watches = self
            .watches
            .values()
            .filter(|w| !w.held)
            .filter_map(WatchEntry::front_time);
        sessions.chain(watches).filter(|t| *t > self.now).min()
    }

    // ----------------------------------------------------------------------------------------
    // Sessions
    // ----------------------------------------------------------------------------------------

    /// Opens a new connected session with the given timeout.
    pub fn open_session(&mut self, timeout: Duration, now: Duration) -> SessionInfo {
        self.advance_to(now);
        let id = SessionId(self.next_session);
        self.next_session += 1;
        self.sessions.insert(
            id,
            SessionEntry {
                timeout,
                status: SessionStatus::Alive,
                link: Link::Connected,
                ephemerals: BTreeSet::new(),
                watches: BTreeSet::new(),
                replaced_by: None,
                ended_at: None,
            },
        );
        SessionInfo { id, timeout }
    }

    /// Closes a session on the client's request: its ephemeral nodes are deleted at once, its
    /// watches get [`SessionEvent::Closed`] and end.
    ///
    /// A client that is cut off cannot reach the store: it stops (its watches get `Closed` and
    /// end) but the session lingers like a killed one and expires `timeout` after the
    /// suspension began. Closing a session that already expired just ends its watches. Fails with
    /// [`RegistryError::Closed`] if the session was closed before or its client was killed.
    pub fn close_session(&mut self, id: SessionId, now: Duration) -> Result<(), RegistryError> {
        self.watch_changes += 1;
        self.advance_to(now);
        let Some(s) = self.sessions.get_mut(&id) else {
            return Err(RegistryError::Closed);
        };
        if s.status == SessionStatus::Closed || matches!(s.link, Link::Killed { .. }) {
            return Err(RegistryError::Closed);
        }
        if let Link::Suspended { since } = s.link {
            s.link = Link::Killed {
                last_contact: since,
            };
        }
        let (alive, connected) = (s.status == SessionStatus::Alive, s.link == Link::Connected);
        let watch_ids: Vec<WatchId> = s.watches.iter().copied().collect();
        for wid in watch_ids {
            if let Some(w) = self.watches.get_mut(&wid) {
                w.parked.clear();
                w.push(self.now, RegistryEvent::Session(SessionEvent::Closed));
                w.end();
            }
        }
        if alive && connected {
            self.end_session(id, SessionStatus::Closed);
        }
        self.retime(id);
        self.debug_check();
        Ok(())
    }

    /// Expires a session now (a hook): its ephemeral nodes are deleted and its watches get
    /// [`SessionEvent::Expired`] (at once if its client is connected, on [`Store::resume`] if it
    /// is suspended). Returns whether the session was alive.
    pub fn expire_session(&mut self, id: SessionId, now: Duration) -> bool {
        self.advance_to(now);
        let expired = self.expire_now(id);
        self.debug_check();
        expired
    }

    /// Cuts the session's client off (a partition hook): its requests fail with
    /// [`RegistryError::ConnectionLoss`], its watches get [`SessionEvent::Suspended`] and park
    /// node events, and the session expires at `now + timeout` unless [`Store::resume`]d first.
    /// Returns whether anything changed (the session was alive and connected).
    pub fn suspend(&mut self, id: SessionId, now: Duration) -> bool {
        self.advance_to(now);
        let Some(s) = self.sessions.get_mut(&id) else {
            return false;
        };
        if s.status != SessionStatus::Alive || s.link != Link::Connected {
            return false;
        }
        s.link = Link::Suspended { since: self.now };
        self.retime(id);
        self.push_session_event(id, SessionEvent::Suspended(id));
        true
    }

    /// Reconnects a suspended client (a hook). If the session is still alive its watches get
    /// [`SessionEvent::Reconnected`] and then the node events parked meanwhile, in order; if it
    /// expired meanwhile they get [`SessionEvent::Expired`]. Returns whether the client was
    /// suspended.
    pub fn resume(&mut self, id: SessionId, now: Duration) -> bool {
        self.watch_changes += 1;
        self.advance_to(now);
        let Some(s) = self.sessions.get_mut(&id) else {
            return false;
        };
        if !matches!(s.link, Link::Suspended { .. }) {
            return false;
        }
        s.link = Link::Connected;
        let alive = s.status == SessionStatus::Alive;
        let watch_ids: Vec<WatchId> = s.watches.iter().copied().collect();
        for wid in watch_ids {
            if let Some(w) = self.watches.get_mut(&wid) {
                if alive {
                    w.push(
                        self.now,
                        RegistryEvent::Session(SessionEvent::Reconnected(id)),
                    );
                }
                for event in std::mem::take(&mut w.parked) {
                    w.push(self.now, event);
                }
            }
        }
        self.retime(id);
        true
    }

    /// Models a registry restart at `now`: like ZooKeeper restoring sessions from its log, every
    /// session that is not connected (cut off or killed) counts its timeout from now again, so
    /// a dead client's ephemeral nodes stay visible for one more timeout. Returns how many
    /// sessions were extended.
    pub fn restart_sessions(&mut self, now: Duration) -> usize {
        self.advance_to(now);
        let now = self.now;
        let mut n = 0;
        for s in self.sessions.values_mut() {
            if s.status != SessionStatus::Alive {
                continue;
            }
            match &mut s.link {
                Link::Killed { last_contact } => *last_contact = now,
                Link::Suspended { since } => *since = now,
                Link::Connected => continue,
            }
            n += 1;
        }
        n
    }

    /// The session's client crashes (a hook): it never sends anything again, its watches end
    /// with no further event, and the session lingers with its ephemeral nodes until
    /// `last_contact + timeout` (the suspension time if it was suspended, else `now`). Returns
    /// whether anything changed.
    pub fn kill(&mut self, id: SessionId, now: Duration) -> bool {
        self.watch_changes += 1;
        self.advance_to(now);
        let Some(s) = self.sessions.get_mut(&id) else {
            return false;
        };
        let last_contact = match s.link {
            Link::Killed { .. } => return false,
            Link::Suspended { since } => since,
            Link::Connected => self.now,
        };
        if s.status == SessionStatus::Closed {
            return false;
        }
        s.link = Link::Killed { last_contact };
        for wid in &s.watches {
            if let Some(w) = self.watches.get_mut(wid) {
                w.queue.clear();
                w.end();
            }
        }
        self.retime(id);
        true
    }

    /// Gives the client of an expired session a new session (what a ZooKeeper client does after
    /// an expiry): opens a session with the same timeout, moves the old session's watches to it
    /// and queues [`SessionEvent::Connected`] on them. `None` unless the old session is expired
    /// and its client connected, or if it was renewed before.
    pub fn reconnect(&mut self, old: SessionId, now: Duration) -> Option<SessionInfo> {
        self.watch_changes += 1;
        self.advance_to(now);
        let s = self.sessions.get(&old)?;
        if s.status != SessionStatus::Expired
            || s.link != Link::Connected
            || s.replaced_by.is_some()
        {
            return None;
        }
        let timeout = s.timeout;
        let info = self.open_session(timeout, now);
        let moved = match self.sessions.get_mut(&old) {
            Some(s) => {
                s.replaced_by = Some(info.id);
                std::mem::take(&mut s.watches)
            }
            None => BTreeSet::new(),
        };
        for wid in &moved {
            if let Some(w) = self.watches.get_mut(wid) {
                w.session = info.id;
                w.push(
                    self.now,
                    RegistryEvent::Session(SessionEvent::Connected(info)),
                );
            }
        }
        if let Some(s) = self.sessions.get_mut(&info.id) {
            s.watches = moved;
        }
        self.debug_check();
        Some(info)
    }

    /// A snapshot of one session, or `None` if the id was never issued.
    pub fn session(&self, id: SessionId) -> Option<SessionView> {
        self.sessions.get(&id).map(|s| SessionView {
            info: SessionInfo {
                id,
                timeout: s.timeout,
            },
            status: s.status,
            link: s.link,
            ephemerals: s.ephemerals.iter().cloned().collect(),
            watches: s.watches.iter().copied().collect(),
            replaced_by: s.replaced_by,
            ended_at: s.ended_at,
        })
    }

    /// The session's id and timeout, status and client link, without copying its node lists.
    pub fn session_state(&self, id: SessionId) -> Option<(SessionInfo, SessionStatus, Link)> {
        self.sessions.get(&id).map(|s| {
            (
                SessionInfo {
                    id,
                    timeout: s.timeout,
                },
                s.status,
                s.link,
            )
        })
    }

    /// Whether the session exists on the registry side (alive, whatever its client's link).
    pub fn is_alive(&self, id: SessionId) -> bool {
        self.sessions
            .get(&id)
            .is_some_and(|s| s.status == SessionStatus::Alive)
    }

    /// The ids of all alive sessions, ascending.
    pub fn session_ids(&self) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, s)| s.status == SessionStatus::Alive)
            .map(|(id, _)| *id)
            .collect()
    }

    // ----------------------------------------------------------------------------------------
    // Requests
    // ----------------------------------------------------------------------------------------

    /// Reads one node for `session`; `Ok(None)` if it does not exist.
    pub fn get(
        &mut self,
        session: SessionId,
        path: &NodePath,
        now: Duration,
    ) -> Result<Option<Node>, RegistryError> {
        self.advance_to(now);
        self.gate(session)?;
        Ok(self.node(path))
    }

    /// The names of a node's children, ascending by bytes; [`RegistryError::NoNode`] if missing.
    pub fn children(
        &mut self,
        session: SessionId,
        path: &NodePath,
        now: Duration,
    ) -> Result<Vec<String>, RegistryError> {
        self.advance_to(now);
        self.gate(session)?;
        if !self.nodes.contains_key(path) {
            return Err(RegistryError::NoNode(path.clone()));
        }
        Ok(self.child_names(path))
    }

    /// Reads `root` and everything below it atomically, parents before children, siblings by
    /// name. Empty if `root` does not exist.
    pub fn get_tree(
        &mut self,
        session: SessionId,
        root: &NodePath,
        now: Duration,
    ) -> Result<Vec<Node>, RegistryError> {
        self.advance_to(now);
        self.gate(session)?;
        Ok(self.tree(root))
    }

    /// [`Store::get_tree`] with the revision it reflects (the store's current one: the read is
    /// atomic).
    pub fn read_tree(
        &mut self,
        session: SessionId,
        root: &NodePath,
        now: Duration,
    ) -> Result<Tree, RegistryError> {
        let nodes = self.get_tree(session, root, now)?;
        Ok(Tree {
            nodes,
            revision: Some(self.revision()),
        })
    }

    /// Limits transactions as etcd's `--max-txn-ops` does (`None`, the default: no limit).
    /// A transaction whose compares or writes, counted by [`txn_cost`], exceed the limit fails
    /// with [`RegistryError::TooLarge`] and changes nothing.
    pub fn set_max_txn_ops(&mut self, limit: Option<usize>) {
        self.max_txn_ops = limit;
    }

    /// The limit set with [`Store::set_max_txn_ops`].
    pub fn max_txn_ops(&self) -> Option<usize> {
        self.max_txn_ops
    }

    /// Applies a transaction for `session`: all operations in order, or none. Ephemeral nodes
    /// are bound to `session`. Fails with [`RegistryError::TooLarge`] if it exceeds the limit
    /// set with [`Store::set_max_txn_ops`].
    pub fn transact(
        &mut self,
        session: SessionId,
        ops: Vec<TxnOp>,
        now: Duration,
    ) -> Result<Vec<TxnOpResult>, RegistryError> {
        self.advance_to(now);
        self.gate(session)?;
        // No operation costs more than three compares and one write (see `txn_cost`): a
        // transaction short enough for that to fit needs no count.
        if let Some(max) = self
            .max_txn_ops
            .filter(|max| ops.len().saturating_mul(3) > *max)
        {
            let (compares, writes) = txn_cost(&ops);
            if compares > max || writes > max {
                return Err(RegistryError::TooLarge(format!(
                    "the transaction needs {compares} compares and {writes} writes; the store \
                     allows {max} of each"
                )));
            }
        }
        let rev = Revision(self.revision + 1);
        let mut undo = Vec::new();
        let mut events = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.into_iter().enumerate() {
            match self.apply(session, op, rev, &mut undo, &mut events) {
                Ok(result) => results.push(result),
                Err(cause) => {
                    self.rollback(undo);
                    self.debug_check();
                    return Err(RegistryError::TxnAborted {
                        index,
                        cause: Box::new(cause),
                    });
                }
            }
        }
        if !undo.is_empty() {
            self.revision = rev.0;
            for event in events {
                self.dispatch(event);
            }
        }
        self.debug_check();
        Ok(results)
    }

    /// Creates one node (a one-operation [`Store::transact`] with the operation's own error).
    pub fn create(
        &mut self,
        session: SessionId,
        path: &NodePath,
        data: Vec<u8>,
        mode: CreateMode,
        now: Duration,
    ) -> Result<Stat, RegistryError> {
        let op = TxnOp::Create {
            path: path.clone(),
            data,
            mode,
        };
        match self.transact_one(session, op, now)? {
            TxnOpResult::Created(stat) => Ok(stat),
            other => Err(RegistryError::Backend(format!("create returned {other:?}"))),
        }
    }

    /// Replaces one node's data (a one-operation [`Store::transact`]).
    pub fn set(
        &mut self,
        session: SessionId,
        path: &NodePath,
        data: Vec<u8>,
        expected: Option<Version>,
        now: Duration,
    ) -> Result<Stat, RegistryError> {
        let op = TxnOp::Set {
            path: path.clone(),
            data,
            expected,
        };
        match self.transact_one(session, op, now)? {
            TxnOpResult::Set(stat) => Ok(stat),
            other => Err(RegistryError::Backend(format!("set returned {other:?}"))),
        }
    }

    /// Deletes one childless node (a one-operation [`Store::transact`]).
    pub fn delete(
        &mut self,
        session: SessionId,
        path: &NodePath,
        expected: Option<Version>,
        now: Duration,
    ) -> Result<(), RegistryError> {
        let op = TxnOp::Delete {
            path: path.clone(),
            expected,
        };
        match self.transact_one(session, op, now)? {
            TxnOpResult::Deleted => Ok(()),
            other => Err(RegistryError::Backend(format!("delete returned {other:?}"))),
        }
    }

    fn transact_one(
        &mut self,
        session: SessionId,
        op: TxnOp,
        now: Duration,
    ) -> Result<TxnOpResult, RegistryError> {
        match self.transact(session, vec![op], now) {
            Ok(mut results) if results.len() == 1 => Ok(results.remove(0)),
            Ok(results) => Err(RegistryError::Backend(format!(
                "one-operation transaction returned {} results",
                results.len()
            ))),
            Err(RegistryError::TxnAborted { index: 0, cause }) => Err(*cause),
            Err(e) => Err(e),
        }
    }

    /// Starts a recursive watch of `root` (which need not exist) for `session`. It receives the
    /// events of changes committed from now on.
    pub fn watch(
        &mut self,
        session: SessionId,
        root: &NodePath,
        now: Duration,
    ) -> Result<WatchId, RegistryError> {
        self.watch_changes += 1;
        self.advance_to(now);
        self.gate(session)?;
        let id = WatchId(self.next_watch);
        self.next_watch += 1;
        self.watches.insert(
            id,
            WatchEntry {
                session,
                root: root.clone(),
                queue: VecDeque::new(),
                parked: Vec::new(),
                held: false,
                not_before: Duration::ZERO,
                latency: Duration::ZERO,
                ended: false,
            },
        );
        if let Some(s) = self.sessions.get_mut(&session) {
            s.watches.insert(id);
        }
        Ok(id)
    }

    /// Removes a watch and its pending events (the client dropped the stream).
    pub fn unwatch(&mut self, watch: WatchId) {
        self.watch_changes += 1;
        if let Some(w) = self.watches.remove(&watch)
            && let Some(s) = self.sessions.get_mut(&w.session)
        {
            s.watches.remove(&watch);
        }
    }

    /// The events of `watch` deliverable at `now`, in order, removed from its queue. Empty while
    /// the watch is held, before its `not_before` time, or for an unknown watch.
    pub fn take_events(&mut self, watch: WatchId, now: Duration) -> Vec<RegistryEvent> {
        self.advance_to(now);
        let now = self.now;
        let Some(w) = self.watches.get_mut(&watch) else {
            return Vec::new();
        };
        if w.held || now < w.not_before {
            return Vec::new();
        }
        // Counted first, so the batch is allocated once at its size.
        let due = w.queue.iter().take_while(|q| q.at <= now).count();
        if due == 0 {
            // Most polls find nothing: no drain to set up and tear down.
            return Vec::new();
        }
        w.queue.drain(..due).map(|q| q.event).collect()
    }

    /// A count that grows whenever any watch may have something new to deliver (an event
    /// queued or parked, a hold, delay or latency changed, a watch made, ended or removed).
    /// While it stays the same, [`Store::take_events`] on a watch returns nothing before
    /// [`Store::watch_due`] said it would, so a driver that polls many watches can skip
    /// the polls that would find nothing.
    pub fn watch_changes(&self) -> u64 {
        self.watch_changes
    }

    /// When `watch` next has an event to deliver, as things stand: its queue's front
    /// becomes deliverable; `None` while it is held, its queue is empty, or it does not
    /// exist (each can change only with [`Store::watch_changes`]).
    pub fn watch_due(&self, watch: WatchId) -> Option<Duration> {
        self.watches
            .get(&watch)
            .filter(|w| !w.held)
            .and_then(WatchEntry::front_time)
    }

    /// Whether `watch` will deliver nothing more: it ended (session closed, client killed) and
    /// its queue is empty, or it does not exist.
    pub fn watch_finished(&self, watch: WatchId) -> bool {
        self.watches
            .get(&watch)
            .is_none_or(|w| w.ended && w.queue.is_empty())
    }

    /// How many events wait in `watch`'s queue (deliverable or not), not counting events parked
    /// while its session is suspended.
    pub fn pending_events(&self, watch: WatchId) -> usize {
        self.watches.get(&watch).map_or(0, |w| w.queue.len())
    }

    /// The session a watch belongs to.
    pub fn watch_session(&self, watch: WatchId) -> Option<SessionId> {
        self.watches.get(&watch).map(|w| w.session)
    }

    // ----------------------------------------------------------------------------------------
    // Watch fault hooks
    // ----------------------------------------------------------------------------------------

    /// Holds `watch`'s delivery: events queue up until [`Store::release_watch`]. Returns whether
    /// the watch exists.
    pub fn hold_watch(&mut self, watch: WatchId) -> bool {
        self.watch_changes += 1;
        self.watches.get_mut(&watch).is_some_and(|w| {
            w.held = !w.ended;
            true
        })
    }

    /// Releases a held watch. Returns whether the watch exists.
    pub fn release_watch(&mut self, watch: WatchId) -> bool {
        self.watch_changes += 1;
        self.watches.get_mut(&watch).is_some_and(|w| {
            w.held = false;
            true
        })
    }

    /// Delivers nothing of `watch` before `until` (events stay queued, in order). Returns whether
    /// the watch exists.
    pub fn delay_watch(&mut self, watch: WatchId, until: Duration) -> bool {
        self.watch_changes += 1;
        self.watches.get_mut(&watch).is_some_and(|w| {
            if !w.ended {
                w.not_before = until;
            }
            true
        })
    }

    /// Delivers each event queued on `watch` from now on `latency` after it was queued (slow
    /// watch delivery; order is kept, so a later event never overtakes an earlier one). Returns
    /// whether the watch exists.
    pub fn set_watch_latency(&mut self, watch: WatchId, latency: Duration) -> bool {
        self.watch_changes += 1;
        self.watches.get_mut(&watch).is_some_and(|w| {
            w.latency = latency;
            true
        })
    }

    // ----------------------------------------------------------------------------------------
    // Inspection
    // ----------------------------------------------------------------------------------------

    /// The current revision: that of the last committed write, 0 before any.
    pub fn revision(&self) -> Revision {
        Revision(self.revision)
    }

    /// Reads a node without a session (for checkers and debugging).
    pub fn node(&self, path: &NodePath) -> Option<Node> {
        self.nodes.get(path).map(|n| n.node(path.clone()))
    }

    /// Whether a node exists at `path`, without a session and without copying it. A string
    /// that is not a valid path names no node.
    pub fn contains(&self, path: &str) -> bool {
        self.nodes.contains_key(path)
    }

    /// Every node, the root included, in path order (a parent sorts before its children).
    pub fn dump(&self) -> Vec<Node> {
        self.nodes
            .iter()
            .map(|(path, n)| n.node(path.clone()))
            .collect()
    }

    /// `root` and everything below it, parents before children, siblings by name, without a
    /// session. Empty if `root` does not exist.
    pub fn tree(&self, root: &NodePath) -> Vec<Node> {
        let Some(top) = self.nodes.get(root) else {
            return Vec::new();
        };
        let mut below: Vec<(&NodePath, &NodeEntry)> = self.below(root).collect();
        // Path order puts `a-b` (and other names with a byte below `/`) between `a` and
        // `a/x`; ordering by segments gives parents before children and siblings by name.
        // The input is nearly sorted, which the sort takes in about linear time.
        below.sort_by(|a, b| a.0.cmp_segments(b.0));
        let mut out = Vec::with_capacity(below.len() + 1);
        out.push(top.node(root.clone()));
        out.extend(below.into_iter().map(|(path, n)| n.node(path.clone())));
        out
    }

    /// Checks every structural invariant of the store; `Err` describes the first violation.
    /// (Cheap local checks run as `debug_assert!`s on every write; this is the full walk.)
    pub fn check_invariants(&self) -> Result<(), String> {
        let root = self
            .nodes
            .get(&NodePath::root())
            .ok_or("the root is missing")?;
        if root.owner().is_some() {
            return Err("the root is ephemeral".into());
        }
        let mut children: BTreeMap<NodePath, u32> = BTreeMap::new();
        for (path, n) in &self.nodes {
            if n.created > n.modified || n.modified > self.revision {
                return Err(format!("{path}: bad revisions {:?}", n.stat()));
            }
            if let Some(parent) = path.parent() {
                let p = self
                    .nodes
                    .get(&parent)
                    .ok_or(format!("{path}: parent missing"))?;
                if p.owner().is_some() {
                    return Err(format!("{path}: child of ephemeral {parent}"));
                }
                *children.entry(parent).or_default() += 1;
            }
            if let Some(owner) = n.owner() {
                let s = self
                    .sessions
                    .get(&owner)
                    .ok_or(format!("{path}: unknown owner"))?;
                if s.status != SessionStatus::Alive || !s.ephemerals.contains(path) {
                    return Err(format!(
                        "{path}: owner {owner} is not alive or does not own it"
                    ));
                }
                if n.children != 0 {
                    return Err(format!("{path}: ephemeral with children"));
                }
            }
        }
        for (path, n) in &self.nodes {
            let counted = children.get(path).copied().unwrap_or(0);
            if n.children != counted {
                return Err(format!(
                    "{path}: counts {} children, has {counted}",
                    n.children
                ));
            }
        }
        for (id, s) in &self.sessions {
            let has_deadline = deadline(s.status, s.link, s.timeout).is_some();
            if has_deadline != self.timed.contains(id) {
                return Err(format!("session {id}: deadline index out of date"));
            }
            if s.status != SessionStatus::Alive && !s.ephemerals.is_empty() {
                return Err(format!("session {id} ended but owns nodes"));
            }
            for path in &s.ephemerals {
                let owner = self.nodes.get(path).and_then(NodeEntry::owner);
                if owner != Some(*id) {
                    return Err(format!("session {id} lists {path}, owned by {owner:?}"));
                }
            }
            for w in &s.watches {
                if self.watches.get(w).map(|w| w.session) != Some(*id) {
                    return Err(format!(
                        "session {id} lists watch {w:?} that is not its own"
                    ));
                }
            }
        }
        for (wid, w) in &self.watches {
            let listed = self
                .sessions
                .get(&w.session)
                .is_some_and(|s| s.watches.contains(wid));
            if !listed {
                return Err(format!("watch {wid:?} not listed by session {}", w.session));
            }
        }
        Ok(())
    }

    // ----------------------------------------------------------------------------------------
    // Internals
    // ----------------------------------------------------------------------------------------

    /// Every node strictly below `root`, in path order.
    fn below(&self, root: &NodePath) -> impl Iterator<Item = (&NodePath, &NodeEntry)> {
        let prefix = prefix_below(root);
        self.nodes
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(move |(p, _)| p.as_str().starts_with(prefix.as_str()))
            .filter(|(p, _)| !p.is_root())
    }

    /// The names of `parent`'s children, ascending by bytes: the paths below it with one more
    /// segment. Deeper paths are skipped a subtree at a time: everything from `{prefix}{name}/`
    /// up to `{prefix}{name}0` (`0` follows `/`) is below the child `name`.
    fn child_names(&self, parent: &NodePath) -> Vec<String> {
        let prefix = prefix_below(parent);
        let mut names = Vec::new();
        let mut from = prefix.clone();
        'seek: loop {
            let range = self
                .nodes
                .range::<str, _>((Bound::Included(from.as_str()), Bound::Unbounded));
            for (path, _) in range {
                let Some(rest) = path.as_str().strip_prefix(prefix.as_str()) else {
                    break 'seek;
                };
                match rest.find('/') {
                    None if rest.is_empty() => {}
                    None => names.push(rest.to_owned()),
                    Some(at) => {
                        from = format!("{prefix}{}0", &rest[..at]);
                        continue 'seek;
                    }
                }
            }
            break;
        }
        names
    }

    fn debug_check(&self) {
        // The full walk is O(nodes); keep debug builds of big simulations fast.
        if cfg!(debug_assertions) && self.nodes.len() + self.sessions.len() <= 512 {
            debug_assert_eq!(self.check_invariants(), Ok(()));
        }
    }

    /// Puts a session in `timed` or takes it out, after its status or link changed.
    fn retime(&mut self, id: SessionId) {
        let timed = self
            .sessions
            .get(&id)
            .is_some_and(|s| deadline(s.status, s.link, s.timeout).is_some());
        if timed {
            self.timed.insert(id);
        } else {
            self.timed.remove(&id);
        }
    }

    /// Whether `session` may make a request now.
    fn gate(&self, session: SessionId) -> Result<(), RegistryError> {
        let Some(s) = self.sessions.get(&session) else {
            return Err(RegistryError::SessionExpired);
        };
        if s.link != Link::Connected {
            return Err(RegistryError::ConnectionLoss);
        }
        match s.status {
            SessionStatus::Alive => Ok(()),
            SessionStatus::Expired => Err(RegistryError::SessionExpired),
            SessionStatus::Closed => Err(RegistryError::Closed),
        }
    }

    fn apply(
        &mut self,
        session: SessionId,
        op: TxnOp,
        rev: Revision,
        undo: &mut Vec<Undo>,
        events: &mut Vec<WatchEvent>,
    ) -> Result<TxnOpResult, RegistryError> {
        match op {
            TxnOp::Check(check) => self.check(session, &check).map(|()| TxnOpResult::Checked),
            TxnOp::Create { path, data, mode } => {
                let Some(parent) = path.parent() else {
                    return Err(RegistryError::NodeExists(path));
                };
                let Some(parent_entry) = self.nodes.get(&parent) else {
                    return Err(RegistryError::NoNode(parent));
                };
                let parent_ephemeral = parent_entry.owner().is_some();
                if self.nodes.contains_key(&path) {
                    return Err(RegistryError::NodeExists(path));
                }
                if parent_ephemeral {
                    return Err(RegistryError::NoChildrenForEphemerals(parent));
                }
                if let Some(parent_entry) = self.nodes.get_mut(&parent) {
                    parent_entry.children += 1;
                }
                let owner = match mode {
                    CreateMode::Persistent => None,
                    CreateMode::Ephemeral => Some(session),
                };
                let stat = Stat {
                    version: Version(0),
                    created: rev,
                    modified: rev,
                    ephemeral_owner: owner,
                    mtime_ms: self.wall_ms(),
                };
                if let Some(s) = owner.and_then(|o| self.sessions.get_mut(&o)) {
                    debug_assert_eq!(s.status, SessionStatus::Alive);
                    s.ephemerals.insert(path.clone());
                }
                let entry = NodeEntry::new(data.clone().into_boxed_slice(), stat);
                let previous = self.nodes.insert(path.clone(), entry);
                debug_assert!(previous.is_none(), "{path} existed but was not a child");
                events.push(WatchEvent {
                    kind: WatchEventKind::Created,
                    path: path.clone(),
                    data,
                    stat: Some(stat),
                    revision: Some(rev),
                });
                undo.push(Undo::Created(path));
                Ok(TxnOpResult::Created(stat))
            }
            TxnOp::Set {
                path,
                data,
                expected,
            } => {
                let wall = self.wall_ms();
                let Some(n) = self.nodes.get_mut(&path) else {
                    return Err(RegistryError::NoNode(path));
                };
                if let Some(expected) = expected
                    && n.version != expected.0
                {
                    return Err(RegistryError::BadVersion { path, expected });
                }
                let old_stat = n.stat();
                let old_data = std::mem::replace(&mut n.data, data.clone().into_boxed_slice());
                n.version += 1;
                n.modified = rev.0;
                n.mtime = wall;
                let stat = n.stat();
                events.push(WatchEvent {
                    kind: WatchEventKind::Changed,
                    path: path.clone(),
                    data,
                    stat: Some(stat),
                    revision: Some(rev),
                });
                undo.push(Undo::Set(path, old_data, old_stat));
                Ok(TxnOpResult::Set(stat))
            }
            TxnOp::Delete { path, expected } => {
                if path.is_root() {
                    return Err(RegistryError::NotAuthorized(
                        "the root node cannot be deleted".to_owned(),
                    ));
                }
                let Some(n) = self.nodes.get(&path) else {
                    return Err(RegistryError::NoNode(path));
                };
                if let Some(expected) = expected
                    && n.version != expected.0
                {
                    return Err(RegistryError::BadVersion { path, expected });
                }
                if n.children != 0 {
                    return Err(RegistryError::NotEmpty(path));
                }
                let entry = self.remove_leaf(&path);
                events.push(WatchEvent {
                    kind: WatchEventKind::Deleted,
                    path: path.clone(),
                    data: Vec::new(),
                    stat: None,
                    revision: Some(rev),
                });
                if let Some(entry) = entry {
                    undo.push(Undo::Deleted(path, entry));
                }
                Ok(TxnOpResult::Deleted)
            }
        }
    }

    fn check(&self, session: SessionId, check: &Check) -> Result<(), RegistryError> {
        let node = |p: &NodePath| {
            self.nodes
                .get(p)
                .ok_or_else(|| RegistryError::NoNode(p.clone()))
        };
        match check {
            Check::Exists(p) => node(p).map(|_| ()),
            Check::Absent(p) => match self.nodes.contains_key(p) {
                true => Err(RegistryError::NodeExists(p.clone())),
                false => Ok(()),
            },
            Check::Version(p, v) => match node(p)?.version == v.0 {
                true => Ok(()),
                false => Err(RegistryError::BadVersion {
                    path: p.clone(),
                    expected: *v,
                }),
            },
            Check::Value(p, data) => match *node(p)?.data == data[..] {
                true => Ok(()),
                false => Err(RegistryError::ValueMismatch(p.clone())),
            },
            // The caller passed `gate`, so `session` is alive and connected.
            Check::Session(id) => match *id == session {
                true => Ok(()),
                false => Err(RegistryError::SessionMismatch {
                    expected: *id,
                    actual: Some(session),
                }),
            },
        }
    }

    /// Removes a childless node, unlinking it from its parent and its owner.
    fn remove_leaf(&mut self, path: &NodePath) -> Option<NodeEntry> {
        let entry = self.nodes.remove(path)?;
        debug_assert_eq!(entry.children, 0, "{path} removed with children");
        if let Some(parent) = path.parent().and_then(|p| self.nodes.get_mut(&p)) {
            parent.children = parent.children.saturating_sub(1);
        }
        if let Some(s) = entry.owner().and_then(|o| self.sessions.get_mut(&o)) {
            s.ephemerals.remove(path);
        }
        Some(entry)
    }

    fn rollback(&mut self, undo: Vec<Undo>) {
        for step in undo.into_iter().rev() {
            match step {
                Undo::Created(path) => {
                    self.remove_leaf(&path);
                }
                Undo::Set(path, data, stat) => {
                    if let Some(n) = self.nodes.get_mut(&path) {
                        n.data = data;
                        n.version = stat.version.0;
                        n.modified = stat.modified.0;
                        n.mtime = stat.mtime_ms;
                    }
                }
                Undo::Deleted(path, entry) => {
                    if let Some(parent) = path.parent().and_then(|p| self.nodes.get_mut(&p)) {
                        parent.children += 1;
                    }
                    if let Some(s) = entry.owner().and_then(|o| self.sessions.get_mut(&o)) {
                        s.ephemerals.insert(path.clone());
                    }
                    self.nodes.insert(path, entry);
                }
            }
        }
    }

    /// Queues a committed node event on every watch that sees it. The last one gets the event
    /// itself, the others a copy each: every instance watches the whole tree, so this saves one
    /// copy of the path and the data per event. (Each watch has its own queue, so which one
    /// gets the original is not observable.)
    fn dispatch(&mut self, event: WatchEvent) {
        self.watch_changes += 1;
        let now = self.now;
        let mut last: Option<(&mut WatchEntry, bool)> = None;
        for w in self.watches.values_mut() {
            if let Some(parked) = w.route(&self.sessions, &event.path) {
                if let Some((before, parked)) = last.replace((w, parked)) {
                    before.deliver(now, RegistryEvent::Node(event.clone()), parked);
                }
            }
        }
        if let Some((w, parked)) = last {
            w.deliver(now, RegistryEvent::Node(event), parked);
        }
    }

    /// Queues a session event on the session's watches (parked while it is suspended).
    fn push_session_event(&mut self, id: SessionId, event: SessionEvent) {
        self.watch_changes += 1;
        let Some(s) = self.sessions.get(&id) else {
            return;
        };
        for wid in &s.watches {
            if let Some(w) = self.watches.get_mut(wid) {
                w.push(self.now, RegistryEvent::Session(event));
            }
        }
    }

    /// Expires an alive session at `self.now`. Returns whether it was alive.
    fn expire_now(&mut self, id: SessionId) -> bool {
        self.watch_changes += 1;
        let Some(s) = self.sessions.get(&id) else {
            return false;
        };
        if s.status != SessionStatus::Alive {
            return false;
        }
        let expired = RegistryEvent::Session(SessionEvent::Expired(id));
        for wid in &s.watches {
            let Some(w) = self.watches.get_mut(wid) else {
                continue;
            };
            match s.link {
                Link::Connected => w.push(self.now, expired.clone()),
                // The client learns of the expiry when it is resumed; what happened meanwhile
                // is lost with the session.
                Link::Suspended { .. } => {
                    w.parked.clear();
                    w.parked.push(expired.clone());
                }
                Link::Killed { .. } => {}
            }
        }
        self.end_session(id, SessionStatus::Expired);
        true
    }

    /// Marks a session ended and deletes its ephemeral nodes in one write.
    fn end_session(&mut self, id: SessionId, status: SessionStatus) {
        let Some(s) = self.sessions.get_mut(&id) else {
            return;
        };
        s.status = status;
        let paths = std::mem::take(&mut s.ephemerals);
        self.retime(id);
        if paths.is_empty() {
            return;
        }
        self.revision += 1;
        let rev = Revision(self.revision);
        if let Some(s) = self.sessions.get_mut(&id) {
            s.ended_at = Some(rev);
        }
        for path in paths {
            if self.remove_leaf(&path).is_some() {
                self.dispatch(WatchEvent {
                    kind: WatchEventKind::Deleted,
                    path,
                    data: Vec::new(),
                    stat: None,
                    revision: Some(rev),
                });
            }
        }
        self.debug_check();
    }
}

/// What every path strictly below `path` starts with.
fn prefix_below(path: &NodePath) -> String {
    if path.is_root() {
        "/".to_owned()
    } else {
        format!("{path}/")
    }
}

/// What a transaction costs on etcd, as its backend emulates the tree: (compares, writes).
///
/// A check is one compare ([`Check::Session`] once per transaction); a create checks that its
/// parent exists and is not ephemeral (once per parent, not for a parent the transaction
/// creates) and that the node is absent; a set checks the node's version or existence; a
/// delete checks that plus the absence of children. An operation on a node the transaction
/// wrote before is checked against the transaction's own effects, with no compare. Every
/// create, set and delete is one write (one per node).
pub fn txn_cost(ops: &[TxnOp]) -> (usize, usize) {
    let mut compares: BTreeSet<(u8, NodePath)> = BTreeSet::new();
    let mut written: BTreeSet<NodePath> = BTreeSet::new();
    let mut session = false;
    for op in ops {
        match op {
            TxnOp::Check(Check::Session(_)) => session = true,
            TxnOp::Check(c) => {
                if let Some(p) = c.path() {
                    if !written.contains(p) {
                        let kind = match c {
                            Check::Exists(_) => 0,
                            Check::Absent(_) => 1,
                            Check::Version(..) => 2,
                            _ => 3,
                        };
                        compares.insert((kind, p.clone()));
                    }
                }
            }
            TxnOp::Create { path, .. } => {
                if let Some(parent) = path.parent() {
                    if !parent.is_root() && !written.contains(&parent) {
                        compares.insert((4, parent.clone()));
                        compares.insert((5, parent));
                    }
                }
                if !written.contains(path) {
                    compares.insert((1, path.clone()));
                }
                written.insert(path.clone());
            }
            TxnOp::Set { path, .. } => {
                if !written.contains(path) {
                    compares.insert((2, path.clone()));
                }
                written.insert(path.clone());
            }
            TxnOp::Delete { path, .. } => {
                if !written.contains(path) {
                    compares.insert((2, path.clone()));
                }
                compares.insert((6, path.clone()));
                written.insert(path.clone());
            }
        }
    }
    (compares.len() + usize::from(session), written.len())
}

#[cfg(test)]
mod tests;
