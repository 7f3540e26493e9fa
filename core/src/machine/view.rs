//! A job's subtree as the machine caches it, and the facts read off it.
//!
//! The cache keeps every node of one job and, beside it, the [`JobView`] of the facts decisions
//! need. The view is kept current node by node as events arrive (an event changes one field of
//! the view), so a decision never re-reads the whole subtree; [`JobView::read`] rebuilds it from
//! scratch, and debug builds check now and then that both agree.

use std::collections::{BTreeMap, BTreeSet};

use crate::instance::InstanceId;
use crate::layout::{ItemLeaf, JobNode};
use crate::registry::{Node, NodePath, Revision, Stat, Version, WatchEvent, WatchEventKind};

use super::record::ItemRecord;

/// One cached node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cached {
    pub data: Vec<u8>,
    pub stat: Stat,
}

/// The nodes under one job root, kept current by watch events.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    pub nodes: BTreeMap<NodePath, Cached>,
    /// The highest modification revision seen in the job's events or snapshot.
    pub seen: Option<Revision>,
    /// Grows with every change, so readers can tell a cache they have read already.
    pub version: u64,
    /// Grows with every change that can bear on the sharding plan (anything but the items'
    /// run markers, run records, flags and triggers), so the leader can tell that a plan found
    /// sound is still sound without working it out again.
    pub plan_version: u64,
    /// The facts read off `nodes`, kept in step with them; `None` while a decision has it.
    pub view: Option<JobView>,
}

impl Cache {
    pub fn load(&mut self, nodes: Vec<Node>) {
        self.version += 1;
        self.plan_version += 1;
        self.nodes.clear();
        let mut view = JobView::default();
        for node in nodes {
            self.note(node.stat.modified);
            let cached = Cached {
                data: node.data,
                stat: node.stat,
            };
            view.set(&node.path, &cached, true);
            self.nodes.insert(node.path, cached);
        }
        self.view = Some(view);
    }

    pub fn apply(&mut self, event: WatchEvent) {
        self.version += 1;
        if bears_on_plan(&event.path) {
            self.plan_version += 1;
        }
        let WatchEvent {
            kind,
            path,
            data,
            stat,
        } = event;
        let stat = match (kind, stat) {
            (WatchEventKind::Deleted, _) => {
                if self.nodes.remove(&path).is_some() {
                    if let Some(view) = self.view.as_mut() {
                        view.unset(&path);
                    }
                }
                self.check_view();
                return;
            }
            (_, Some(stat)) => {
                self.note(stat.modified);
                stat
            }
            // A created/changed event without metadata: keep the data, and the old metadata
            // if there is one (a backend that cannot tell the stat). Conditional writes on
            // such a node may fail and are then retried after a reload.
            (_, None) => self.nodes.get(&path).map(|c| c.stat).unwrap_or(Stat {
                version: Version(-1),
                created: Revision(0),
                modified: Revision(0),
                ephemeral_owner: None,
            }),
        };
        let cached = Cached { data, stat };
        let new = !self.nodes.contains_key(&path);
        if let Some(view) = self.view.as_mut() {
            view.set(&path, &cached, new);
        }
        self.nodes.insert(path, cached);
        self.check_view();
    }

    /// Debug builds: every 64th change, the kept view must equal one read from scratch.
    fn check_view(&self) {
        #[cfg(debug_assertions)]
        if self.version % 64 == 0 {
            if let Some(view) = &self.view {
                debug_assert_eq!(*view, JobView::read(self), "the kept view drifted");
            }
        }
    }

    /// Takes the view out for a decision (read from scratch if it is out already).
    pub fn take_view(&mut self) -> JobView {
        self.view.take().unwrap_or_else(|| JobView::read(self))
    }

    /// Gives back a view taken at cache version `version`.
    pub fn give_back(&mut self, version: u64, view: JobView) {
        if self.view.is_none() {
            self.view = Some(if self.version == version {
                view
            } else {
                JobView::read(self)
            });
        }
    }

    fn note(&mut self, r: Revision) {
        if self.seen.is_none_or(|s| r > s) {
            self.seen = Some(r);
        }
    }

    pub fn get(&self, path: &NodePath) -> Option<&Cached> {
        self.nodes.get(path)
    }

    pub fn contains(&self, path: &NodePath) -> bool {
        self.nodes.contains_key(path)
    }

    pub fn text(&self, path: &NodePath) -> Option<&str> {
        self.nodes
            .get(path)
            .and_then(|c| std::str::from_utf8(&c.data).ok())
    }

    /// Every path under `root` (excluded), deepest first, so they can be deleted in order.
    pub fn descendants_deepest_first(&self, root: &NodePath) -> Vec<NodePath> {
        let mut out: Vec<NodePath> = self
            .nodes
            .range(root.clone()..)
            .take_while(|(p, _)| root.contains(p))
            .filter(|(p, _)| *p != root)
            .map(|(p, _)| p.clone())
            .collect();
        out.sort_by_key(|p| std::cmp::Reverse(p.segments().count()));
        out
    }
}

