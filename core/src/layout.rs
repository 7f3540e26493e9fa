//! The ElasticJob node layout under `/{jobName}` (paths are relative to the namespace).
//!
//! One place builds every path, so the layout of reference §1.2 is written down once, and
//! [`JobNode::parse`] maps a path seen in a watch event back to what it means.

use crate::instance::InstanceId;
use crate::registry::{NodePath, PathError};

/// The paths of one job.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobPaths {
    root: NodePath,
}

impl JobPaths {
    /// The paths of the job called `job_name`, which must be a single path segment.
    pub fn new(job_name: &str) -> Result<Self, PathError> {
        Ok(Self {
            root: NodePath::root().join(job_name)?,
        })
    }

    /// The job's name.
    pub fn job_name(&self) -> &str {
        self.root.name()
    }

    /// `/{job}`: the job root; holds the job type or class name.
    pub fn root(&self) -> &NodePath {
        &self.root
    }

    fn at(&self, segments: &[&str]) -> NodePath {
        self.root.descendant_unchecked(segments)
    }

    fn item_at(&self, item: u32, leaf: &str) -> NodePath {
        let mut digits = [0u8; 20];
        self.at(&["sharding", item_digits(item, &mut digits), leaf])
    }

    /// `config`: the job configuration YAML.
    pub fn config(&self) -> NodePath {
        self.at(&["config"])
    }

    /// `instances`: parent of the live instances' ephemeral nodes.
    pub fn instances(&self) -> NodePath {
        self.at(&["instances"])
    }

    /// `instances/{id}`: one live instance (ephemeral).
    pub fn instance(&self, id: &InstanceId) -> NodePath {
        self.at(&["instances", id.as_str()])
    }

    /// `servers`: parent of the per-server ENABLED/DISABLED nodes.
    pub fn servers(&self) -> NodePath {
        self.at(&["servers"])
    }

    /// `servers/{ip}` for the server part of an instance id.
    pub fn server_of(&self, id: &InstanceId) -> NodePath {
        self.at(&["servers", id.server_ip()])
    }

    /// `servers/{ip}` for a server name given by an operator.
    pub fn server(&self, ip: &str) -> Result<NodePath, PathError> {
        self.servers().join(ip)
    }

    /// `sharding`: parent of the per-item nodes.
    pub fn sharding(&self) -> NodePath {
        self.at(&["sharding"])
    }

    /// `sharding/{item}`.
    pub fn item(&self, item: u32) -> NodePath {
        let mut digits = [0u8; 20];
        self.at(&["sharding", item_digits(item, &mut digits)])
    }

    /// `sharding/{item}/instance`: the owner's instance id.
    pub fn item_instance(&self, item: u32) -> NodePath {
        self.item_at(item, "instance")
    }

    /// `sharding/{item}/running`: the instance executing the item.
    pub fn item_running(&self, item: u32) -> NodePath {
        self.item_at(item, "running")
    }

    /// `sharding/{item}/misfire`: a fire came while the item was running.
    pub fn item_misfire(&self, item: u32) -> NodePath {
        self.item_at(item, "misfire")
    }

    /// `sharding/{item}/disabled`: the item is skipped by its owner.
    pub fn item_disabled(&self, item: u32) -> NodePath {
        self.item_at(item, "disabled")
    }

    /// `sharding/{item}/failover`: the instance running the item in place of a dead owner.
    pub fn item_failover(&self, item: u32) -> NodePath {
        self.item_at(item, "failover")
    }

    /// `sharding/{item}/failovering`: ElasticJob's persistent twin of `failover`.
    pub fn item_failovering(&self, item: u32) -> NodePath {
        self.item_at(item, "failovering")
    }

    /// `sharding/{item}/execution`: shardjob's execution record of the item (last finished
    /// fire, run in progress); see `machine::record`.
    pub fn item_execution(&self, item: u32) -> NodePath {
        self.item_at(item, "execution")
    }

