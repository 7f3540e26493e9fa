//! Event streams: one persistent recursive watch each, read by a background task.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use shardjob_core::backoff::Backoff;
use shardjob_core::registry::{
    EventStream, NodePath, RegistryError, RegistryEvent, SessionEvent, SessionId, SessionInfo,
    WatchEvent, WatchEventKind,
};
use tokio::sync::mpsc;
use zookeeper_client as zk;

use crate::journal::{After, Journal, Journals};
use crate::{Inner, Session, map_error, map_stat};

struct ZkEventStream {
    rx: mpsc::UnboundedReceiver<RegistryEvent>,
    task: tokio::task::JoinHandle<()>,
}

#[async_trait]
impl EventStream for ZkEventStream {
    async fn next(&mut self) -> Option<RegistryEvent> {
        self.rx.recv().await
    }
}

impl Drop for ZkEventStream {
    fn drop(&mut self) {
        // Dropping the watcher removes the watch from the server.
        self.task.abort();
    }
}

/// A stream's journal of this client's writes, with the client's lock over writes and reads.
pub(crate) struct Own {
    pub(crate) journals: Arc<Journals>,
    pub(crate) journal: Arc<Journal>,
}

/// Starts the stream of a watch of `root` just added on `session`; `own.journal` is open on
/// that session.
pub(crate) fn start(
    inner: Weak<Inner>,
    root: NodePath,
    watcher: zk::PersistentWatcher,
    session: SessionInfo,
    own: Own,
) -> Box<dyn EventStream> {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(run(inner, root, watcher, session, own, tx));
    Box::new(ZkEventStream { rx, task })
}

async fn run(
    inner: Weak<Inner>,
    root: NodePath,
    mut watcher: zk::PersistentWatcher,
    mut session: SessionInfo,
    own: Own,
    tx: mpsc::UnboundedSender<RegistryEvent>,
) {
    let journal = &own.journal;
    let mut suspended = false;
    // Paths whose Created was dropped because the node was gone when read: their next
    // Deleted is dropped too.
    let mut vanished: HashSet<NodePath> = HashSet::new();
    // An event taken from the watcher but not handled yet (the one that ended a burst).
    let mut stash: Option<zk::WatchedEvent> = None;
    loop {
        let event = match stash.take() {
            Some(e) => e,
            None => tokio::select! {
                e = watcher.changed() => e,
                () = tx.closed() => return,
            },
        };
        if is_node_event(&event) {
            // A transaction changes many nodes at once and ZooKeeper's events carry no data:
            // take the whole burst that has arrived and read its nodes in one request, not
            // one request per node.
            let mut burst = vec![event];
            take_arrived(&mut watcher, &mut burst, &mut stash, MAX_BURST);
            let mut arrived = Arrived {
                watcher: &mut watcher,
                stash: &mut stash,
            };
            for e in node_events(&inner, &own, burst, &mut arrived, &mut vanished).await {
                if tx.send(e).is_err() {
                    return;
                }
            }
            continue;
        }
        let out = match event.event_type {
            zk::EventType::Session => match event.session_state {
                zk::SessionState::Disconnected => {
                    if suspended {
                        continue;
                    }
                    // Changes from now until the watch is back may never be notified.
                    journal.close();
                    suspended = true;
                    vec![SessionEvent::Suspended(session.id)]
                }
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    if !suspended {
                        continue;
                    }
                    // zookeeper-client 0.11 does not register persistent watches again after a
                    // reconnection (its SetWatches request leaves them out): add the watch
                    // anew before reporting the reconnection, so that every change after the
                    // event is delivered.
                    match rewatch(&inner, &root, session.id).await {
                        Some(w) => {
                            watcher = w;
                            journal.open(session.id);
                            suspended = false;
                            vec![SessionEvent::Reconnected(session.id)]
                        }
                        // Cut off again or the session is gone: the watcher says so next.
                        None => continue,
                    }
                }
                zk::SessionState::Closed => {
                    let _ = tx.send(RegistryEvent::Session(SessionEvent::Closed));
                    return;
                }
                // Expired, AuthFailed: the session is over; the watcher delivers nothing more.
                _ => {
                    journal.close();
                    if tx
                        .send(RegistryEvent::Session(SessionEvent::Expired(session.id)))
                        .is_err()
                    {
                        return;
                    }
                    vanished.clear();
                    suspended = false;
                    match renew(&inner, &root, session.id, &tx).await {
                        Some((w, info)) => {
                            watcher = w;
                            session = info;
                            journal.open(info.id);
                            vec![SessionEvent::Connected(info)]
                        }
                        None => {
                            if inner.upgrade().is_none_or(|i| i.is_closed()) {
                                let _ = tx.send(RegistryEvent::Session(SessionEvent::Closed));
                            }
                            return;
                        }
                    }
                }
            }
            .into_iter()
            .map(RegistryEvent::Session)
            .collect::<Vec<_>>(),
            // Node events were handled above, a burst at a time.
            _ => continue,
        };
        for e in out {
            if tx.send(e).is_err() {
                return;
            }
        }
    }
}

