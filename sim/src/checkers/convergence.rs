//! Checker 4: after the heal, each job's plan covers `0..n-1`, every item is owned by exactly
//! one live, registered, enabled instance, nothing is left beyond `n`, there is one leader and
//! it is live, every running process is registered in each job it is meant to host
//! ([`crate::cluster::Node::jobs`]) and in no other, and no process dropped such a job by
//! itself. What each machine last reported of its plan agrees with the registry: the items it
//! owns ([`MachineEvent::ItemsOwned`]) and whether a re-shard is pending
//! ([`MachineEvent::ReshardingPending`]), which the runtime logs, counts and hands to
//! streaming jobs. ElasticJob processes ([`crate::elasticjob`]) are live owners and leaders
//! too, and must be registered in their jobs.

use std::collections::BTreeSet;

use shardjob_core::InstanceId;
use shardjob_core::machine::MachineEvent;

use super::{Subject, Violation};
use crate::cluster::Cluster;

/// Checks the store and the nodes at the cluster's current time.
pub fn check(c: &Cluster, jobs: &[(String, u32)], now: u64) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut fail = |message: String, subject: Subject| {
        out.push(Violation {
            subject,
            checker: "convergence",
            time: now,
            message,
        });
    };
    for (job, total) in jobs {
        // ElasticJob processes that run the job count as live owners too.
        let live: BTreeSet<String> = c
            .nodes
            .iter()
            .filter(|n| n.up() && !n.crashed() && !n.machine.is_stopped())
            .map(|n| n.id.to_string())
            .chain(
                c.java
                    .iter()
                    .filter(|n| n.up() && !n.job_shut_down(job))
                    .map(|n| n.id.to_string()),
            )
            .filter(|id| c.exists(&format!("/{job}/instances/{id}")))
            .collect();
        let plan = Subject::Plan { job: job.clone() };
        let owners = c.owners(job);
        for item in 0..*total {
            match owners.get(&item) {
                None => fail(format!("{job}/{item} has no owner"), plan.clone()),
                Some(o) if !live.contains(o) => fail(
                    format!("{job}/{item} is owned by {o}, which is not live"),
                    plan.clone(),
                ),
                Some(o) => {
                    let ip = InstanceId::new(o.as_str())
                        .map_or_else(|_| o.clone(), |id| id.server_ip().to_owned());
                    if c.read(&format!("/{job}/servers/{ip}")).as_deref() == Some("DISABLED") {
                        fail(
                            format!("{job}/{item} is owned by {o}, whose server is disabled"),
                            plan.clone(),
                        );
                    }
                }
            }
        }
        // An item beyond the total stays while its run goes on (the total shrank under it):
        // its marker keeps a later run of that number from overlapping it. A marker that no
        // running process's run holds is stuck, and reported.
        for item in owners.keys().filter(|i| **i >= *total) {
            let runs = c
                .nodes
                .iter()
                .any(|n| n.up() && n.machine.running_items(job).contains(item));
            if runs && c.exists(&format!("/{job}/sharding/{item}/running")) {
                continue;
            }
            fail(
                format!("{job}/{item} is left beyond the total {total}"),
                plan.clone(),
            );
        }
        match c.read(&format!("/{job}/leader/election/instance")) {
            None => fail(format!("{job} has no leader"), plan.clone()),
            Some(l) if !live.contains(&l) => {
                fail(format!("{job}'s leader {l} is not live"), plan.clone())
            }
            Some(_) => {}
        }
        for n in c.nodes.iter().filter(|n| {
            n.up() && !n.crashed() && !n.machine.is_stopped() && n.jobs.contains(job.as_str())
        }) {
            if !live.contains(n.id.as_str()) {
                fail(
                    format!("{job}: running process {} is not registered", n.id),
                    Subject::Other,
                );
            }
            let owned: Vec<u32> = owners
                .iter()
                .filter(|(_, o)| o.as_str() == n.id.as_str())
                .map(|(i, _)| *i)
                .collect();
            let reported = n.events.iter().rev().find_map(|(_, e)| match e {
                MachineEvent::ItemsOwned { job: j, items } if j == job => Some(items),
                _ => None,
            });
            // A plan not written yet (no item has an owner: an ElasticJob leader shards only
            // at a fire) is no news to report (`Machine::report_plan`).
            let no_plan = owners.is_empty() && reported.is_none();
            if reported != Some(&owned) && !no_plan {
                fail(
                    format!(
                        "{job}: process {} last reported owning {reported:?}, the plan gives it {owned:?}",
                        n.id
                    ),
                    Subject::Other,
                );
            }
            let pending = n
                .events
                .iter()
                .rev()
                .find_map(|(_, e)| match e {
                    MachineEvent::ReshardingPending { job: j, pending } if j == job => {
                        Some(*pending)
                    }
                    _ => None,
                })
                .unwrap_or(false);
            let flag = c.exists(&format!("/{job}/leader/sharding/necessary"));
            if pending != flag {
                fail(
                    format!(
                        "{job}: process {} last reported a re-shard pending {pending}, the flag is {}",
                        n.id,
                        if flag { "set" } else { "clear" }
                    ),
                    Subject::Other,
                );
            }
        }
        // A process that left the job (or never hosted it) must not hold its place.
        for n in c.nodes.iter().filter(|n| {
            n.up() && !n.crashed() && !n.machine.is_stopped() && !n.jobs.contains(job.as_str())
        }) {
            if live.contains(n.id.as_str()) {
                fail(
                    format!("{job}: process {} is registered but does not host it", n.id),
                    Subject::Other,
                );
            }
        }
    }
    // An ElasticJob process that runs must be registered in each of its jobs, and must not
    // have shut one down by itself (ElasticJob does when it sees its own instance node
    // deleted while it runs unpaused).
    for (j, n) in c.java.iter().enumerate().filter(|(_, n)| n.up()) {
        for job in &n.jobs {
            if n.job_shut_down(job) {
                fail(
                    format!("elasticjob {j} ({}) shut job {job} down by itself", n.id),
                    Subject::JavaShutDown { job: job.clone() },
                );
            } else if !c.exists(&format!("/{job}/instances/{}", n.id)) {
                fail(
                    format!("{job}: elasticjob process {} is not registered", n.id),
                    Subject::JavaShutDown { job: job.clone() },
                );
            }
        }
    }
    for (i, n) in c.nodes.iter().enumerate() {
        if !n.crashed() && n.machine.is_stopped() && !n.shutdown_requested {
            fail(
                format!("node {i} ({}) stopped by itself", n.id),
                Subject::Other,
            );
        }
        if n.up() && !n.crashed() && !n.machine.is_stopped() {
            for job in n
                .jobs
                .iter()
                .filter(|j| !n.machine.job_names().any(|h| h == *j))
            {
                fail(
                    format!("node {i} ({}) dropped job {job} by itself", n.id),
                    Subject::Other,
                );
            }
        }
    }
    out
}
