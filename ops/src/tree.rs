//! One job's subtree as read in one tree read, sorted into what the ElasticJob layout says each
//! node is. Pure: built from the nodes, no registry access.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use shardjob_core::layout::{ItemLeaf, JobNode};
use shardjob_core::registry::{Node, Revision, Version};

/// The nodes of one job that the statistics and operations read.
#[derive(Debug, Clone, Default)]
pub(crate) struct JobTree {
    /// The job root exists.
    pub exists: bool,
    /// `config`: its text (lossy UTF-8) and version.
    pub config: Option<(String, Version)>,
    /// Whether the `instances` node exists.
    pub instances_dir: bool,
    /// `instances/{id}`: id → what the value says.
    pub instances: BTreeMap<String, InstanceValue>,
    /// Whether the `servers` node exists.
    pub servers_dir: bool,
    /// `servers/{ip}`: ip → (value, version).
    pub servers: BTreeMap<String, (String, Version)>,
    /// Whether the `sharding` node exists.
    pub sharding_dir: bool,
    /// The `sharding` node holds data: the mark a re-shard leaves when it removes items (the
    /// latest fire they did, `{}` if none). ElasticJob leaves the node empty.
    pub sharding_mark: bool,
    /// `sharding/{item}` and its leaves.
    pub items: BTreeMap<u32, ItemNodes>,
    /// `leader/election/instance`.
    pub leader: Option<String>,
    /// Whether `leader` and `leader/sharding` exist.
    pub leader_dirs: (bool, bool),
    /// `leader/sharding/necessary` exists.
    pub necessary: bool,
    /// `leader/sharding/processing` exists.
    pub processing: bool,
    /// `leader/failover/items/{item}`.
    pub failover_queue: BTreeSet<u32>,
    /// Whether the `trigger` node exists.
    pub trigger_dir: bool,
    /// `trigger/{id}`: id → value (a shardjob trigger's parameter; empty from ElasticJob).
    pub triggers: BTreeMap<String, String>,
}

/// What an `instances/{id}` node says: ElasticJob's `JobInstance` YAML.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct InstanceValue {
    /// `serverIp`, if the value names one.
    pub server_ip: Option<String>,
    /// The node's version, for conditional deletes.
    pub version: Option<Version>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstanceYaml {
    #[serde(default)]
    server_ip: Option<String>,
}

impl InstanceValue {
    /// Reads `jobInstanceId: …\nserverIp: …` as ElasticJob and shardjob write it; a value
    /// that is not such YAML names no server.
    pub fn parse(text: &str) -> InstanceValue {
        let server_ip = serde_yaml_ng::from_str::<InstanceYaml>(text)
            .ok()
            .and_then(|v| v.server_ip)
            .filter(|ip| !ip.is_empty());
        InstanceValue {
            server_ip,
            version: None,
        }
    }
}

/// `sharding/{item}` and its leaves.
#[derive(Debug, Clone, Default)]
pub(crate) struct ItemNodes {
    /// `sharding/{item}/instance`: the owner, if the node exists and is not empty.
    pub owner: Option<String>,
    /// `sharding/{item}/running`: its value and creation revision (shardjob's fencing token).
    pub running: Option<(String, Revision)>,
    /// `sharding/{item}/disabled` exists, with its value and version.
    pub disabled: Option<(String, Version)>,
    /// `sharding/{item}/failover` exists.
    pub failover: bool,
    /// `sharding/{item}/misfire` exists.
    pub misfire: bool,
    /// `sharding/{item}/execution`: shardjob's execution record, raw.
    pub execution: Option<Vec<u8>>,
    /// The execution record was never written since its creation: its last change is its
    /// creation (the same revision; a node created in a transaction is created and last
    /// changed at that transaction's revision). `false` if unknown.
    pub execution_as_created: bool,
}

fn text(node: &Node) -> String {
    String::from_utf8_lossy(&node.data).into_owned()
}

impl JobTree {
    /// Sorts the nodes of a tree read of `/{job}` (any order) into their meaning.
    pub fn from_nodes(job: &str, nodes: &[Node]) -> JobTree {
        let mut t = JobTree::default();
        for node in nodes {
            let Some((name, what)) = JobNode::parse(&node.path) else {
                continue;
            };
            if name != job {
                continue;
            }
            match what {
                JobNode::Root => t.exists = true,
                JobNode::Config => t.config = Some((text(node), node.stat.version)),
                JobNode::Instances => t.instances_dir = true,
                JobNode::Instance(id) => {
                    let mut value = InstanceValue::parse(&text(node));
                    value.version = Some(node.stat.version);
                    t.instances.insert(id.as_str().to_owned(), value);
                }
                JobNode::Servers => t.servers_dir = true,
                JobNode::Server(ip) => {
                    t.servers.insert(ip, (text(node), node.stat.version));
                }
                JobNode::Sharding => {
                    t.sharding_dir = true;
                    t.sharding_mark = !node.data.is_empty();
                }
                JobNode::Item(item) => {
                    t.items.entry(item).or_default();
                }
                JobNode::ItemState(item, leaf) => {
                    let i = t.items.entry(item).or_default();
                    match leaf {
                        ItemLeaf::Instance => {
                            i.owner = Some(text(node)).filter(|o| !o.is_empty());
                        }
                        ItemLeaf::Running => i.running = Some((text(node), node.stat.created)),
                        ItemLeaf::Disabled => i.disabled = Some((text(node), node.stat.version)),
                        ItemLeaf::Failover => i.failover = true,
                        ItemLeaf::Misfire => i.misfire = true,
                        ItemLeaf::Execution => {
                            i.execution = Some(node.data.clone());
                            i.execution_as_created = node.stat.modified == node.stat.created;
                        }
                        ItemLeaf::Failovering => {}
                    }
                }
                JobNode::LeaderInstance => t.leader = Some(text(node)).filter(|l| !l.is_empty()),
                JobNode::ShardingNecessary => t.necessary = true,
                JobNode::ShardingProcessing => t.processing = true,
                JobNode::FailoverItem(item) => {
                    t.failover_queue.insert(item);
                }
                JobNode::Trigger(id) => {
                    t.triggers.insert(id.as_str().to_owned(), text(node));
                }
                JobNode::Other => {
                    let mut segments = node.path.segments().skip(1);
                    match (segments.next(), segments.next(), segments.next()) {
                        (Some("leader"), None, _) => t.leader_dirs.0 = true,
                        (Some("leader"), Some("sharding"), None) => t.leader_dirs.1 = true,
                        (Some("trigger"), None, _) => t.trigger_dir = true,
                        _ => {}
                    }
                }
                JobNode::Guarantee => {}
            }
        }
        t
    }