    /// `leader`.
    pub fn leader(&self) -> NodePath {
        self.at(&["leader"])
    }

    /// `leader/election`.
    pub fn leader_election(&self) -> NodePath {
        self.at(&["leader", "election"])
    }

    /// `leader/election/instance`: the leader's instance id (ephemeral).
    pub fn leader_instance(&self) -> NodePath {
        self.at(&["leader", "election", "instance"])
    }

    /// `leader/sharding`.
    pub fn leader_sharding(&self) -> NodePath {
        self.at(&["leader", "sharding"])
    }

    /// `leader/sharding/necessary`: re-sharding is due.
    pub fn sharding_necessary(&self) -> NodePath {
        self.at(&["leader", "sharding", "necessary"])
    }

    /// `leader/sharding/processing`: the leader is re-sharding (ephemeral).
    pub fn sharding_processing(&self) -> NodePath {
        self.at(&["leader", "sharding", "processing"])
    }

    /// `leader/failover`.
    pub fn leader_failover(&self) -> NodePath {
        self.at(&["leader", "failover"])
    }

    /// `leader/failover/items`: parent of the items waiting to be failed over.
    pub fn failover_items(&self) -> NodePath {
        self.at(&["leader", "failover", "items"])
    }

    /// `leader/failover/items/{item}`: an item waiting to be failed over.
    pub fn failover_item(&self, item: u32) -> NodePath {
        let mut digits = [0u8; 20];
        self.at(&[
            "leader",
            "failover",
            "items",
            item_digits(item, &mut digits),
        ])
    }

    /// `trigger`: parent of the per-instance manual triggers.
    pub fn triggers(&self) -> NodePath {
        self.at(&["trigger"])
    }

    /// `trigger/{id}`: run the job once on that instance.
    pub fn trigger(&self, id: &InstanceId) -> NodePath {
        self.at(&["trigger", id.as_str()])
    }

    /// `guarantee/started`: parent of the items registered as started in a distribute-once
    /// listener's round.
    pub fn guarantee_started(&self) -> NodePath {
        self.at(&["guarantee", "started"])
    }

    /// `guarantee/started/{item}`: the item has started in the current round.
    pub fn guarantee_started_item(&self, item: u32) -> NodePath {
        let mut digits = [0u8; 20];
        self.at(&["guarantee", "started", item_digits(item, &mut digits)])
    }

    /// `guarantee/completed`: parent of the items registered as completed in a
    /// distribute-once listener's round.
    pub fn guarantee_completed(&self) -> NodePath {
        self.at(&["guarantee", "completed"])
    }

    /// `guarantee/completed/{item}`: the item has completed in the current round.
    pub fn guarantee_completed_item(&self, item: u32) -> NodePath {
        let mut digits = [0u8; 20];
        self.at(&["guarantee", "completed", item_digits(item, &mut digits)])
    }
}

/// What a path under a job root is, per the ElasticJob layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JobNode {
    /// `/{job}`.
    Root,
    /// `config`.
    Config,
    /// `instances` itself.
    Instances,
    /// `instances/{id}`.
    Instance(InstanceId),
    /// `servers` itself.
    Servers,
    /// `servers/{ip}`.
    Server(String),
    /// `sharding` itself.
    Sharding,
    /// `sharding/{item}`.
    Item(u32),
    /// `sharding/{item}/{leaf}` for a leaf this enum names.
    ItemState(u32, ItemLeaf),
    /// `leader/election/instance`.
    LeaderInstance,
    /// `leader/sharding/necessary`.
    ShardingNecessary,
    /// `leader/sharding/processing`.
    ShardingProcessing,
    /// `leader/failover/items/{item}`.
    FailoverItem(u32),
    /// `trigger/{id}`.
    Trigger(InstanceId),
    /// `guarantee` or any path below it: the distribute-once listeners' rounds.
    Guarantee,
    /// Any other path under the job: intermediate directories, nodes of newer versions or of
    /// other tools. Not an error: ignore it.
    Other,
}

