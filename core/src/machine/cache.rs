//! A job's subtree as the machine caches it: the facts decisions need, kept current by watch
//! events.
//!
//! The cache does not keep a copy of every node: an event changes one field of the
//! [`JobView`] (or of the few raw facts beside it, such as the configuration text), so a
//! decision never re-reads the whole subtree, and ten thousand jobs do not keep ten thousand
//! copies of their trees. Nodes nothing reads (failover items, guarantee rounds, unknown nodes
//! outside the items) are not kept at all. Debug builds also keep every node and check now
//! and then that the facts kept event by event equal those loaded from scratch.

#[cfg(any(test, debug_assertions, feature = "self-check"))]
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::instance::InstanceId;
use crate::layout::{ItemLeaf, JobNode, JobPaths, parse_item};
use crate::registry::{Node, NodePath, Revision, Stat, Version, WatchEvent, WatchEventKind};

use super::job_view::{self, JobView, Unbound, into_text, session_bound};
use super::record::{ItemRecord, StartRecord};

/// The directories of the layout whose existence setup checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// `instances`.
    Instances,
    /// `servers`.
    Servers,
    /// `sharding`.
    Sharding,
    /// `leader`.
    Leader,
    /// `leader/election`.
    LeaderElection,
    /// `leader/sharding`.
    LeaderSharding,
    /// `leader/failover`.
    LeaderFailover,
    /// `trigger`.
    Triggers,
}

impl Dir {
    /// Every directory with its path, in the order setup creates them.
    pub fn all(paths: &JobPaths) -> [(Dir, NodePath); 8] {
        [
            (Dir::Instances, paths.instances()),
            (Dir::Servers, paths.servers()),
            (Dir::Sharding, paths.sharding()),
            (Dir::Leader, paths.leader()),
            (Dir::LeaderElection, paths.leader_election()),
            (Dir::LeaderSharding, paths.leader_sharding()),
            (Dir::LeaderFailover, paths.leader_failover()),
            (Dir::Triggers, paths.triggers()),
        ]
    }

    pub(crate) fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// The raw facts kept beside the view: what setup, leadership and re-sharding read that the
/// view does not interpret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The job root's data (the job type), if the node exists.
    pub(crate) root: Option<Box<[u8]>>,
    /// The `config` node's data (the configuration YAML), if it exists.
    pub(crate) config: Option<Box<[u8]>>,
    /// The [`Dir`]s that exist, one bit each.
    pub(crate) dirs: u16,
    /// Metadata of this instance's own `instances/{id}` node.
    pub(crate) own_instance: Option<Stat>,
    /// The version of the `instances` node (whose data is the cluster's [`StartRecord`]).
    pub(crate) instances_version: Option<Version>,
    /// Metadata of `leader/election/instance`.
    pub(crate) leader: Option<Stat>,
    /// Nodes below `sharding/{item}` that the layout does not name: deleted with the item.
    pub(crate) item_others: BTreeSet<NodePath>,
}

/// What one job's subtree says, kept current by watch events.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    /// The highest modification revision seen in the job's events or snapshot (a snapshot
    /// counts with the revision it was read at, when the backend tells it).
    pub seen: Option<Revision>,
    /// The revision the last snapshot was read at, when the backend tells it: events at or
    /// below it are already in the snapshot, and are ignored (see [`Cache::is_stale`]).
    pub(crate) floor: Option<Revision>,
    /// Grows with every change, so readers can tell a cache they have read already.
    pub version: u64,
    /// Grows with every change that can bear on the sharding plan (anything but the items'
    /// run markers, run records, flags and triggers), so the leader can tell that a plan found
    /// sound is still sound without working it out again.
    pub plan_version: u64,
    /// The facts decisions read, shared with a decision in progress (a change meanwhile,
    /// which does not happen, would copy it).
    pub(crate) view: Arc<JobView>,
    pub(crate) facts: Facts,
    /// Grows whenever the `config` node's data changes, appears or goes.
    pub(crate) config_changes: u64,
    /// Debug builds and the `self-check` feature: every node, to check the kept facts
    /// against a load from scratch.
    #[cfg(any(debug_assertions, feature = "self-check"))]
    pub(crate) shadow: BTreeMap<NodePath, (Vec<u8>, Stat)>,
    /// With the `self-check` feature: the first drift found, until taken.
    #[cfg(feature = "self-check")]
    pub(crate) drift: Option<String>,
}

/// The metadata of a created or changed node whose event carries none and whose old
/// metadata is not kept.
pub(crate) const UNKNOWN_STAT: Stat = Stat {
    version: Version(-1),
    created: Revision(0),
    modified: Revision(0),
    ephemeral_owner: None,
    mtime_ms: None,
};

