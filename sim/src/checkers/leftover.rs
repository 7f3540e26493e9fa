//! Checker: once the last ElasticJob instance of a job has left (the end of a rolling
//! migration, [`crate::world::Rolling::ToShardjob`]), nothing ElasticJob leaves behind is left
//! at the end of the world (`docs/migration-design.md` 3.8 step 2: shardjob's leader clears
//! it): no queued failover (`leader/failover/items/{item}`), no `failovering` node, no
//! `failover` or `running` node held by an ElasticJob instance's id, no `misfire` flag (only
//! ElasticJob writes them). Each node left is a violation about nothing ElasticJob's own: the
//! clearing is shardjob's part.

use std::collections::BTreeSet;

use shardjob_core::layout::{ItemLeaf, JobNode};
use shardjob_core::registry::NodePath;

use super::Violation;
use crate::cluster::Cluster;

/// The nodes of ElasticJob's that `jobs` still hold at `now`: judged only when every
/// ElasticJob process has gone for good (the caller knows).
pub fn check(c: &Cluster, jobs: &[(String, u32)], now: u64) -> Vec<Violation> {
    let java: BTreeSet<String> = c.java.iter().map(|n| n.id.to_string()).collect();
    let mut out = Vec::new();
    for (job, _) in jobs {
        let Ok(root) = NodePath::new(format!("/{job}")) else {
            continue;
        };
        for node in c.store.tree(&root) {
            let value = String::from_utf8_lossy(&node.data);
            let value = value.trim();
            let what = match JobNode::parse(&node.path).map(|(_, n)| n) {
                Some(JobNode::FailoverItem(_)) => "a failover queued and never claimed",
                Some(JobNode::ItemState(_, ItemLeaf::Failovering)) => "a failover's claim",
                Some(JobNode::ItemState(_, ItemLeaf::Misfire)) => "a misfire flag",
                Some(JobNode::ItemState(_, ItemLeaf::Failover)) if java.contains(value) => {
                    "a failover's claim"
                }
                Some(JobNode::ItemState(_, ItemLeaf::Running)) if java.contains(value) => {
                    "a running marker"
                }
                _ => continue,
            };
            out.push(Violation {
                subject: Default::default(),
                checker: "left-over",
                time: now,
                message: format!(
                    "{} ({what} of ElasticJob's, value {value:?}) is left after the last \
                     ElasticJob instance left",
                    node.path
                ),
            });
        }
    }
    out
}