/// The per-item leaves under `sharding/{item}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemLeaf {
    /// `instance`.
    Instance,
    /// `running`.
    Running,
    /// `misfire`.
    Misfire,
    /// `disabled`.
    Disabled,
    /// `failover`.
    Failover,
    /// `failovering`.
    Failovering,
    /// `execution` (shardjob's addition).
    Execution,
}

impl JobNode {
    /// Splits a path into its job name and what it is. `None` for the root path `/`.
    /// Item numbers must be canonical decimal `u32` (`7`, not `07` or `+7`); instance ids must
    /// be valid; anything else under the job is [`JobNode::Other`].
    pub fn parse(path: &NodePath) -> Option<(&str, JobNode)> {
        let mut segments = path.segments();
        let job = segments.next()?;
        // At most four segments below the job mean something; no allocation on this hot path.
        let mut buf = [""; 5];
        let mut len = 0;
        for segment in segments {
            if len == buf.len() {
                let node = if buf[0] == "guarantee" {
                    JobNode::Guarantee
                } else {
                    JobNode::Other
                };
                return Some((job, node));
            }
            buf[len] = segment;
            len += 1;
        }
        let node = match &buf[..len] {
            [] => JobNode::Root,
            ["config"] => JobNode::Config,
            ["instances"] => JobNode::Instances,
            ["instances", id] => InstanceId::new(*id).map_or(JobNode::Other, JobNode::Instance),
            ["servers"] => JobNode::Servers,
            ["servers", ip] => JobNode::Server((*ip).to_owned()),
            ["sharding"] => JobNode::Sharding,
            ["sharding", item] => parse_item(item).map_or(JobNode::Other, JobNode::Item),
            ["sharding", item, leaf] => match (parse_item(item), parse_leaf(leaf)) {
                (Some(item), Some(leaf)) => JobNode::ItemState(item, leaf),
                _ => JobNode::Other,
            },
            ["leader", "election", "instance"] => JobNode::LeaderInstance,
            ["leader", "sharding", "necessary"] => JobNode::ShardingNecessary,
            ["leader", "sharding", "processing"] => JobNode::ShardingProcessing,
            ["leader", "failover", "items", item] => {
                parse_item(item).map_or(JobNode::Other, JobNode::FailoverItem)
            }
            ["trigger", id] => InstanceId::new(*id).map_or(JobNode::Other, JobNode::Trigger),
            ["guarantee", ..] => JobNode::Guarantee,
            _ => JobNode::Other,
        };
        Some((job, node))
    }
}

/// Writes `n` in decimal into `buf` without allocating (item numbers in paths, integers in
/// execution records).
pub(crate) fn decimal(n: u64, buf: &mut [u8; 20]) -> &str {
    let mut n = n;
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).unwrap_or("0")
}

/// [`decimal`] of an item number.
fn item_digits(item: u32, buf: &mut [u8; 20]) -> &str {
    decimal(u64::from(item), buf)
}

/// Parses an item number as ElasticJob writes it: canonical decimal, no sign, no leading zero.
pub fn parse_item(s: &str) -> Option<u32> {
    if s.is_empty() || (s.len() > 1 && s.starts_with('0')) || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok()
}