fn node_path(raw: &str) -> Option<NodePath> {
    let raw = if raw.is_empty() { "/" } else { raw };
    match NodePath::new(raw) {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(path = raw, error = %e, "ignoring a ZooKeeper event on an invalid path");
            None
        }
    }
}

#[derive(Clone)]
enum Read {
    Node(Vec<u8>, shardjob_core::registry::Stat),
    Gone,
    /// The node cannot be read: the session or the registry ended (the stream learns it from
    /// its watcher next), or reading it is not allowed. Its event is skipped.
    Stop,
}

/// The most node events read in one request.
const MAX_BURST: usize = 512;

fn is_node_event(event: &zk::WatchedEvent) -> bool {
    matches!(
        event.event_type,
        zk::EventType::NodeCreated
            | zk::EventType::NodeDataChanged
            | zk::EventType::NodeDeleted
            | zk::EventType::NodeChildrenChanged
    )
}

/// Adds the node events that have arrived to `burst`, until it holds `limit`; the first
/// other event goes to `stash` (and ends the burst: what follows it is handled after it).
fn take_arrived(
    watcher: &mut zk::PersistentWatcher,
    burst: &mut Vec<zk::WatchedEvent>,
    stash: &mut Option<zk::WatchedEvent>,
    limit: usize,
) {
    while stash.is_none() && burst.len() < limit {
        match poll_now(watcher) {
            Some(e) if is_node_event(&e) => burst.push(e),
            Some(e) => *stash = Some(e),
            None => break,
        }
    }
}

/// The watcher, for a burst to take the node events that arrive while it is handled.
struct Arrived<'a> {
    watcher: &'a mut zk::PersistentWatcher,
    stash: &'a mut Option<zk::WatchedEvent>,
}

/// The watcher's next event if it has already arrived. `changed` only takes an event from the
/// client's channel when it returns it, so dropping it unfinished loses nothing.
fn poll_now(watcher: &mut zk::PersistentWatcher) -> Option<zk::WatchedEvent> {
    let mut next = std::pin::pin!(watcher.changed());
    let mut cx = Context::from_waker(Waker::noop());
    match next.as_mut().poll(&mut cx) {
        Poll::Ready(e) => Some(e),
        Poll::Pending => None,
    }
}

/// The registry events of a burst of node events, in order.
///
/// A created or changed node's data and stat come from the first of these that knows them:
/// the journal of this client's own writes (see [`crate::journal`]); a deletion of the node
/// later in the burst (the node is gone by any read made now, and the deletion is reported);
/// else one multi-read of all the nodes left, made once the burst has taken what arrived
/// while it waited for the journal. A node read stands for its later events of the burst as
/// well: the read shows the node after them, and a journal state of one of them, older, would
/// take the node back in time. The event of a node that cannot be read ([`Read::Stop`]) is
/// skipped, the others of the burst are kept.
async fn node_events(
    inner: &Weak<Inner>,
    own: &Own,
    burst: Vec<zk::WatchedEvent>,
    arrived: &mut Arrived<'_>,
    vanished: &mut HashSet<NodePath>,
) -> Vec<RegistryEvent> {
    let patience = match inner.upgrade() {
        Some(i) => i.config.request_timeout,
        None => return Vec::new(),
    };
    let mut events: Vec<(zk::EventType, NodePath)> = Vec::with_capacity(burst.len());
    let mut known: Vec<Option<After>> = Vec::with_capacity(burst.len());
    let mut more = burst;
    let first_reads = loop {
        for (event_type, path) in more
            .drain(..)
            .filter_map(|e| node_path(&e.path).map(|p| (e.event_type, p)))
        {
            // Every notification takes its path's first journal entry, in order, deletions
            // too.
            known.push(own.journal.next_state(&path, patience).await);
            events.push((event_type, path));
        }
        let first_reads = first_reads(&events, &known);
        // Before reading, take the notifications that have arrived meanwhile (the rest of a
        // transaction's, another client's, often come while the journal waited for an
        // answer): one read serves them all. Up to the burst's size. Not a moment longer:
        // the read is sent as soon as it could be (a change followed at once by a deletion
        // shows only as the deletion when the read comes after both).
        let room = MAX_BURST.saturating_sub(events.len());
        if first_reads.is_empty() || arrived.stash.is_some() || room == 0 {
            break first_reads;
        }
        take_arrived(arrived.watcher, &mut more, arrived.stash, room);
        if more.is_empty() {
            break first_reads;
        }
    };
    let paths: Vec<&NodePath> = first_reads.keys().collect();
    let read: HashMap<NodePath, Read> = paths
        .iter()
        .map(|p| (*p).clone())
        .zip(read_many(inner, own, &paths).await)
        .collect();
    let deleted_later = deleted_later(&events);
    let mut out = Vec::with_capacity(events.len());
    for (i, (((event_type, path), known), deleted_later)) in
        events.into_iter().zip(known).zip(deleted_later).enumerate()
    {
        match event_type {
            zk::EventType::NodeCreated | zk::EventType::NodeDataChanged => {
                let kind = if event_type == zk::EventType::NodeCreated {
                    WatchEventKind::Created
                } else {
                    WatchEventKind::Changed
                };
                let result = match (first_reads.get(&path), known) {
                    (Some(first), _) if i >= *first => {
                        read.get(&path).cloned().unwrap_or(Read::Stop)
                    }
                    (_, Some(After::Exists(data, stat))) => Read::Node(data, stat),
                    (_, Some(After::Gone)) => Read::Gone,
                    (_, None) if deleted_later => Read::Gone,
                    // Not reached: an unknown node without a later deletion is read.
                    (_, None) => Read::Stop,
                };
                match result {
                    Read::Node(data, stat) => {
                        vanished.remove(&path);
                        out.push(RegistryEvent::Node(WatchEvent {
                            kind,
                            path,
                            data,
                            stat: Some(stat),
                            // ZooKeeper's events carry no zxid (the stat is read after the
                            // event); its watch and reads on one session come in order.
                            revision: None,
                        }));
                    }
                    Read::Gone => {
                        if kind == WatchEventKind::Created {
                            vanished.insert(path);
                        }
                    }
                    Read::Stop => {}
                }
            }
            zk::EventType::NodeDeleted => {
                if vanished.remove(&path) {
                    continue;
                }
                out.push(RegistryEvent::Node(WatchEvent {
                    kind: WatchEventKind::Deleted,
                    path,
                    data: Vec::new(),
                    stat: None,
                    revision: None,
                }));
            }
            _ => {}
        }
    }
    out
}