/// Whether a change of the node at `path` can change what a re-shard decides: everything
/// but the items' run markers, records and flags, and triggers.
fn bears_on_plan(path: &NodePath) -> bool {
    !matches!(
        JobNode::parse(path),
        Some((
            _,
            JobNode::ItemState(
                _,
                ItemLeaf::Running
                    | ItemLeaf::Execution
                    | ItemLeaf::Misfire
                    | ItemLeaf::Failover
                    | ItemLeaf::Failovering
                    | ItemLeaf::Disabled
            ) | JobNode::Trigger(_)
        ))
    )
}

/// One item's state read off the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ItemView {
    pub exists: bool,
    pub owner: Option<InstanceId>,
    pub owner_stat: Option<Stat>,
    /// The `running` marker: who, and its metadata.
    pub running: Option<(String, Stat)>,
    pub disabled: bool,
    pub failover: Option<Stat>,
    pub record: Option<(ItemRecord, Version)>,
    /// How many cached nodes belong to the item (its entry goes when the last one does).
    nodes: u32,
}

/// The facts of one job that decisions need.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct JobView {
    pub instances: BTreeSet<InstanceId>,
    pub servers: BTreeMap<String, String>,
    pub leader: Option<String>,
    pub necessary: Option<Version>,
    /// The latest fire done by items since removed (the `sharding` node's record).
    pub sharding_done: Option<i64>,
    /// Boxed: a map node holds room for eleven entries, and most jobs have a few items.
    pub items: BTreeMap<u32, Box<ItemView>>,
    pub triggers: BTreeMap<InstanceId, String>,
    pub corrupt: BTreeMap<NodePath, String>,
}

fn text(node: &Cached) -> String {
    String::from_utf8_lossy(&node.data).into_owned()
}

impl JobView {
    /// Reads the view of every node in the cache from scratch.
    pub fn read(cache: &Cache) -> JobView {
        let mut v = JobView::default();
        for (path, node) in &cache.nodes {
            v.set(path, node, true);
        }
        v
    }

    /// A node was created (`new`) or changed.
    fn set(&mut self, path: &NodePath, node: &Cached, new: bool) {
        let Some((_, what)) = JobNode::parse(path) else {
            return;
        };
        match what {
            JobNode::Instance(id) => {
                self.instances.insert(id);
            }
            JobNode::Server(ip) => {
                self.servers.insert(ip, text(node));
            }
            JobNode::LeaderInstance => self.leader = Some(text(node)),
            JobNode::ShardingNecessary => self.necessary = Some(node.stat.version),
            // Empty in ElasticJob's layout; anything unreadable counts as no mark.
            JobNode::Sharding => {
                self.sharding_done = ItemRecord::parse(&node.data).ok().and_then(|r| r.done);
            }
            JobNode::Item(i) => {
                let item = self.item(i, new);
                item.exists = true;
            }
            JobNode::ItemState(i, leaf) => {
                let mut problem = None;
                let item = self.item(i, new);
                match leaf {
                    ItemLeaf::Instance => {
                        let value = text(node);
                        match InstanceId::new(value.trim()) {
                            Ok(id) => item.owner = Some(id),
                            Err(e) => {
                                item.owner = None;
                                if !value.trim().is_empty() {
                                    problem = Some(e.to_string());
                                }
                            }
                        }
                        item.owner_stat = Some(node.stat);
                    }
                    ItemLeaf::Running => item.running = Some((text(node), node.stat)),
                    ItemLeaf::Disabled => item.disabled = true,
                    ItemLeaf::Failover => item.failover = Some(node.stat),
                    ItemLeaf::Execution => match ItemRecord::parse(&node.data) {
                        Ok(r) => item.record = Some((r, node.stat.version)),
                        Err(e) => {
                            // Treated as empty and overwritten at the next run: the item
                            // keeps running, and the problem is reported.
                            item.record = Some((ItemRecord::default(), node.stat.version));
                            problem = Some(e);
                        }
                    },
                    ItemLeaf::Misfire | ItemLeaf::Failovering => {}
                }
                match problem {
                    Some(e) => {
                        self.corrupt.insert(path.clone(), e);
                    }
                    None => {
                        self.corrupt.remove(path);
                    }
                }
            }
            JobNode::Trigger(id) => {
                self.triggers.insert(id, text(node));
            }
            _ => {}
        }
    }