fn parse_leaf(s: &str) -> Option<ItemLeaf> {
    Some(match s {
        "instance" => ItemLeaf::Instance,
        "running" => ItemLeaf::Running,
        "misfire" => ItemLeaf::Misfire,
        "disabled" => ItemLeaf::Disabled,
        "failover" => ItemLeaf::Failover,
        "failovering" => ItemLeaf::Failovering,
        "execution" => ItemLeaf::Execution,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_elasticjob_paths() {
        let p = JobPaths::new("myJob").unwrap();
        let id = InstanceId::new("10.0.0.1@-@42").unwrap();
        assert_eq!(p.config().as_str(), "/myJob/config");
        assert_eq!(p.instance(&id).as_str(), "/myJob/instances/10.0.0.1@-@42");
        assert_eq!(p.server_of(&id).as_str(), "/myJob/servers/10.0.0.1");
        assert_eq!(p.item_instance(3).as_str(), "/myJob/sharding/3/instance");
        assert_eq!(p.item_running(3).as_str(), "/myJob/sharding/3/running");
        assert_eq!(
            p.item_failovering(0).as_str(),
            "/myJob/sharding/0/failovering"
        );
        assert_eq!(
            p.leader_instance().as_str(),
            "/myJob/leader/election/instance"
        );
        assert_eq!(
            p.sharding_necessary().as_str(),
            "/myJob/leader/sharding/necessary"
        );
        assert_eq!(
            p.sharding_processing().as_str(),
            "/myJob/leader/sharding/processing"
        );
        assert_eq!(
            p.failover_item(7).as_str(),
            "/myJob/leader/failover/items/7"
        );
        assert_eq!(p.trigger(&id).as_str(), "/myJob/trigger/10.0.0.1@-@42");
        assert_eq!(
            p.guarantee_started_item(2).as_str(),
            "/myJob/guarantee/started/2"
        );
        assert_eq!(
            p.guarantee_completed().as_str(),
            "/myJob/guarantee/completed"
        );
        assert_eq!(
            p.guarantee_completed_item(10).as_str(),
            "/myJob/guarantee/completed/10"
        );
        assert!(p.server("a/b").is_err());
        assert!(JobPaths::new("a/b").is_err());
    }

    #[test]
    fn item_digits_are_decimal() {
        for n in [0, 7, 10, 99, 100, 4_294_967_295] {
            let mut buf = [0u8; 20];
            assert_eq!(item_digits(n, &mut buf), n.to_string());
        }
        let mut buf = [0u8; 20];
        assert_eq!(decimal(u64::MAX, &mut buf), u64::MAX.to_string());
    }

    #[test]
    fn parse_inverts_the_builders() {
        let p = JobPaths::new("j").unwrap();
        let id = InstanceId::new("h@-@1").unwrap();
        let cases = [
            (p.root().clone(), JobNode::Root),
            (p.config(), JobNode::Config),
            (p.instance(&id), JobNode::Instance(id.clone())),
            (p.server_of(&id), JobNode::Server("h".into())),
            (p.item(5), JobNode::Item(5)),
            (
                p.item_instance(5),
                JobNode::ItemState(5, ItemLeaf::Instance),
            ),
            (p.item_misfire(5), JobNode::ItemState(5, ItemLeaf::Misfire)),
            (p.leader_instance(), JobNode::LeaderInstance),
            (p.failover_item(2), JobNode::FailoverItem(2)),
            (p.trigger(&id), JobNode::Trigger(id.clone())),
            (p.guarantee_started(), JobNode::Guarantee),
            (p.guarantee_started_item(3), JobNode::Guarantee),
            (p.guarantee_completed_item(0), JobNode::Guarantee),
        ];
        for (path, want) in cases {
            assert_eq!(JobNode::parse(&path), Some(("j", want)), "{path}");
        }
        let odd = NodePath::new("/j/sharding/07/instance").unwrap();
        assert_eq!(JobNode::parse(&odd), Some(("j", JobNode::Other)));
        let odd = NodePath::new("/j/sharding/99999999999").unwrap();
        assert_eq!(JobNode::parse(&odd), Some(("j", JobNode::Other)));
        for deep in ["/j/guarantee", "/j/guarantee/a/b/c/d/e"] {
            let path = NodePath::new(deep).unwrap();
            assert_eq!(JobNode::parse(&path), Some(("j", JobNode::Guarantee)));
        }
        let odd = NodePath::new("/j/sharding/1/a/b/c").unwrap();
        assert_eq!(JobNode::parse(&odd), Some(("j", JobNode::Other)));
        assert_eq!(JobNode::parse(&NodePath::root()), None);
    }
}