impl Cache {
    /// Replaces everything with a snapshot of the subtree, read at `revision` if the backend
    /// tells it. `me` is this instance.
    pub fn load(&mut self, nodes: Vec<Node>, revision: Option<Revision>, me: &InstanceId) {
        self.floor = revision;
        if let Some(r) = revision {
            self.note(r);
        }
        self.version += 1;
        self.plan_version += 1;
        let old = std::mem::take(&mut self.facts);
        let mut view = JobView::default();
        #[cfg(any(debug_assertions, feature = "self-check"))]
        self.shadow.clear();
        for node in nodes {
            self.note(node.stat.modified);
            #[cfg(any(debug_assertions, feature = "self-check"))]
            self.shadow
                .insert(node.path.clone(), (node.data.clone(), node.stat));
            if let Some((_, what)) = JobNode::parse(&node.path) {
                self.facts
                    .set(&mut view, &node.path, what, node.data, node.stat, me);
            }
        }
        // A reload that brings the same text is no change of the configuration.
        if self.facts.config != old.config {
            self.config_changes += 1;
        }
        self.view = Arc::new(view);
    }

    /// Whether `event` is older than the last snapshot, which holds its change already
    /// ([`WatchEvent::is_in`]).
    pub fn is_stale(&self, event: &WatchEvent) -> bool {
        event.is_in(self.floor)
    }

    /// Applies one event of the job's subtree, unless it [is stale](Cache::is_stale). `me`
    /// is this instance.
    pub fn apply(&mut self, event: WatchEvent, me: &InstanceId) {
        let what = JobNode::parse(&event.path).map(|(_, what)| what);
        self.apply_parsed(event, what, me);
    }

    /// [`Cache::apply`] for an event whose path the caller has parsed already: `what` is what
    /// [`JobNode::parse`] says of `event.path` (`None` for the root path).
    pub fn apply_parsed(&mut self, event: WatchEvent, what: Option<JobNode>, me: &InstanceId) {
        if self.is_stale(&event) {
            return;
        }
        self.version += 1;
        if bears_on_plan(what.as_ref()) {
            self.plan_version += 1;
        }
        let WatchEvent {
            kind,
            path,
            data,
            stat,
            revision: _,
        } = event;
        let deleted = kind == WatchEventKind::Deleted;
        if let (false, Some(stat)) = (deleted, stat) {
            self.note(stat.modified);
        }
        let view = Arc::make_mut(&mut self.view);
        let config_changed = if deleted {
            #[cfg(any(debug_assertions, feature = "self-check"))]
            self.shadow.remove(&path);
            match what {
                Some(what) => self.facts.unset(view, &path, what, me),
                None => false,
            }
        } else {
            // A created/changed event without metadata: keep the data, and the old metadata
            // if there is one (a backend that cannot tell the stat). Conditional writes on
            // such a node may fail and are then retried after a reload.
            let stat = stat
                .or_else(|| {
                    what.as_ref()
                        .and_then(|what| self.facts.kept_stat(view, what, me))
                })
                .unwrap_or(UNKNOWN_STAT);
            #[cfg(any(debug_assertions, feature = "self-check"))]
            self.shadow.insert(path.clone(), (data.clone(), stat));
            match what {
                Some(what) => self.facts.set(view, &path, what, data, stat, me),
                None => false,
            }
        };
        if config_changed {
            self.config_changes += 1;
        }
        self.check(me);
    }

    /// A cache loaded from scratch with `nodes` (path → data and metadata), to check a kept
    /// one against.
    #[cfg(any(test, debug_assertions, feature = "self-check"))]
    pub(crate) fn loaded(nodes: &BTreeMap<NodePath, (Vec<u8>, Stat)>, me: &InstanceId) -> Cache {
        let mut fresh = Cache::default();
        let nodes = nodes
            .iter()
            .map(|(path, (data, stat))| Node {
                path: path.clone(),
                data: data.clone(),
                stat: *stat,
            })
            .collect();
        fresh.load(nodes, None, me);
        fresh
    }

    /// Debug builds and the `self-check` feature: every 64th change, the kept facts must equal
    /// those loaded from scratch. A debug build panics on a drift; a release build with the
    /// feature keeps it for [`Cache::take_drift`] (the simulator reports it as a violation).
    #[allow(unused_variables)]
    pub(crate) fn check(&mut self, me: &InstanceId) {
        #[cfg(any(debug_assertions, feature = "self-check"))]
        if self.version % 64 == 0 {
            let fresh = Cache::loaded(&self.shadow, me);
            let drift = if *self.view != *fresh.view {
                Some(format!(
                    "the kept view drifted: kept {:?}, loaded {:?}",
                    self.view, fresh.view
                ))
            } else if self.facts != fresh.facts {
                Some(format!(
                    "the kept facts drifted: kept {:?}, loaded {:?}",
                    self.facts, fresh.facts
                ))
            } else {
                None
            };
            // A release build with the feature keeps it for the simulator to report; a debug
            // build panics, feature or not (a workspace build turns the feature on for every
            // crate, and the runtime's debug tests must still fail loudly on a drift).
            #[cfg(all(feature = "self-check", not(debug_assertions)))]
            if let Some(d) = drift {
                self.drift.get_or_insert(d);
            }
            #[cfg(debug_assertions)]
            if let Some(d) = drift {
                panic!("{d}");
            }
        }
    }

