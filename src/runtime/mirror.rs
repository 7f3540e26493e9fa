//! The instance's local copy of its jobs' nodes, for the dump port's cache column.
//!
//! The machine keeps facts, not nodes ([`shardjob_core::machine`]'s cache), so there is no
//! path → value map to show beside the registry. When the dump port is on, the driver keeps
//! one: each job's subtree as the machine is handed it — the snapshot of a load (the newest
//! load only, as the machine takes it), then the watch events of the job, those that came
//! while the load was under way applied after its snapshot, as the machine does (and, as it
//! does, none whose revision is at or below the one the snapshot was read at). It is what
//! this instance's watch has delivered: a node whose copy differs from the registry is an
//! event not yet delivered (or lost), which is what ElasticJob's cache column shows. Off (not
//! kept at all) when the dump port is off.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use shardjob_core::registry::{
    Node, NodePath, RegistryReply, RequestId, Revision, WatchEvent, WatchEventKind,
};

/// How many nodes are compared per hold of the lock by [`Mirror::beside`]: the driver waits
/// for at most that many look-ups, however large the job.
const COMPARED_PER_LOCK: usize = 256;

/// One job's copy.
#[derive(Debug, Default)]
struct JobCopy {
    /// Path → data, once a load has arrived.
    nodes: Option<BTreeMap<NodePath, Vec<u8>>>,
    /// The revision the copy's snapshot was read at, if the backend tells it: events at or
    /// below it are in the snapshot already.
    floor: Option<Revision>,
    /// The load under way, and the events that came meanwhile.
    loading: Option<(RequestId, Vec<WatchEvent>)>,
}

impl JobCopy {
    fn apply(&mut self, event: &WatchEvent) {
        if let Some((_, buffer)) = &mut self.loading {
            buffer.push(event.clone());
        } else if let Some(nodes) = &mut self.nodes {
            apply(nodes, self.floor, event);
        }
    }
}

fn apply(nodes: &mut BTreeMap<NodePath, Vec<u8>>, floor: Option<Revision>, event: &WatchEvent) {
    if event.is_in(floor) {
        return;
    }
    if event.kind == WatchEventKind::Deleted {
        nodes.remove(&event.path);
    } else {
        nodes.insert(event.path.clone(), event.data.clone());
    }
}

/// The copies of the hosted jobs' subtrees, shared by the driver (which writes) and the dump
/// port (which reads). Every lock is held for one map update or a few hundred look-ups.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mirror {
    jobs: Arc<Mutex<HashMap<String, JobCopy>>>,
}

impl Mirror {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, JobCopy>> {
        // A panic while the lock was held left at worst one event unapplied.
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The machine asked for a load of `job`'s subtree (request `id`): events from now on wait
    /// for its snapshot.
    pub fn load_started(&self, job: &str, id: RequestId) {
        self.lock().entry(job.to_owned()).or_default().loading = Some((id, Vec::new()));
    }

    /// A reply came for request `id`, a load of `job` (`nodes` when it succeeded). A load
    /// that a later one replaced is dropped, as the machine drops it.
    pub fn load_done(&self, job: &str, id: RequestId, reply: &RegistryReply) {
        let mut jobs = self.lock();
        let Some(copy) = jobs.get_mut(job) else {
            return;
        };
        let Some((current, _)) = &copy.loading else {
            return;
        };
        if *current != id {
            return;
        }
        let Some((_, buffer)) = copy.loading.take() else {
            return;
        };
        if let RegistryReply::Tree(tree) = reply {
            let mut nodes: BTreeMap<NodePath, Vec<u8>> = tree
                .nodes
                .iter()
                .map(|n| (n.path.clone(), n.data.clone()))
                .collect();
            for event in &buffer {
                apply(&mut nodes, tree.revision, event);
            }
            copy.nodes = Some(nodes);
            copy.floor = tree.revision;
        }
        // A failed load: the machine tries again later; the copy stays as it was.
    }

    /// A watch event (of any job: those not kept are skipped).
    pub fn event(&self, event: &WatchEvent) {
        let Some(job) = event.path.segments().next() else {
            return;
        };
        if let Some(copy) = self.lock().get_mut(job) {
            copy.apply(event);
        }
    }

    /// The instance left `job`: its copy goes.
    pub fn forget(&self, job: &str) {
        self.lock().remove(job);
    }

    /// A copy of `job`'s nodes, if the job is hosted here and loaded.
    #[cfg(test)]
    pub fn job(&self, job: &str) -> Option<BTreeMap<NodePath, Vec<u8>>> {
        self.lock().get(job).and_then(|c| c.nodes.clone())
    }

