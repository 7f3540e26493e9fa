//! Checker: a mixed job is led by ElasticJob. After the heal, while an ElasticJob process that
//! runs a job is registered in it on an enabled server, no shardjob process holds the job's
//! lead (`docs/migration-design.md` 3.3: ElasticJob cannot follow another leader safely,
//! shardjob can; a shardjob leader steps down when it sees such an instance, and does not
//! stand for election while one is there). Worlds without ElasticJob processes have nothing to
//! check.

use shardjob_core::InstanceId;

use super::Violation;
use crate::cluster::Cluster;

/// Checks the store and the processes at the cluster's current time.
pub fn check(c: &Cluster, jobs: &[(String, u32)], now: u64) -> Vec<Violation> {
    let mut out = Vec::new();
    for (job, _) in jobs {
        let can_lead = c.java.iter().find(|n| {
            n.up()
                && n.jobs.contains(job.as_str())
                && !n.job_shut_down(job)
                && c.exists(&format!("/{job}/instances/{}", n.id))
                && c.read(&format!("/{job}/servers/{}", n.id.server_ip()))
                    .is_none_or(|v| v.trim() != "DISABLED")
        });
        let Some(java) = can_lead else {
            continue;
        };
        let Some(leader) = c.read(&format!("/{job}/leader/election/instance")) else {
            continue;
        };
        let shardjob = InstanceId::new(leader.trim())
            .is_ok_and(|l| c.nodes.iter().any(|n| n.id.as_str() == l.as_str()));
        if shardjob {
            out.push(Violation {
                subject: Default::default(),
                checker: "mixed-leader",
                time: now,
                message: format!(
                    "{job} is led by shardjob instance {leader} while ElasticJob instance {} can lead it",
                    java.id
                ),
            });
        }
    }
    out
}