    /// With the `self-check` feature: the first drift of the kept facts from a fresh load
    /// found since the last call, if any.
    #[cfg(feature = "self-check")]
    pub fn take_drift(&mut self) -> Option<String> {
        self.drift.take()
    }

    /// The view, for a decision: shared, so the cache keeps it meanwhile.
    pub fn view(&self) -> &Arc<JobView> {
        &self.view
    }

    pub(crate) fn note(&mut self, r: Revision) {
        if self.seen.is_none_or(|s| r > s) {
            self.seen = Some(r);
        }
    }

    /// The job root's data, if the node exists.
    pub fn root(&self) -> Option<&[u8]> {
        self.facts.root.as_deref()
    }

    /// The `config` node's data, if it exists.
    pub fn config(&self) -> Option<&[u8]> {
        self.facts.config.as_deref()
    }

    /// A count that changes whenever [`Cache::config`] may have.
    pub fn config_changes(&self) -> u64 {
        self.config_changes
    }

    /// Whether the directory exists.
    pub fn has_dir(&self, dir: Dir) -> bool {
        self.facts.dirs & dir.bit() != 0
    }

    /// Metadata of this instance's `instances/{id}` node, if it exists.
    pub fn own_instance(&self) -> Option<Stat> {
        self.facts.own_instance
    }

    /// The version of the `instances` node, if it exists.
    pub fn instances_version(&self) -> Option<Version> {
        self.facts.instances_version
    }

    /// Metadata of `leader/election/instance`, if it exists.
    pub fn leader(&self) -> Option<Stat> {
        self.facts.leader
    }

    /// Every node below item `item`'s node (excluded), deepest first, so they can be deleted in
    /// order.
    pub fn item_descendants_deepest_first(
        &self,
        paths: &JobPaths,
        view: &JobView,
        item: u32,
    ) -> Vec<NodePath> {
        let root = paths.item(item);
        let mut out: Vec<NodePath> = self
            .facts
            .item_others
            .range(root.clone()..)
            .take_while(|p| root.contains(p))
            .filter(|p| **p != root)
            .cloned()
            .collect();
        if let Some(v) = view.items.get(&item) {
            for leaf in LEAVES {
                if v.has(leaf) {
                    out.push(leaf_path(paths, item, leaf));
                }
            }
        }
        out.sort_by(|a, b| {
            let depth = |p: &NodePath| p.segments().count();
            depth(b).cmp(&depth(a)).then_with(|| a.cmp(b))
        });
        out
    }
}

/// Whether `what` is one of the nodes that runs write: an item's run marker, record and
/// misfire and failover flags.
pub(crate) fn run_state(what: &JobNode) -> bool {
    matches!(
        what,
        JobNode::ItemState(
            _,
            ItemLeaf::Running
                | ItemLeaf::Execution
                | ItemLeaf::Misfire
                | ItemLeaf::Failover
                | ItemLeaf::Failovering
        )
    )
}

/// Whether a change of the node that [`JobNode::parse`] calls `what` can change what a
/// re-shard decides: everything but the items' run state, their `disabled` flags, and
/// triggers.
pub(crate) fn bears_on_plan(what: Option<&JobNode>) -> bool {
    what.is_none_or(|n| {
        !(run_state(n)
            || matches!(
                n,
                JobNode::ItemState(_, ItemLeaf::Disabled) | JobNode::Trigger(_)
            ))
    })
}

/// Whether a change of the node `what` can change which of a job's items, or which servers,
/// are disabled: everything but what runs, fires and membership write (the items' run state
/// and owners, instances, the leader's nodes, failover marks, triggers, distribute-once
/// rounds). A directory's deletion counts, as it takes `disabled` nodes with it.
pub(crate) fn bears_on_disabled(what: &JobNode) -> bool {
    !(run_state(what)
        || matches!(
            what,
            JobNode::ItemState(_, ItemLeaf::Instance)
                | JobNode::Instance(_)
                | JobNode::LeaderInstance
                | JobNode::ShardingNecessary
                | JobNode::ShardingProcessing
                | JobNode::FailoverItem(_)
                | JobNode::Trigger(_)
                | JobNode::Guarantee
        ))
}

