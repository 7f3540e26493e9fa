//! A job's subtree as the machine caches it, and the facts read off it.

use std::collections::{BTreeMap, BTreeSet};

use crate::instance::InstanceId;
use crate::layout::{ItemLeaf, JobNode, JobPaths};
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
}

impl Cache {
    pub fn load(&mut self, nodes: Vec<Node>) {
        self.version += 1;
        self.nodes.clear();
        for node in nodes {
            self.note(node.stat.modified);
            self.nodes.insert(
                node.path,
                Cached {
                    data: node.data,
                    stat: node.stat,
                },
            );
        }
    }

    pub fn apply(&mut self, event: WatchEvent) {
        self.version += 1;
        match (event.kind, event.stat) {
            (WatchEventKind::Deleted, _) => {
                self.nodes.remove(&event.path);
            }
            (_, Some(stat)) => {
                self.note(stat.modified);
                self.nodes.insert(
                    event.path,
                    Cached {
                        data: event.data,
                        stat,
                    },
                );
            }
            // A created/changed event without metadata: keep the data, and the old metadata
            // if there is one (a backend that cannot tell the stat). Conditional writes on
            // such a node may fail and are then retried after a reload.
            (_, None) => {
                let stat = self.nodes.get(&event.path).map(|c| c.stat).unwrap_or(Stat {
                    version: Version(-1),
                    created: Revision(0),
                    modified: Revision(0),
                    ephemeral_owner: None,
                });
                self.nodes.insert(
                    event.path,
                    Cached {
                        data: event.data,
                        stat,
                    },
                );
            }
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

/// One item's state read off the cache.
#[derive(Debug, Clone, Default)]
pub(crate) struct ItemView {
    pub exists: bool,
    pub owner: Option<InstanceId>,
    pub owner_stat: Option<Stat>,
    /// The `running` marker: who, and its metadata.
    pub running: Option<(String, Stat)>,
    pub disabled: bool,
    pub failover: Option<Stat>,
    pub record: Option<(ItemRecord, Version)>,
}

/// The facts of one job that decisions need.
#[derive(Debug, Default)]
pub(crate) struct JobView {
    pub instances: BTreeSet<InstanceId>,
    pub disabled_servers: BTreeSet<String>,
    pub servers: BTreeMap<String, String>,
    pub leader: Option<String>,
    pub necessary: Option<Version>,
    pub items: BTreeMap<u32, ItemView>,
    pub triggers: BTreeMap<InstanceId, String>,
    pub corrupt: Vec<(NodePath, String)>,
}

impl JobView {
    pub fn read(cache: &Cache, paths: &JobPaths) -> JobView {
        let mut v = JobView::default();
        let root = paths.root();
        for (path, node) in cache
            .nodes
            .range(root.clone()..)
            .take_while(|(p, _)| root.contains(p))
        {
            let Some((_, what)) = JobNode::parse(path) else {
                continue;
            };
            let text = || String::from_utf8_lossy(&node.data).into_owned();
            match what {
                JobNode::Instance(id) => {
                    v.instances.insert(id);
                }
                JobNode::Server(ip) => {
                    let value = text();
                    if value.trim() == "DISABLED" {
                        v.disabled_servers.insert(ip.clone());
                    }
                    v.servers.insert(ip, value);
                }
                JobNode::LeaderInstance => v.leader = Some(text()),
                JobNode::ShardingNecessary => v.necessary = Some(node.stat.version),
                JobNode::Item(i) => v.items.entry(i).or_default().exists = true,
                JobNode::ItemState(i, leaf) => {
                    let item = v.items.entry(i).or_default();
                    match leaf {
                        ItemLeaf::Instance => {
                            let value = text();
                            match InstanceId::new(value.trim()) {
                                Ok(id) => item.owner = Some(id),
                                Err(e) if !value.trim().is_empty() => {
                                    v.corrupt.push((path.clone(), e.to_string()))
                                }
                                Err(_) => {}
                            }
                            item.owner_stat = Some(node.stat);
                        }
                        ItemLeaf::Running => item.running = Some((text(), node.stat)),
                        ItemLeaf::Disabled => item.disabled = true,
                        ItemLeaf::Failover => item.failover = Some(node.stat),
                        ItemLeaf::Execution => match ItemRecord::parse(&node.data) {
                            Ok(r) => item.record = Some((r, node.stat.version)),
                            Err(e) => {
                                // Treated as empty and overwritten at the next run: the item
                                // keeps running, and the problem is reported.
                                item.record = Some((ItemRecord::default(), node.stat.version));
                                v.corrupt.push((path.clone(), e));
                            }
                        },
                        ItemLeaf::Misfire | ItemLeaf::Failovering => {}
                    }
                }
                JobNode::Trigger(id) => {
                    v.triggers.insert(id, text());
                }
                _ => {}
            }
        }
        v
    }

    /// Whether a server (by ip) is enabled: its node is absent or not `DISABLED`.
    pub fn server_enabled(&self, ip: &str) -> bool {
        !self.disabled_servers.contains(ip)
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