/// For each event, whether a deletion of its node comes later in the burst.
fn deleted_later(events: &[(zk::EventType, NodePath)]) -> Vec<bool> {
    let mut later = vec![false; events.len()];
    let mut deletions: HashSet<&NodePath> = HashSet::new();
    for (i, (event_type, path)) in events.iter().enumerate().rev() {
        later[i] = deletions.contains(path);
        if *event_type == zk::EventType::NodeDeleted {
            deletions.insert(path);
        }
    }
    later
}

/// The nodes of a burst whose data must be read, each with the position of its first event
/// that needs it: a creation or change that neither the journal knows (`known`) nor a later
/// deletion in the burst settles. Ordered by path, so reads do not depend on hashing.
fn first_reads(
    events: &[(zk::EventType, NodePath)],
    known: &[Option<After>],
) -> BTreeMap<NodePath, usize> {
    let later = deleted_later(events);
    let mut first = BTreeMap::new();
    for (i, (event_type, path)) in events.iter().enumerate() {
        if matches!(
            event_type,
            zk::EventType::NodeCreated | zk::EventType::NodeDataChanged
        ) && known[i].is_none()
            && !later[i]
        {
            first.entry(path.clone()).or_insert(i);
        }
    }
    first
}

/// Reads several nodes in one request (ZooKeeper's multi-read), one read per node when there
/// is only one. Falls back to [`read`] (with its retries) for a node whose result is an error
/// other than `NoNode`, and for every node when the request fails as a whole.
///
/// Each request is queued under the client's write lock, after forgetting the journal's
/// entries of the nodes read: those writes were sent before the read, which shows them or
/// later changes, so their states must not stand for a later notification (see
/// [`Journals::reading`]).
async fn read_many(inner: &Weak<Inner>, own: &Own, paths: &[&NodePath]) -> Vec<Read> {
    let batch = if paths.len() > 1 {
        let results = attempt(inner, |session| async move {
            let mut reader = session.client.new_multi_reader();
            for p in paths {
                reader
                    .add_get_data(p.as_str())
                    .map_err(|e| map_error(e, p, None))?;
            }
            let request = {
                let _reading = own.journals.reading(&own.journal, paths);
                reader.commit()
            };
            request
                .await
                .map_err(|e| map_error(e, &NodePath::root(), None))
        })
        .await;
        match results {
            Some(Ok(results)) if results.len() == paths.len() => Some(results),
            Some(Ok(_)) => {
                tracing::debug!("a multi-read of watched nodes answered the wrong count");
                None
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "the multi-read of watched nodes failed");
                None
            }
            None => None,
        }
    } else {
        None
    };
    let mut out = Vec::with_capacity(paths.len());
    match batch {
        Some(results) => {
            for (p, r) in paths.iter().zip(results) {
                out.push(match r {
                    zk::MultiReadResult::Data { data, stat } => Read::Node(data, map_stat(&stat)),
                    zk::MultiReadResult::Error {
                        err: zk::Error::NoNode,
                    } => Read::Gone,
                    _ => read(inner, own, p).await,
                });
            }
        }
        None => {
            for p in paths {
                out.push(read(inner, own, p).await);
            }
        }
    }
    out
}

