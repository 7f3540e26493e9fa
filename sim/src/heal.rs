//! The heal: at the end of the chaos every fault is undone (processes resumed and reconnected,
//! clocks brought back within a second, crashed processes started again, at least two
//! processes alive), every server and item is enabled again, the jobs an operator shut down
//! and those deploys removed are taken back; then the cluster settles before the checks.

use std::collections::BTreeSet;

use shardjob_core::JobConfig;
use shardjob_core::machine::MachineError;

use crate::checkers::Violation;
use crate::cluster::Cluster;
use crate::nemesis::{Deploy, Nemesis};
use crate::operator::{delete, write};

impl Nemesis<'_> {
    /// Heals the world at `heal_at` and lets it settle for `settle` ms. Returns when the
    /// checks start (the liveness checker's window opens there).
    pub(crate) fn heal(&mut self, c: &mut Cluster, heal_at: u64, settle: u64) -> u64 {
        // What is due before the heal is done; steps of shapes still to come are dropped.
        self.timed_until(c, heal_at);
        c.run_until(heal_at);
        c.calm();
        c.restore_watches();
        for n in 0..c.nodes.len() {
            c.unpause(n);
            c.heal(n);
            if c.nodes[n].skew.abs() > 1_000 {
                c.nodes[n].skew = c.nodes[n].skew.signum() * 1_000;
            }
        }
        // Not on a server a rolling replacement retired from this kind.
        for (_, ip) in std::mem::take(&mut self.restarts) {
            if !self.retired(false, &ip) {
                self.join(c, &ip);
            }
        }
        // ElasticJob processes alike (none in a world without them).
        for j in 0..c.java.len() {
            if !c.java[j].up() {
                continue;
            }
            c.unpause_java(j);
            c.heal_java(j);
            if c.java[j].skew.abs() > 1_000 {
                let skew = c.java[j].skew.signum() * 1_000;
                c.set_java_skew(j, skew);
            }
        }
        for (_, ip) in std::mem::take(&mut self.java_restarts) {
            if !self.retired(true, &ip) {
                self.join_java(c, &ip);
            }
        }
        // At least two shardjob processes, in a world that has any (a world of ElasticJob
        // processes only keeps them only: those that crashed were started again above; so does
        // one whose shardjob processes were replaced by ElasticJob ones).
        let alive = c.nodes.iter().filter(|n| n.up() && !n.crashed()).count();
        let rolled_back = self
            .roll
            .as_ref()
            .is_some_and(|r| r.direction() == crate::world::Rolling::ToElasticjob);
        let wanted = if self.ips.is_empty() || rolled_back {
            0
        } else {
            2
        };
        for k in alive..wanted {
            let ip = format!("10.0.1.{k}");
            self.join(c, &ip);
        }
        for j in self.jobs {
            for ip in &self.ips {
                let path = format!("/{}/servers/{ip}", j.job_name);
                if c.read(&path).as_deref() == Some("DISABLED") {
                    write(c, &path, b"ENABLED", &mut self.refusals);
                }
            }
            let total = c
                .config_of(&j.job_name)
                .map_or(j.sharding_total_count, |cfg| cfg.sharding_total_count);
            for item in 0..total.max(j.sharding_total_count) {
                let path = format!("/{}/sharding/{item}/disabled", j.job_name);
                if c.exists(&path) {
                    delete(c, &path, &mut self.refusals);
                }
            }
        }
        take_back_shut_down(c, self.jobs, heal_at + settle / 2, &mut self.refusals);
        let check_from = heal_at + settle;
        // Jobs removed by deploys are taken back (none is removed now).
        self.deploy.carry_out(
            c,
            &mut self.deploys,
            &mut self.deploy_rng,
            check_from,
            &mut self.refusals,
        );
        for (_, step) in &self.deploys {
            if let Deploy::Add(n, job) = step {
                self.refusals.push(Violation {
                    subject: Default::default(),
                    checker: "deploy",
                    time: c.now,
                    message: format!(
                        "node {n} ({}) could not take job {job} back before the checks: it was still leaving it",
                        c.nodes[*n].id
                    ),
                });
            }
        }
        check_from
    }
}

/// At the heal, each live process takes back the jobs an operator shut down on it, as
/// restarting the process would (retried while it is still leaving them, until `until`).
/// Only those: a job a process dropped for any other reason stays dropped, for
/// [`crate::checkers::convergence`] to report.
fn take_back_shut_down(
    c: &mut Cluster,
    jobs: &[JobConfig],
    until: u64,
    refused: &mut Vec<Violation>,
) {
    let mut todo: BTreeSet<(usize, String)> = c
        .shutdowns
        .iter()
        .map(|s| (s.node, s.job.clone()))
        .collect();
    while !todo.is_empty() {
        let mut leaving = BTreeSet::new();
        // Hosted still: the instance may not have seen the deletion yet (an operator acts
        // until the heal), or it found its session gone and registered again. Asked again
        // until `until`; still hosted then is fine.
        let mut hosted = BTreeSet::new();
        for (n, job) in std::mem::take(&mut todo) {
            let node = &c.nodes[n];
            if !node.up() || node.crashed() || node.machine.is_stopped() {
                continue;
            }
            if !node.jobs.contains(&job) {
                continue;
            }
            let Some(config) = jobs.iter().find(|j| j.job_name == job) else {
                continue;
            };
            match c.add_job(n, config) {
                Ok(()) => {}
                Err(MachineError::DuplicateJob(_)) => {
                    hosted.insert((n, job));
                }
                Err(MachineError::JobLeaving(_)) => {
                    leaving.insert((n, job));
                }
                Err(e) => refused.push(Violation {
                    subject: Default::default(),
                    checker: "deploy",
                    time: c.now,
                    message: format!(
                        "node {n} could not take back job {job} after its shutdown: {e}"
                    ),
                }),
            }
        }
        if leaving.is_empty() && hosted.is_empty() {
            return;
        }
        if c.now >= until {
            for (n, job) in leaving {
                refused.push(Violation {
                    subject: Default::default(),
                    checker: "deploy",
                    time: c.now,
                    message: format!(
                        "node {n} could not take back job {job} after its shutdown: still leaving it"
                    ),
                });
            }
            return;
        }
        c.run_until(c.now + 500);
        todo = leaving;
        todo.extend(hosted);
    }
}
