//! Event streams: one etcd prefix watch each, resumed by revision, with the session's events.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client as etcd;
use shardjob_core::backoff::Backoff;
use shardjob_core::registry::{
    EventStream, NodePath, RegistryError, RegistryEvent, Revision, SessionEvent, WatchEvent,
    WatchEventKind,
};
use tokio::sync::{broadcast, mpsc};

use crate::{Inner, map_stat};

struct EtcdEventStream {
    rx: mpsc::UnboundedReceiver<RegistryEvent>,
    task: tokio::task::JoinHandle<()>,
}

#[async_trait]
impl EventStream for EtcdEventStream {
    async fn next(&mut self) -> Option<RegistryEvent> {
        self.rx.recv().await
    }
}

impl Drop for EtcdEventStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens the watch (returning once etcd confirmed it) and starts the stream's task.
pub(crate) async fn start(
    inner: &Arc<Inner>,
    root: &NodePath,
) -> Result<Box<dyn EventStream>, RegistryError> {
    if inner.is_closed() {
        return Err(RegistryError::Closed);
    }
    let sessions = inner.events.subscribe();
    let key = inner.key(root);
    let timeout = inner.config.request_timeout;
    let (ws, next_rev) = tokio::time::timeout(timeout, open(inner, &key, None))
        .await
        .map_err(|_| RegistryError::Timeout)??
        .map_err(|_| RegistryError::Backend("etcd refused the watch".to_owned()))?;
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(run(
        Arc::downgrade(inner),
        root.clone(),
        key,
        ws,
        next_rev,
        sessions,
        tx,
    ));
    Ok(Box::new(EtcdEventStream { rx, task }))
}

/// The watch was refused because its start revision is compacted.
struct Compacted;

/// Opens a prefix watch of `key` from `start` (or now) and waits for etcd's confirmation.
/// Returns the stream and the revision of the next event it delivers.
async fn open(
    inner: &Inner,
    key: &str,
    start: Option<i64>,
) -> Result<Result<(etcd::WatchStream, i64), Compacted>, RegistryError> {
    let mut opts = etcd::WatchOptions::new().with_prefix();
    if let Some(rev) = start {
        opts = opts.with_start_revision(rev);
    }
    let mut c = inner.client.clone();
    let mut ws = c.watch(key, Some(opts)).await.map_err(|e| inner.error(e))?;
    loop {
        let Some(resp) = ws.message().await.map_err(|e| inner.error(e))? else {
            return Err(RegistryError::ConnectionLoss);
        };
        if resp.compact_revision() > 0 || (resp.canceled() && start.is_some()) {
            return Ok(Err(Compacted));
        }
        if resp.canceled() {
            return Err(RegistryError::Backend(format!(
                "etcd cancelled the watch: {}",
                resp.cancel_reason()
            )));
        }
        if resp.created() {
            let next = match start {
                Some(rev) => rev,
                None => resp.header().map_or(1, |h| h.revision() + 1),
            };
            return Ok(Ok((ws, next)));
        }
    }
}