/// Reads a node for an event, retrying transient failures until the session ends; each
/// attempt as [`read_many`]'s.
async fn read(inner: &Weak<Inner>, own: &Own, path: &NodePath) -> Read {
    let mut retries = Backoff::new(Duration::from_millis(20), Duration::from_millis(500)).retries();
    loop {
        let result = attempt(inner, |session| async move {
            let request = {
                let _reading = own.journals.reading(&own.journal, &[path]);
                session.client.get_data(path.as_str())
            };
            request.await.map_err(|e| map_error(e, path, None))
        })
        .await;
        let Some(result) = result else {
            return Read::Stop;
        };
        match result {
            Ok((data, stat)) => return Read::Node(data, map_stat(&stat)),
            Err(RegistryError::NoNode(_)) => return Read::Gone,
            Err(RegistryError::SessionExpired | RegistryError::Closed) => return Read::Stop,
            Err(RegistryError::NotAuthorized(msg)) => {
                tracing::warn!(%path, %msg, "cannot read a watched node");
                return Read::Stop;
            }
            Err(RegistryError::Timeout) => {
                tracing::debug!(%path, "the read of a watched node timed out; retrying")
            }
            Err(e) => tracing::debug!(%path, error = %e, "retrying the read of a watched node"),
        }
        tokio::time::sleep(retries.next_pause()).await;
    }
}

/// One request for a stream: `f` on the live session, waiting for the session and the
/// request together bounded by the request deadline ([`RegistryError::Timeout`] past it).
/// `None` when the registry is gone.
async fn attempt<T, F, Fut>(inner: &Weak<Inner>, f: F) -> Option<Result<T, RegistryError>>
where
    F: FnOnce(Arc<Session>) -> Fut,
    Fut: Future<Output = Result<T, RegistryError>>,
{
    let strong = inner.upgrade()?;
    let work = async {
        let session = strong.session().await?;
        f(session).await
    };
    let result = tokio::time::timeout(strong.config.request_timeout, work)
        .await
        .unwrap_or(Err(RegistryError::Timeout));
    Some(result)
}

/// After a reconnection: watches `root` again in the same session.
async fn rewatch(
    inner: &Weak<Inner>,
    root: &NodePath,
    id: SessionId,
) -> Option<zk::PersistentWatcher> {
    for attempt in 0..5u32 {
        let strong = inner.upgrade()?;
        let session = strong.current.borrow().clone()?;
        if session.info.id != id || strong.is_closed() {
            return None;
        }
        let timeout = strong.config.request_timeout;
        drop(strong);
        let watched = tokio::time::timeout(
            timeout,
            session
                .client
                .watch(root.as_str(), zk::AddWatchMode::PersistentRecursive),
        )
        .await;
        match watched {
            Ok(Ok(w)) => return Some(w),
            Ok(Err(zk::Error::SessionExpired | zk::Error::ClientClosed)) => return None,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, attempt, "cannot watch again after a reconnection")
            }
            Err(_) => tracing::debug!(attempt, "watching again after a reconnection timed out"),
        }
        tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
    }
    None
}

/// After an expiry: waits for the next session and watches `root` on it again.
async fn renew(
    inner: &Weak<Inner>,
    root: &NodePath,
    old: SessionId,
    tx: &mpsc::UnboundedSender<RegistryEvent>,
) -> Option<(zk::PersistentWatcher, SessionInfo)> {
    loop {
        let strong = inner.upgrade()?;
        if strong.is_closed() || tx.is_closed() {
            return None;
        }
        let mut rx = strong.current.subscribe();
        drop(strong);
        // Wait for a session other than the expired one.
        let session = loop {
            let cur = rx.borrow_and_update().clone();
            match cur {
                Some(s) if s.info.id != old && !s.client.state().is_terminated() => break s,
                _ => {}
            }
            tokio::select! {
                changed = rx.changed() => changed.ok()?,
                () = tx.closed() => return None,
            }
        };
        drop(rx);
        let watched = tokio::time::timeout(
            Duration::from_secs(10),
            session
                .client
                .watch(root.as_str(), zk::AddWatchMode::PersistentRecursive),
        )
        .await;
        match watched {
            Ok(Ok(w)) => return Some((w, session.info)),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot watch again after an expiry"),
            Err(_) => tracing::warn!("watching again after an expiry timed out"),
        }
        drop(session);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