    /// This instance's copy of the registry's `nodes` of `job` (path → data; a node the copy
    /// lacks is absent), as [`shardjob_ops::format_dump`] takes it; `None` if the job is not
    /// hosted here or not loaded yet. Compared a few hundred nodes per hold of the lock, so a
    /// large job never holds the driver up; the copy may move between two holds, as it would
    /// between two reads.
    pub fn beside(&self, job: &str, nodes: &[Node]) -> Option<BTreeMap<NodePath, Vec<u8>>> {
        /// What the copy holds of one node.
        enum Held {
            Same,
            Other(Vec<u8>),
            Missing,
        }
        let mut held = Vec::with_capacity(nodes.len());
        for chunk in nodes.chunks(COMPARED_PER_LOCK) {
            let jobs = self.lock();
            let copy = jobs.get(job)?.nodes.as_ref()?;
            held.extend(chunk.iter().map(|node| match copy.get(&node.path) {
                Some(data) if *data == node.data => Held::Same,
                Some(data) => Held::Other(data.clone()),
                None => Held::Missing,
            }));
        }
        Some(
            nodes
                .iter()
                .zip(held)
                .filter_map(|(node, held)| match held {
                    Held::Same => Some((node.path.clone(), node.data.clone())),
                    Held::Other(data) => Some((node.path.clone(), data)),
                    Held::Missing => None,
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::registry::{Node, Revision, Stat, Tree, Version};

    fn path(p: &str) -> NodePath {
        NodePath::new(p).unwrap()
    }

    fn event(kind: WatchEventKind, p: &str, data: &str) -> WatchEvent {
        WatchEvent {
            kind,
            path: path(p),
            data: data.as_bytes().to_vec(),
            stat: None,
            revision: None,
        }
    }

    fn tree(nodes: &[(&str, &str)]) -> RegistryReply {
        RegistryReply::Tree(Tree {
            nodes: nodes
                .iter()
                .map(|(p, d)| Node {
                    path: path(p),
                    data: d.as_bytes().to_vec(),
                    stat: Stat {
                        version: Version(0),
                        created: Revision(1),
                        modified: Revision(1),
                        ephemeral_owner: None,
                        mtime_ms: None,
                    },
                })
                .collect(),
            revision: None,
        })
    }

    #[test]
    fn a_load_then_the_events_of_meanwhile_then_live_events() {
        let m = Mirror::default();
        // Unknown jobs are not kept.
        m.event(&event(WatchEventKind::Created, "/other/x", "1"));
        assert_eq!(m.job("other"), None);
        m.load_started("j", RequestId(1));
        m.event(&event(WatchEventKind::Created, "/j/b", "2"));
        assert_eq!(m.job("j"), None, "nothing before the snapshot");
        m.load_done("j", RequestId(1), &tree(&[("/j", ""), ("/j/a", "1")]));
        let nodes = m.job("j").unwrap();
        assert_eq!(nodes.get(&path("/j/a")).unwrap(), b"1");
        assert_eq!(nodes.get(&path("/j/b")).unwrap(), b"2");
        m.event(&event(WatchEventKind::Deleted, "/j/a", ""));
        m.event(&event(WatchEventKind::Changed, "/j/b", "3"));
        let nodes = m.job("j").unwrap();
        assert_eq!(nodes.get(&path("/j/a")), None);
        assert_eq!(nodes.get(&path("/j/b")).unwrap(), b"3");
        m.forget("j");
        assert_eq!(m.job("j"), None);
    }

    #[test]
    fn beside_the_registry_in_chunks() {
        let m = Mirror::default();
        let owned: Vec<(String, String)> = (0..600)
            .map(|i| (format!("/j/n{i}"), i.to_string()))
            .collect();
        let pairs: Vec<(&str, &str)> = owned.iter().map(|(p, d)| (&p[..], &d[..])).collect();
        let RegistryReply::Tree(Tree {
            nodes: registry, ..
        }) = tree(&pairs)
        else {
            unreachable!("tree() makes a tree")
        };
        assert_eq!(m.beside("j", &registry), None, "not hosted");
        m.load_started("j", RequestId(1));
        let reply = RegistryReply::Tree(Tree {
            nodes: registry.clone(),
            revision: None,
        });
        m.load_done("j", RequestId(1), &reply);
        m.event(&event(WatchEventKind::Changed, "/j/n300", "old"));
        m.event(&event(WatchEventKind::Deleted, "/j/n599", ""));
        let copy = m.beside("j", &registry).unwrap();
        assert_eq!(copy.len(), 599);
        assert_eq!(copy.get(&path("/j/n0")).unwrap(), b"0");
        assert_eq!(copy.get(&path("/j/n300")).unwrap(), b"old");
        assert_eq!(copy.get(&path("/j/n599")), None);
    }

    #[test]
    fn a_replaced_load_is_dropped_and_a_failed_one_keeps_the_copy() {
        let m = Mirror::default();
        m.load_started("j", RequestId(1));
        m.load_done("j", RequestId(1), &tree(&[("/j/a", "old")]));
        m.load_started("j", RequestId(2));
        m.load_started("j", RequestId(3));
        m.load_done("j", RequestId(2), &tree(&[("/j/a", "stale")]));
        assert_eq!(m.job("j").unwrap().get(&path("/j/a")).unwrap(), b"old");
        m.load_done(
            "j",
            RequestId(3),
            &RegistryReply::Failed(shardjob_core::registry::RegistryError::Timeout),
        );
        assert_eq!(m.job("j").unwrap().get(&path("/j/a")).unwrap(), b"old");
    }

    /// Events at or below the snapshot's revision are in it already: one that comes during
    /// the load, or after it, does not undo a later change; a later event applies.
    #[test]
    fn events_older_than_the_snapshot_are_skipped() {
        let at = |kind, p: &str, rev: u64| WatchEvent {
            revision: Some(Revision(rev)),
            ..event(kind, p, "")
        };
        let m = Mirror::default();
        m.load_started("j", RequestId(1));
        m.event(&at(WatchEventKind::Deleted, "/j/a", 4));
        let RegistryReply::Tree(mut snapshot) = tree(&[("/j", ""), ("/j/a", "")]) else {
            unreachable!("tree() makes a tree")
        };
        snapshot.revision = Some(Revision(5));
        m.load_done("j", RequestId(1), &RegistryReply::Tree(snapshot));
        assert!(m.job("j").unwrap().contains_key(&path("/j/a")));
        m.event(&at(WatchEventKind::Deleted, "/j/a", 5));
        assert!(m.job("j").unwrap().contains_key(&path("/j/a")));
        m.event(&at(WatchEventKind::Deleted, "/j/a", 6));
        assert!(!m.job("j").unwrap().contains_key(&path("/j/a")));
    }
}