async fn run(
    inner: Weak<Inner>,
    root: NodePath,
    key: String,
    mut ws: etcd::WatchStream,
    mut next_rev: i64,
    mut sessions: broadcast::Receiver<SessionEvent>,
    tx: mpsc::UnboundedSender<RegistryEvent>,
) {
    loop {
        // Deliver until the watch stream fails.
        let failed = loop {
            tokio::select! {
                biased;
                () = tx.closed() => return,
                session = sessions.recv() => match session {
                    Ok(SessionEvent::Closed) | Err(broadcast::error::RecvError::Closed) => {
                        let _ = tx.send(RegistryEvent::Session(SessionEvent::Closed));
                        return;
                    }
                    Ok(e) => {
                        if tx.send(RegistryEvent::Session(e)).is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "a watch stream missed session events");
                    }
                },
                msg = ws.message() => match msg {
                    Ok(Some(resp)) => {

                        if resp.canceled() || resp.compact_revision() > 0 {
                            break resp.compact_revision() > 0;
                        }
                        let Some(strong) = inner.upgrade() else { return };
                        for ev in resp.events() {
                            let Some(kv) = ev.kv() else { continue };
                            next_rev = next_rev.max(kv.mod_revision() + 1);
                            let revision = Revision(kv.mod_revision().max(0) as u64);
                            let Some(path) = strong.path_of(kv.key()) else { continue };
                            if !root.contains(&path) {
                                continue;
                            }
                            let event = match ev.event_type() {
                                etcd::EventType::Put => WatchEvent {
                                    kind: if kv.create_revision() == kv.mod_revision() {
                                        WatchEventKind::Created
                                    } else {
                                        WatchEventKind::Changed
                                    },
                                    path,
                                    data: kv.value().to_vec(),
                                    stat: Some(map_stat(kv)),
                                    revision: Some(revision),
                                },
                                // A delete event's kv holds the key and, as its
                                // `mod_revision`, the revision of the deletion.
                                etcd::EventType::Delete => WatchEvent {
                                    kind: WatchEventKind::Deleted,
                                    path,
                                    data: Vec::new(),
                                    stat: None,
                                    revision: Some(revision),
                                },
                            };
                            if tx.send(RegistryEvent::Node(event)).is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) | Err(_) => break false,
                },
            }
        };
        let mut compacted = failed;
        // Open the watch again from where it stopped.
        let mut retries = Backoff::new(Duration::from_millis(50), Duration::from_secs(1)).retries();
        ws = loop {
            let Some(strong) = inner.upgrade() else {
                return;
            };
            if strong.is_closed() {
                let _ = tx.send(RegistryEvent::Session(SessionEvent::Closed));
                return;
            }
            strong.nudge.notify_one();
            // Session events keep flowing while the watch is down.
            if !forward_pending(&mut sessions, &tx) {
                return;
            }
            let start = if compacted { None } else { Some(next_rev) };
            // Opening a watch is quick when the member is there: do not wait on a dead one.
            let timeout = strong
                .config
                .connect_timeout
                .max(Duration::from_secs(1))
                .min(strong.config.request_timeout);
            let opened = tokio::time::timeout(timeout, open(&strong, &key, start)).await;
            match opened {
                Ok(Ok(Ok((ws, next)))) => {
                    if compacted {
                        // Changes were lost: tell the consumer to reload. (Without a lease
                        // right now, the Expired/Connected pair on its way says so.)
                        if let Some(info) = strong.lease() {
                            let _ =
                                tx.send(RegistryEvent::Session(SessionEvent::Suspended(info.id)));
                            let _ =
                                tx.send(RegistryEvent::Session(SessionEvent::Reconnected(info.id)));
                        }
                        tracing::warn!(%root, "etcd compacted past the watch; resynchronising");
                    }
                    next_rev = next;
                    break ws;
                }
                Ok(Ok(Err(Compacted))) => compacted = true,
                Ok(Err(e)) => tracing::debug!(error = %e, "cannot watch again yet"),
                Err(_) => tracing::debug!("watching again timed out"),
            }
            drop(strong);
            tokio::select! {
                () = tx.closed() => return,
                () = tokio::time::sleep(retries.next_pause()) => {}
            }
        };
    }
}

/// Forwards the session events already queued; `false` once the stream should end.
fn forward_pending(
    sessions: &mut broadcast::Receiver<SessionEvent>,
    tx: &mpsc::UnboundedSender<RegistryEvent>,
) -> bool {
    loop {
        match sessions.try_recv() {
            Ok(SessionEvent::Closed) | Err(broadcast::error::TryRecvError::Closed) => {
                let _ = tx.send(RegistryEvent::Session(SessionEvent::Closed));
                return false;
            }
            Ok(e) => {
                if tx.send(RegistryEvent::Session(e)).is_err() {
                    return false;
                }
            }
            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "a watch stream missed session events");
            }
            Err(broadcast::error::TryRecvError::Empty) => return true,
        }
    }
}