    /// The server IP of a live instance: its value's `serverIp`, else the part of its id
    /// before `@-@` (what shardjob's own nodes always agree with).
    pub fn server_ip_of(&self, id: &str) -> Option<String> {
        let value = self.instances.get(id)?;
        Some(value.server_ip.clone().unwrap_or_else(|| {
            id.split(shardjob_core::instance::DELIMITER)
                .next()
                .unwrap_or(id)
                .to_owned()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::registry::{NodePath, Stat};

    fn node(path: &str, data: &str, rev: u64) -> Node {
        Node {
            path: NodePath::new(path).unwrap(),
            data: data.as_bytes().to_vec(),
            stat: Stat {
                version: Version(3),
                created: Revision(rev),
                modified: Revision(rev),
                ephemeral_owner: None,
                mtime_ms: None,
            },
        }
    }

    #[test]
    fn sorts_the_nodes_by_meaning() {
        let nodes = [
            node("/j", "SCRIPT", 1),
            node("/j/config", "jobName: j\n", 2),
            node("/j/instances", "", 1),
            node(
                "/j/instances/10.0.0.1@-@7",
                "jobInstanceId: 10.0.0.1@-@7\nserverIp: 10.0.0.1\n",
                4,
            ),
            node("/j/instances/10.0.0.2@-@8", "garbage: [", 4),
            node("/j/servers/10.0.0.1", "DISABLED", 5),
            node("/j/sharding/0/instance", "10.0.0.1@-@7", 6),
            node("/j/sharding/0/running", "10.0.0.1@-@7", 42),
            node("/j/sharding/1", "", 6),
            node("/j/sharding/1/instance", "", 6),
            node("/j/sharding/1/disabled", "", 6),
            node("/j/leader", "", 6),
            node("/j/leader/sharding", "", 6),
            node("/j/leader/sharding/necessary", "", 6),
            node("/j/leader/election/instance", "10.0.0.1@-@7", 6),
            node("/j/trigger", "", 6),
            node("/j/trigger/10.0.0.1@-@7", "p", 6),
            node("/other/config", "", 6),
        ];
        let t = JobTree::from_nodes("j", &nodes);
        assert!(t.exists && t.instances_dir && !t.servers_dir && t.trigger_dir);
        assert_eq!(
            t.config.as_ref().map(|c| c.0.as_str()),
            Some("jobName: j\n")
        );
        assert_eq!(t.server_ip_of("10.0.0.1@-@7").as_deref(), Some("10.0.0.1"));
        // A value that is not ElasticJob's YAML: the id names the server.
        assert_eq!(t.server_ip_of("10.0.0.2@-@8").as_deref(), Some("10.0.0.2"));
        assert_eq!(t.server_ip_of("nope"), None);
        assert_eq!(
            t.items[&0].running.as_ref().map(|r| r.1),
            Some(Revision(42))
        );
        assert_eq!(t.items[&1].owner, None);
        assert!(t.items[&1].disabled.is_some());
        assert_eq!(t.leader.as_deref(), Some("10.0.0.1@-@7"));
        assert!(t.necessary && !t.processing);
        assert_eq!(t.leader_dirs, (true, true));
        assert_eq!(t.triggers["10.0.0.1@-@7"], "p");
        assert!(!t.sharding_mark);
    }

    #[test]
    fn records_as_created_and_the_removed_items_mark() {
        let mut rewritten = node("/j/sharding/1/execution", r#"{"done":5000}"#, 7);
        rewritten.stat.modified = Revision(9);
        let nodes = [
            node("/j/sharding", r#"{"done":4000}"#, 2),
            node("/j/sharding/0/execution", r#"{"done":1234}"#, 7),
            rewritten,
        ];
        let t = JobTree::from_nodes("j", &nodes);
        assert!(t.sharding_dir && t.sharding_mark);
        assert!(t.items[&0].execution_as_created);
        assert!(!t.items[&1].execution_as_created);
        let t = JobTree::from_nodes("j", &[node("/j/sharding", "", 2)]);
        assert!(t.sharding_dir && !t.sharding_mark);
    }
}