    /// A node was deleted.
    fn unset(&mut self, path: &NodePath) {
        let Some((_, what)) = JobNode::parse(path) else {
            return;
        };
        match what {
            JobNode::Instance(id) => {
                self.instances.remove(&id);
            }
            JobNode::Server(ip) => {
                self.servers.remove(&ip);
            }
            JobNode::LeaderInstance => self.leader = None,
            JobNode::ShardingNecessary => self.necessary = None,
            JobNode::Sharding => self.sharding_done = None,
            JobNode::Item(i) => {
                if let Some(item) = self.items.get_mut(&i) {
                    item.exists = false;
                }
                self.release(i);
            }
            JobNode::ItemState(i, leaf) => {
                if let Some(item) = self.items.get_mut(&i) {
                    match leaf {
                        ItemLeaf::Instance => {
                            item.owner = None;
                            item.owner_stat = None;
                        }
                        ItemLeaf::Running => item.running = None,
                        ItemLeaf::Disabled => item.disabled = false,
                        ItemLeaf::Failover => item.failover = None,
                        ItemLeaf::Execution => item.record = None,
                        ItemLeaf::Misfire | ItemLeaf::Failovering => {}
                    }
                }
                self.corrupt.remove(path);
                self.release(i);
            }
            JobNode::Trigger(id) => {
                self.triggers.remove(&id);
            }
            _ => {}
        }
    }

    /// The item's entry; a `new` node is counted.
    fn item(&mut self, i: u32, new: bool) -> &mut ItemView {
        let item = self.items.entry(i).or_default();
        if new {
            item.nodes += 1;
        }
        item
    }

    /// One node of item `i` is gone: drop the entry with the last one.
    fn release(&mut self, i: u32) {
        if let Some(item) = self.items.get_mut(&i) {
            item.nodes = item.nodes.saturating_sub(1);
            if item.nodes == 0 {
                self.items.remove(&i);
            }
        }
    }

    /// Whether a server (by ip) is enabled: its node is absent or not `DISABLED`.
    pub fn server_enabled(&self, ip: &str) -> bool {
        self.servers.get(ip).is_none_or(|v| v.trim() != "DISABLED")
    }

    /// Live instances whose server is enabled.
    pub fn eligible(&self) -> Vec<InstanceId> {
        self.instances
            .iter()
            .filter(|i| self.server_enabled(i.server_ip()))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: WatchEventKind, path: &str, data: &str, rev: u64) -> WatchEvent {
        WatchEvent {
            kind,
            path: NodePath::new(path).unwrap(),
            data: data.as_bytes().to_vec(),
            stat: (kind != WatchEventKind::Deleted).then_some(Stat {
                version: Version(rev as i64),
                created: Revision(rev),
                modified: Revision(rev),
                ephemeral_owner: None,
            }),
        }
    }

    /// The view kept event by event equals the one read from scratch after every step,
    /// through creates, changes, corrupt data and deletes (including the last node of an item).
    #[test]
    fn the_kept_view_equals_a_fresh_read() {
        use WatchEventKind::{Changed, Created, Deleted};
        let steps = [
            (Created, "/j/instances/10.0.0.1@-@1", ""),
            (Created, "/j/servers/10.0.0.1", ""),
            (Changed, "/j/servers/10.0.0.1", "DISABLED"),
            (Created, "/j/sharding/0", ""),
            (Created, "/j/sharding/0/instance", "10.0.0.1@-@1"),
            (Changed, "/j/sharding/0/instance", "not an id"),
            (Changed, "/j/sharding/0/instance", "10.0.0.1@-@1"),
            (Created, "/j/sharding/0/execution", "{broken"),
            (Changed, "/j/sharding/0/execution", r#"{"done":5}"#),
            (Created, "/j/sharding/1/misfire", ""),
            (Created, "/j/sharding/1/running", "x"),
            (Created, "/j/sharding/1/disabled", ""),
            (Created, "/j/leader/election/instance", "10.0.0.1@-@1"),
            (Created, "/j/leader/sharding/necessary", ""),
            (Created, "/j/trigger/10.0.0.1@-@1", "p"),
            (Deleted, "/j/sharding/1/running", ""),
            (Deleted, "/j/sharding/1/misfire", ""),
            (Deleted, "/j/sharding/1/disabled", ""),
            (Changed, "/j/servers/10.0.0.1", ""),
            (Deleted, "/j/sharding/0/instance", ""),
            (Deleted, "/j/leader/election/instance", ""),
            (Deleted, "/j/trigger/10.0.0.1@-@1", ""),
            (Deleted, "/j/instances/10.0.0.1@-@1", ""),
            (Deleted, "/j/sharding/0", ""),
        ];
        let mut cache = Cache::default();
        cache.load(Vec::new());
        for (rev, (kind, path, data)) in steps.into_iter().enumerate() {
            cache.apply(event(kind, path, data, rev as u64 + 1));
            let kept = cache.view.as_ref().unwrap();
            assert_eq!(*kept, JobView::read(&cache), "after {kind:?} {path}");
        }
        let end = cache.take_view();
        assert!(!end.items.contains_key(&1), "item 1 has no node left");
        assert_eq!(end.items.get(&0).map(|i| i.exists), Some(false));
        assert!(end.corrupt.is_empty());
    }
}