impl Facts {
    /// The kept metadata of a node (`what` [`JobNode::parse`] says of its path), for the nodes
    /// whose metadata decisions read.
    pub(crate) fn kept_stat(
        &self,
        view: &JobView,
        what: &JobNode,
        me: &InstanceId,
    ) -> Option<Stat> {
        let version_only = |version: Version| Stat {
            version,
            ..UNKNOWN_STAT
        };
        match what {
            JobNode::Instance(id) if id == me => self.own_instance,
            JobNode::LeaderInstance => self.leader,
            JobNode::Instances => self.instances_version.map(version_only),
            JobNode::ShardingNecessary => view.necessary.map(version_only),
            JobNode::ItemState(i, leaf) => {
                let item = view.items.get(i)?;
                match leaf {
                    ItemLeaf::Instance => item.owner_stat,
                    ItemLeaf::Running => item.running.as_ref().map(|(_, s)| *s),
                    ItemLeaf::Failover => item.failover,
                    ItemLeaf::Execution => item.record.as_ref().map(|(_, v)| version_only(*v)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The node at `path`, which [`JobNode::parse`] calls `what`, was created or changed.
    /// Returns whether the configuration's text changed.
    pub(crate) fn set(
        &mut self,
        view: &mut JobView,
        path: &NodePath,
        what: JobNode,
        data: Vec<u8>,
        stat: Stat,
        me: &InstanceId,
    ) -> bool {
        let facts = self;
        match what {
            JobNode::Root => facts.root = Some(data.into_boxed_slice()),
            JobNode::Config => {
                if facts.config.as_deref() != Some(&data[..]) {
                    facts.config = Some(data.into_boxed_slice());
                    return true;
                }
            }
            JobNode::Instances => {
                facts.dirs |= Dir::Instances.bit();
                facts.instances_version = Some(stat.version);
                view.started = StartRecord::parse(&data).started;
            }
            JobNode::Servers => facts.dirs |= Dir::Servers.bit(),
            JobNode::Instance(id) => {
                if id == *me {
                    facts.own_instance = Some(stat);
                }
                if session_bound(&stat) {
                    view.unbound.remove(&id);
                    if std::str::from_utf8(&data).is_ok_and(|v| job_view::is_java(id.as_str(), v)) {
                        view.java.insert(id.clone());
                    } else {
                        view.java.remove(&id);
                    }
                } else {
                    view.java.remove(&id);
                    let unbound = Unbound {
                        version: stat.version,
                        value: into_text(data),
                    };
                    view.unbound.insert(id.clone(), unbound);
                }
                view.instances.insert(id);
            }
            JobNode::Server(ip) => {
                view.servers.insert(ip, into_text(data));
            }
            JobNode::LeaderInstance => {
                view.leader = Some(into_text(data));
                facts.leader = Some(stat);
            }
            JobNode::ShardingNecessary => view.necessary = Some(stat.version),
            // Empty in ElasticJob's layout; anything unreadable counts as no mark.
            JobNode::Sharding => {
                facts.dirs |= Dir::Sharding.bit();
                view.sharding_done = ItemRecord::parse(&data).ok().and_then(|r| r.done);
                view.sharding_version = (stat.version.0 >= 0).then_some(stat.version);
            }
            JobNode::Item(i) => view.items.entry(i).or_default().exists = true,
            JobNode::ItemState(i, leaf) => {
                let mut problem = None;
                let item = view.items.entry(i).or_default();
                item.leaves |= leaf_bit(leaf);
                match leaf {
                    ItemLeaf::Instance => {
                        let value = into_text(data);
                        match InstanceId::new(value.trim()) {
                            Ok(id) => item.owner = Some(id),
                            Err(e) => {
                                item.owner = None;
                                if !value.trim().is_empty() {
                                    problem = Some(e.to_string());
                                }
                            }
                        }
                        item.owner_stat = Some(stat);
                    }
                    ItemLeaf::Running => {
                        if item.running.is_none() {
                            view.running += 1;
                        }
                        if session_bound(&stat) {
                            view.persistent_running.remove(&i);
                        } else {
                            view.persistent_running.insert(i);
                        }
                        item.running = Some((into_text(data), stat));
                    }
                    ItemLeaf::Disabled => item.disabled = true,
                    ItemLeaf::Failover => item.failover = Some(stat),
                    ItemLeaf::Execution => {
                        let old = item.record.take().and_then(|(r, _)| r.done);
                        match ItemRecord::parse(&data) {
                            Ok(r) => item.record = Some((r, stat.version)),
                            Err(e) => {
                                // Treated as empty and overwritten at the next run: the item
                                // keeps running, and the problem is reported.
                                item.record = Some((ItemRecord::default(), stat.version));
                                problem = Some(e);
                            }
                        }
                        let new = item.record.as_ref().and_then(|(r, _)| r.done);
                        view.dones.replace(old, new);
                    }
                    ItemLeaf::Failovering => item.failovering = Some((into_text(data), stat)),
                    ItemLeaf::Misfire => {}
                }
                match problem {
                    Some(e) => {
                        view.corrupt.insert(path.clone(), e);
                    }
                    None => {
                        view.corrupt.remove(path);
                    }
                }
            }
            JobNode::Trigger(id) => {
                view.triggers.insert(id, into_text(data));
            }
            JobNode::Other => match other(path) {
                Some(Other::Dir(dir)) => facts.dirs |= dir.bit(),
                Some(Other::BelowItem) => {
                    facts.item_others.insert(path.clone());
                }
                None => {}
            },
            JobNode::FailoverItem(i) => {
                view.failover_queue.insert(i, stat.version);
            }
            JobNode::ShardingProcessing | JobNode::Guarantee => {}
        }
        false
    }

    /// The node at `path`, which [`JobNode::parse`] calls `what`, was deleted. Returns whether
    /// the configuration's text changed (it went).
    pub(crate) fn unset(
        &mut self,
        view: &mut JobView,
        path: &NodePath,
        what: JobNode,
        me: &InstanceId,
    ) -> bool {
        let facts = self;
        match what {
            JobNode::Root => facts.root = None,
            JobNode::Config => return facts.config.take().is_some(),
            JobNode::Instances => {
                facts.dirs &= !Dir::Instances.bit();
                facts.instances_version = None;
                view.started = None;
            }
            JobNode::Servers => facts.dirs &= !Dir::Servers.bit(),
            JobNode::Instance(id) => {
                if id == *me {
                    facts.own_instance = None;
                }
                view.unbound.remove(&id);
                view.java.remove(&id);
                view.instances.remove(&id);
            }
            JobNode::Server(ip) => {
                view.servers.remove(&ip);
            }
            JobNode::LeaderInstance => {
                view.leader = None;
                facts.leader = None;
            }
            JobNode::ShardingNecessary => view.necessary = None,
            JobNode::Sharding => {
                facts.dirs &= !Dir::Sharding.bit();
                view.sharding_done = None;
                view.sharding_version = None;
            }
            JobNode::Item(i) => {
                if let Some(item) = view.items.get_mut(&i) {
                    item.exists = false;
                    view.release(i);
                }
            }
            JobNode::ItemState(i, leaf) => {
                let Some(item) = view.items.get_mut(&i) else {
                    return false;
                };
                if !item.has(leaf) {
                    return false;
                }
                item.leaves &= !leaf_bit(leaf);
                match leaf {
                    ItemLeaf::Instance => {
                        item.owner = None;
                        item.owner_stat = None;
                    }
                    ItemLeaf::Running => {
                        if item.running.take().is_some() {
                            view.running -= 1;
                        }
                        view.persistent_running.remove(&i);
                    }
                    ItemLeaf::Disabled => item.disabled = false,
                    ItemLeaf::Failover => item.failover = None,
                    ItemLeaf::Execution => {
                        let old = item.record.take().and_then(|(r, _)| r.done);
                        view.dones.replace(old, None);
                    }
                    ItemLeaf::Failovering => item.failovering = None,
                    ItemLeaf::Misfire => {}
                }
                view.corrupt.remove(path);
                view.release(i);
            }
            JobNode::Trigger(id) => {
                view.triggers.remove(&id);
            }
            JobNode::Other => match other(path) {
                Some(Other::Dir(dir)) => facts.dirs &= !dir.bit(),
                Some(Other::BelowItem) => {
                    facts.item_others.remove(path);
                }
                None => {}
            },
            JobNode::FailoverItem(i) => {
                view.failover_queue.remove(&i);
            }
            JobNode::ShardingProcessing | JobNode::Guarantee => {}
        }
        false
    }
}

/// What a path [`JobNode::parse`] calls `Other` is to the cache.
pub(crate) enum Other {
    /// A directory setup creates.
    Dir(Dir),
    /// A node below `sharding/{item}` that the layout does not name.
    BelowItem,
}

pub(crate) fn other(path: &NodePath) -> Option<Other> {
    let mut segments = path.segments().skip(1);
    let first = segments.next()?;
    let second = segments.next();
    match (first, second) {
        ("leader", None) => Some(Other::Dir(Dir::Leader)),
        ("trigger", None) => Some(Other::Dir(Dir::Triggers)),
        ("leader", Some(second)) if segments.next().is_none() => match second {
            "election" => Some(Other::Dir(Dir::LeaderElection)),
            "sharding" => Some(Other::Dir(Dir::LeaderSharding)),
            "failover" => Some(Other::Dir(Dir::LeaderFailover)),
            _ => None,
        },
        ("sharding", Some(item)) => {
            (parse_item(item).is_some() && segments.next().is_some()).then_some(Other::BelowItem)
        }
        _ => None,
    }
}

/// Every item leaf.
pub(crate) const LEAVES: [ItemLeaf; 7] = [
    ItemLeaf::Instance,
    ItemLeaf::Running,
    ItemLeaf::Misfire,
    ItemLeaf::Disabled,
    ItemLeaf::Failover,
    ItemLeaf::Failovering,
    ItemLeaf::Execution,
];

pub(crate) fn leaf_bit(leaf: ItemLeaf) -> u8 {
    1 << leaf as u8
}

pub(crate) fn leaf_path(paths: &JobPaths, item: u32, leaf: ItemLeaf) -> NodePath {
    match leaf {
        ItemLeaf::Instance => paths.item_instance(item),
        ItemLeaf::Running => paths.item_running(item),
        ItemLeaf::Misfire => paths.item_misfire(item),
        ItemLeaf::Disabled => paths.item_disabled(item),
        ItemLeaf::Failover => paths.item_failover(item),
        ItemLeaf::Failovering => paths.item_failovering(item),
        ItemLeaf::Execution => paths.item_execution(item),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(rev: u64) -> Stat {
        Stat {
            version: Version(rev as i64),
            created: Revision(rev),
            modified: Revision(rev),
            ephemeral_owner: None,
            mtime_ms: None,
        }
    }

    fn event(kind: WatchEventKind, path: &str, data: &str, rev: u64) -> WatchEvent {
        WatchEvent {
            kind,
            path: NodePath::new(path).unwrap(),
            data: data.as_bytes().to_vec(),
            stat: (kind != WatchEventKind::Deleted).then(|| stat(rev)),
            revision: Some(Revision(rev)),
        }
    }

    /// An instance node bound to a session whose value is ElasticJob's counts as ElasticJob's;
    /// relabelled, unbound or deleted, it no longer does; a load agrees with the events.
    #[test]
    fn elasticjob_instances_are_told_by_their_value() {
        use WatchEventKind::{Changed, Created, Deleted};
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let java = InstanceId::new("10.0.0.2@-@2").unwrap();
        let path = "/j/instances/10.0.0.2@-@2";
        let yaml = "jobInstanceId: 10.0.0.2@-@2\nserverIp: 10.0.0.2\n";
        let ours = "jobInstanceId: 10.0.0.2@-@2\nlabels: shardjob\nserverIp: 10.0.0.2\n";
        let bound = |mut ev: WatchEvent| {
            if let Some(s) = ev.stat.as_mut() {
                s.ephemeral_owner = Some(crate::registry::SessionId(9));
            }
            ev
        };
        #[rustfmt::skip]
        let steps = [
            (bound(event(Created, path, yaml, 1)), true),
            (bound(event(Changed, path, ours, 2)), false),
            (bound(event(Changed, path, yaml, 3)), true),
            (event(Changed, path, yaml, 4), false),
            (bound(event(Changed, path, yaml, 5)), true),
            (event(Deleted, path, "", 6), false),
        ];
        let mut cache = Cache::default();
        cache.load(Vec::new(), None, &me);
        for (ev, want) in steps {
            let what = format!("{:?} {:?}", ev.kind, String::from_utf8_lossy(&ev.data));
            let node = ev.stat.map(|stat| Node {
                path: ev.path.clone(),
                data: ev.data.clone(),
                stat,
            });
            cache.apply(ev, &me);
            assert_eq!(cache.view().java.contains(&java), want, "{what}");
            let mut fresh = Cache::default();
            fresh.load(node.into_iter().collect(), None, &me);
            assert_eq!(fresh.view().java.contains(&java), want, "{what}, loaded");
        }
    }

    /// The facts kept event by event equal those loaded from scratch after every step,
    /// through creates, changes, corrupt data and deletes (including the last node of an item).
    #[test]
    fn the_kept_view_equals_a_fresh_load() {
        use WatchEventKind::{Changed, Created, Deleted};
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let steps = [
            (Created, "/j", "T"),
            (Created, "/j/config", "a: 1"),
            (Created, "/j/instances", ""),
            (Created, "/j/instances/10.0.0.1@-@1", ""),
            (Created, "/j/instances/10.0.0.2@-@2", ""),
            (Created, "/j/servers/10.0.0.1", ""),
            (Changed, "/j/servers/10.0.0.1", "DISABLED"),
            (Created, "/j/sharding", ""),
            (Created, "/j/sharding/0", ""),
            (Created, "/j/sharding/0/instance", "10.0.0.1@-@1"),
            (Changed, "/j/sharding/0/instance", "not an id"),
            (Changed, "/j/sharding/0/instance", "10.0.0.1@-@1"),
            (Created, "/j/sharding/0/execution", "{broken"),
            (Changed, "/j/sharding/0/execution", r#"{"done":5}"#),
            (Created, "/j/sharding/0/odd", ""),
            (Created, "/j/sharding/0/odd/deeper", ""),
            (Created, "/j/sharding/1/misfire", ""),
            (Created, "/j/sharding/1/running", "x"),
            (Created, "/j/sharding/1/disabled", ""),
            (Created, "/j/leader", ""),
            (Created, "/j/leader/election", ""),
            (Created, "/j/leader/election/instance", "10.0.0.1@-@1"),
            (Created, "/j/leader/sharding/necessary", ""),
            (Created, "/j/leader/failover/items/3", ""),
            (Created, "/j/trigger/10.0.0.1@-@1", "p"),
            (Changed, "/j/config", "a: 2"),
            (Deleted, "/j/sharding/1/running", ""),
            (Deleted, "/j/sharding/1/misfire", ""),
            (Deleted, "/j/sharding/1/disabled", ""),
            (Changed, "/j/servers/10.0.0.1", ""),
            (Deleted, "/j/sharding/0/instance", ""),
            (Deleted, "/j/leader/election/instance", ""),
            (Deleted, "/j/trigger/10.0.0.1@-@1", ""),
            (Deleted, "/j/instances/10.0.0.1@-@1", ""),
            (Deleted, "/j/sharding/0", ""),
            (Deleted, "/j/sharding/0/nothing", ""),
        ];
        let mut cache = Cache::default();
        cache.load(Vec::new(), None, &me);
        let mut nodes: BTreeMap<NodePath, (Vec<u8>, Stat)> = BTreeMap::new();
        for (rev, (kind, path, data)) in steps.into_iter().enumerate() {
            let ev = event(kind, path, data, rev as u64 + 1);
            match ev.stat {
                Some(s) => nodes.insert(ev.path.clone(), (ev.data.clone(), s)),
                None => nodes.remove(&ev.path),
            };
            cache.apply(ev, &me);
            let fresh = Cache::loaded(&nodes, &me);
            assert_eq!(*cache.view, *fresh.view, "after {kind:?} {path}");
            assert_eq!(cache.facts, fresh.facts, "after {kind:?} {path}");
        }
        let end = cache.view();
        assert!(!end.items.contains_key(&1), "item 1 has no node left");
        assert_eq!(end.items.get(&0).map(|i| i.exists), Some(false));
        assert!(end.corrupt.is_empty());
        assert!(cache.own_instance().is_none());
        assert!(cache.has_dir(Dir::Leader) && cache.has_dir(Dir::LeaderElection));
        assert!(!cache.has_dir(Dir::Servers) && cache.has_dir(Dir::Instances));
        assert_eq!(cache.config(), Some(&b"a: 2"[..]));
        let paths = JobPaths::new("j").unwrap();
        let below: Vec<String> = cache
            .item_descendants_deepest_first(&paths, end, 0)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            below,
            [
                "/j/sharding/0/odd/deeper",
                "/j/sharding/0/execution",
                "/j/sharding/0/odd"
            ]
        );
    }

    /// The deletion of a job's `instances` directory clears that directory's bit only; a load
    /// counts as a change of the cache.
    #[test]
    fn a_deleted_directory_goes_alone_and_a_load_is_a_change() {
        use WatchEventKind::{Created, Deleted};
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut cache = Cache::default();
        cache.load(Vec::new(), None, &me);
        assert_eq!((cache.version, cache.plan_version), (1, 1));
        cache.apply(event(Created, "/j/instances", "", 1), &me);
        cache.apply(event(Created, "/j/servers", "", 2), &me);
        assert!(cache.has_dir(Dir::Instances) && cache.has_dir(Dir::Servers));
        cache.apply(event(Deleted, "/j/instances", "", 3), &me);
        assert!(!cache.has_dir(Dir::Instances), "the deleted directory went");
        assert!(cache.has_dir(Dir::Servers) && !cache.has_dir(Dir::Sharding));
        let version = cache.version;
        cache.load(Vec::new(), None, &me);
        assert_eq!(cache.version, version + 1);
        assert!(!cache.has_dir(Dir::Servers));
    }

    /// Only the nodes that can say what is disabled (not run state, membership, the leader's
    /// nodes, failover marks, triggers or rounds) bear on the disabled items.
    #[test]
    fn bears_on_disabled_names_the_disabling_nodes() {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        for what in [
            JobNode::ItemState(0, ItemLeaf::Disabled),
            JobNode::Server("10.0.0.1".into()),
            JobNode::Sharding,
            JobNode::Item(0),
            JobNode::Config,
        ] {
            assert!(bears_on_disabled(&what), "{what:?}");
        }
        for what in [
            JobNode::ItemState(0, ItemLeaf::Running),
            JobNode::ItemState(0, ItemLeaf::Instance),
            JobNode::Instance(me.clone()),
            JobNode::LeaderInstance,
            JobNode::FailoverItem(0),
            JobNode::Trigger(me),
            JobNode::Guarantee,
        ] {
            assert!(!bears_on_disabled(&what), "{what:?}");
        }
    }

    /// The view counts the items with a `running` marker (a change or a repeated deletion of
    /// one counts nothing), and keeps the latest fire done of the run records as they change.
    #[test]
    fn running_items_and_the_latest_done_fire_are_kept() {
        use WatchEventKind::{Changed, Created, Deleted};
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut cache = Cache::default();
        cache.load(Vec::new(), None, &me);
        cache.apply(event(Created, "/j/sharding/0/running", "a", 1), &me);
        cache.apply(event(Created, "/j/sharding/1/running", "a", 2), &me);
        cache.apply(event(Changed, "/j/sharding/1/running", "b", 3), &me);
        assert_eq!(cache.view().running, 2);
        assert_eq!(cache.view().dones.max(), None);
        for (i, done) in [(0, 5), (1, 9), (2, 9)] {
            let path = format!("/j/sharding/{i}/execution");
            let data = format!(r#"{{"done":{done}}}"#);
            cache.apply(event(Created, &path, &data, 4), &me);
        }
        assert_eq!(cache.view().dones.max(), Some(&9));
        cache.apply(event(Deleted, "/j/sharding/1/execution", "", 4), &me);
        assert_eq!(cache.view().dones.max(), Some(&9));
        cache.apply(event(Changed, "/j/sharding/2/execution", "{broken", 4), &me);
        assert_eq!(cache.view().dones.max(), Some(&5));
        cache.apply(event(Deleted, "/j/sharding/0/running", "", 5), &me);
        cache.apply(event(Deleted, "/j/sharding/0/running", "", 6), &me);
        assert_eq!(cache.view().running, 1);
        cache.apply(event(Deleted, "/j/sharding/1/running", "", 7), &me);
        assert_eq!(cache.view().running, 0);
    }

    /// A change without metadata keeps the metadata the cache had; the configuration's change
    /// count moves only when its text does.
    #[test]
    fn changes_without_metadata_keep_the_old_one() {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut cache = Cache::default();
        cache.load(Vec::new(), None, &me);
        let created = event(WatchEventKind::Created, "/j/instances/10.0.0.1@-@1", "", 7);
        cache.apply(created, &me);
        let mut changed = event(WatchEventKind::Changed, "/j/instances/10.0.0.1@-@1", "x", 8);
        changed.stat = None;
        cache.apply(changed, &me);
        assert_eq!(cache.own_instance(), Some(stat(7)));
        assert_eq!(cache.seen, Some(Revision(7)));

        let before = cache.config_changes();
        cache.apply(event(WatchEventKind::Created, "/j/config", "a", 9), &me);
        let after_create = cache.config_changes();
        assert_ne!(before, after_create);
        cache.apply(event(WatchEventKind::Changed, "/j/config", "a", 10), &me);
        assert_eq!(cache.config_changes(), after_create);
        cache.apply(event(WatchEventKind::Deleted, "/j/config", "", 11), &me);
        assert_ne!(cache.config_changes(), after_create);
        assert_eq!(cache.config(), None);
    }

    /// Events at or below the revision a snapshot was read at are in it already: a deletion
    /// from before the snapshot does not hide a node created again since (etcd's watch may
    /// deliver it after the read's reply), a later one does; without a revision on either
    /// side (ZooKeeper) every event applies.
    #[test]
    fn events_older_than_the_snapshot_are_ignored() {
        use WatchEventKind::{Created, Deleted};
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let other = "/j/instances/10.0.0.2@-@2";
        let node = |rev: u64| Node {
            path: NodePath::new(other).unwrap(),
            data: Vec::new(),
            stat: stat(rev),
        };
        let has_other = |cache: &Cache| cache.view().instances.iter().count() == 1;
        let mut cache = Cache::default();
        cache.load(vec![node(8)], Some(Revision(9)), &me);
        assert!(has_other(&cache));
        assert_eq!(
            cache.seen,
            Some(Revision(9)),
            "the snapshot's revision is seen"
        );
        let stale = event(Deleted, other, "", 5);
        assert!(cache.is_stale(&stale));
        cache.apply(stale, &me);
        assert!(
            has_other(&cache),
            "a deletion older than the snapshot hid the node"
        );
        cache.apply(event(Created, other, "", 9), &me);
        assert_eq!(cache.view().instances.iter().count(), 1);
        let fresh = event(Deleted, other, "", 10);
        assert!(!cache.is_stale(&fresh));
        cache.apply(fresh, &me);
        assert!(
            !has_other(&cache),
            "a deletion after the snapshot is applied"
        );

        let mut unknown = Cache::default();
        unknown.load(vec![node(8)], None, &me);
        let mut no_revision = event(Deleted, other, "", 5);
        assert!(!unknown.is_stale(&no_revision));
        no_revision.revision = None;
        unknown.apply(no_revision, &me);
        assert!(
            !has_other(&unknown),
            "without a snapshot revision every event applies"
        );
    }
}
