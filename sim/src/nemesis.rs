//! The nemesis: what goes wrong in a world during its chaos, one method per fault (see
//! [`Fault`]), with the restarts and undos it owes, the deploys and the outage it plans, and
//! the timed steps of the richer shapes ([`Shape::Edits`], [`Shape::LeaderClocks`]).
//!
//! Each kind of draw comes from its own stream of the swarm ([`Swarm`]), so that a seed that
//! does not draw a shape keeps what it did before.
//!
//! [`Shape::Edits`]: crate::swarm::Shape::Edits
//! [`Shape::LeaderClocks`]: crate::swarm::Shape::LeaderClocks

use std::collections::BTreeSet;

use shardjob_core::JobConfig;
use shardjob_core::machine::MachineError;

use crate::checkers::Violation;
use crate::cluster::Cluster;
use crate::operator::{Edit, Stage, refusal};
use crate::swarm::{Rng, Shape, Streams, Swarm, default_options};
use crate::world::Fault;

/// A step of a deploy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Deploy {
    /// A live process stops hosting one of its jobs; the next removal is drawn.
    Remove,
    /// The process (by node) takes the job back.
    Add(usize, String),
}

/// What deploys act on.
pub(crate) struct DeployPlan<'a> {
    jobs: &'a [JobConfig],
    ignore_cancel: &'a BTreeSet<String>,
    last_removal: u64,
    gap: u64,
}

/// A step of a richer shape, at its time.
#[derive(Debug, Clone)]
pub(crate) enum Timed {
    /// An operator's edit inside runs begins ([`Stage::edit_inside_runs`]).
    EditStarts,
    /// A later step of one.
    Edit(Edit),
    /// A leader's clock lags or steps.
    LeaderClock,
}

/// The nemesis of one world.
pub(crate) struct Nemesis<'a> {
    /// What operators act on.
    pub(crate) stage: Stage<'a>,
    /// Every job (the jobs of a process on an extra server).
    pub(crate) jobs: &'a [JobConfig],
    /// The jobs of the process on each first server.
    slot_jobs: Vec<Vec<JobConfig>>,
    /// The first servers.
    pub(crate) ips: Vec<String>,
    next_pid: u32,
    /// The fault kinds of each act (those of the seed but deploys and outages).
    kinds: Vec<Fault>,
    rng: Rng,
    /// Crashed processes to start again, with their time.
    pub(crate) restarts: Vec<(u64, String)>,
    /// Faults to undo, with their time.
    undo: Vec<(u64, usize, Fault)>,
    /// The whole-cluster outage still to come: when, how long.
    outage: Option<(u64, u64)>,
    outage_rng: Rng,
    pub(crate) deploys: Vec<(u64, Deploy)>,
    pub(crate) deploy_rng: Rng,
    pub(crate) deploy: DeployPlan<'a>,
    /// The steps of the richer shapes, with their time.
    timed: Vec<(u64, Timed)>,
    edits_rng: Rng,
    clocks_rng: Rng,
    /// What the cluster refused to do, as violations (none, as the choices were checked
    /// before the world ran).
    pub(crate) refusals: Vec<Violation>,
    /// When the nemesis acted (a fault, its undo, a restart, an operator, a deploy, a step of
    /// a shape): a fire due meanwhile may wait for the world to calm down, and no longer.
    pub(crate) disruptions: Vec<u64>,
}

impl<'a> Nemesis<'a> {
    /// The nemesis of the world `swarm` drew, on a cluster whose options are set (the
    /// shutdown grace bounds the last deploy). Takes the swarm's streams.
    pub(crate) fn new(
        c: &Cluster,
        swarm: &'a Swarm,
        streams: Streams,
        max_items: u32,
        duration_ms: u64,
    ) -> Self {
        let Streams {
            rng,
            mut deploy_rng,
            mut outage_rng,
            mut edits_rng,
            mut clocks_rng,
        } = streams;
        let slots = swarm.skews.len();
        let heal_at = swarm.heal_at;
        let mean_gap = swarm.mean_gap;
        let slot_jobs: Vec<Vec<JobConfig>> = (0..slots)
            .map(|k| {
                swarm
                    .jobs
                    .iter()
                    .filter(|j| {
                        swarm
                            .hosts
                            .get(&j.job_name)
                            .is_none_or(|some| some.contains(&k))
                    })
                    .cloned()
                    .collect()
            })
            .collect();
        // Deploys: none after `last_removal` (the machines' shutdown grace and 10 s before the
        // heal), so that a job taken back once its runs were cancelled is hosted again before
        // the checks.
        let grace = c
            .options
            .clone()
            .or_else(default_options)
            .map_or(30_000, |o| o.shutdown_grace.as_millis() as u64);
        let last_removal = heal_at.saturating_sub(grace.saturating_add(10_000));
        let mut deploys = Vec::new();
        if swarm.faults.contains(&Fault::Deploy) {
            deploys.push((deploy_rng.between(1_000, mean_gap * 2), Deploy::Remove));
        }
        // A whole-cluster outage: when, and for how long (often long enough for every session
        // to expire, which makes the way back a start of every job's cluster; sometimes not).
        // Half of them last until the heal, so that the catch-up after them is checked.
        let outage = swarm.faults.contains(&Fault::Outage).then(|| {
            let timeout = swarm.session_timeout.as_millis() as u64;
            let at = outage_rng.between(mean_gap, heal_at.saturating_sub(mean_gap));
            let length = if outage_rng.chance(50) {
                heal_at.saturating_sub(at)
            } else {
                outage_rng.between(1_000, 3 * timeout + 20_000)
            };
            (at, length)
        });
        // The richer shapes' steps: more in longer worlds.
        let mut timed = Vec::new();
        let most = 3 + duration_ms / 120_000;
        if swarm.shapes.contains(&Shape::Edits) {
            for _ in 0..edits_rng.between(1, most).min(60) {
                let at = edits_rng.between(mean_gap / 2, heal_at.saturating_sub(1_000));
                timed.push((at, Timed::EditStarts));
            }
        }
        if swarm.shapes.contains(&Shape::LeaderClocks) {
            for _ in 0..clocks_rng.between(1, most).min(60) {
                let at = clocks_rng.between(mean_gap / 2, heal_at.saturating_sub(1_000));
                timed.push((at, Timed::LeaderClock));
            }
        }
        Nemesis {
            stage: Stage {
                jobs: &swarm.jobs,
                ips: &[],
                hosts: &swarm.hosts,
                max_items,
                ignore_cancel: &swarm.ignore_cancel,
            },
            jobs: &swarm.jobs,
            slot_jobs,
            ips: Vec::new(),
            next_pid: 100,
            kinds: swarm
                .faults
                .iter()
                .copied()
                .filter(|f| !f.apart())
                .collect(),
            rng,
            restarts: Vec::new(),
            undo: Vec::new(),
            outage,
            outage_rng,
            deploys,
            deploy_rng,
            deploy: DeployPlan {
                jobs: &swarm.jobs,
                ignore_cancel: &swarm.ignore_cancel,
                last_removal,
                gap: mean_gap,
            },
            timed,
            edits_rng,
            clocks_rng,
            refusals: Vec::new(),
            disruptions: Vec::new(),
        }
    }

    /// Adds a node. A node the cluster refuses is a `config` violation: the world checks the
    /// user's choices before it runs, so this would be one it missed.
    ///
    /// The process on server `ip` takes the next pid, with the jobs of its server (every job
    /// on an extra server).
    pub(crate) fn join(&mut self, c: &mut Cluster, ip: &str) -> Option<usize> {
        let jobs = self
            .ips
            .iter()
            .position(|known| known == ip)
            .and_then(|k| self.slot_jobs.get(k).cloned())
            .unwrap_or_else(|| self.jobs.to_vec());
        let result = c.add_node(&format!("{ip}@-@{}", self.next_pid), &jobs);
        self.next_pid += 1;
        refusal(c.now, result, &mut self.refusals)
    }

    /// Starts the first process on each server `10.0.0.{k+1}`, with its clock's skew.
    pub(crate) fn start(&mut self, c: &mut Cluster, skews: &[Option<i64>]) {
        for (k, skew) in skews.iter().enumerate() {
            let ip = format!("10.0.0.{}", k + 1);
            let hosted = self.slot_jobs.get(k).cloned().unwrap_or_default();
            let result = c.add_node(&format!("{ip}@-@{}", self.next_pid), &hosted);
            self.next_pid += 1;
            let joined = refusal(c.now, result, &mut self.refusals);
            self.ips.push(ip);
            if let (Some(skew), Some(n)) = (skew, joined) {
                c.set_skew(n, *skew);
            }
        }
    }

    /// The chaos, from the first act until `heal_at`.
    pub(crate) fn chaos(&mut self, c: &mut Cluster, heal_at: u64, mean_gap: u64) {
        let ips = self.ips.clone();
        let mut t = self.rng.between(1_000, mean_gap);
        while t < heal_at {
            self.timed_until(c, t);
            c.run_until(t);
            self.restarts_due(c);
            self.undos_due(c);
            self.outage_due(c);
            let up: Vec<usize> = (0..c.nodes.len())
                .filter(|n| c.nodes[*n].up() && !c.nodes[*n].partitioned() && !c.nodes[*n].deaf())
                .filter(|n| c.nodes[*n].paused().is_none())
                .collect();
            let fault = *self.rng.pick(&self.kinds).unwrap_or(&Fault::Deploy);
            match fault {
                Fault::Crash if up.len() > 1 => self.crash(c, &up),
                Fault::Partition | Fault::Deaf | Fault::Pause if !up.is_empty() => {
                    self.cut_off(c, &up, fault)
                }
                Fault::RegistryRestart => self.restart_registry(c),
                Fault::Clock if !up.is_empty() => self.jump_clock(c, &up),
                Fault::Operator => self.operate(c, &up, &ips),
                _ => {}
            }
            self.disruptions.push(c.now);
            t = c.now + self.rng.between(mean_gap / 4, mean_gap * 2);
        }
    }

    /// A process crashes; it starts again (a new pid) 1 to 60 s later.
    fn crash(&mut self, c: &mut Cluster, up: &[usize]) {
        let n = *self.rng.pick(up).unwrap_or(&0);
        c.crash(n);
        let ip = c.nodes[n].id.server_ip().to_owned();
        self.restarts
            .push((c.now + self.rng.between(1_000, 60_000), ip));
    }

    /// A process is cut off from the registry (both ways, or only the way back) or pauses, for
    /// 200 ms to two session timeouts.
    fn cut_off(&mut self, c: &mut Cluster, up: &[usize], fault: Fault) {
        let n = *self.rng.pick(up).unwrap_or(&0);
        let timeout = c.session_timeout.as_millis() as u64;
        let length = self.rng.between(200, timeout * 2);
        match fault {
            Fault::Partition => c.partition(n),
            Fault::Deaf => c.deafen(n),
            _ => c.pause(n),
        }
        self.undo.push((c.now + length, n, fault));
    }

    /// The registry restarts, down for 100 ms to 2 s.
    fn restart_registry(&mut self, c: &mut Cluster) {
        let outage = self.rng.between(100, 2_000);
        c.restart_registry(outage);
    }

    /// A process's wall clock jumps by up to 10 s either way.
    fn jump_clock(&mut self, c: &mut Cluster, up: &[usize]) {
        let n = *self.rng.pick(up).unwrap_or(&0);
        let jump = self.rng.between(0, 20_000) as i64 - 10_000;
        c.step_clock(n, jump);
    }

    /// An operator acts ([`Stage::act`]).
    fn operate(&mut self, c: &mut Cluster, up: &[usize], ips: &[String]) {
        let stage = Stage { ips, ..self.stage };
        stage.act(c, &mut self.rng, up, &mut self.refusals);
    }

    /// Crashed processes due to start again do.
    fn restarts_due(&mut self, c: &mut Cluster) {
        self.restarts.sort();
        while self.restarts.first().is_some_and(|(at, _)| *at <= c.now) {
            let (_, ip) = self.restarts.remove(0);
            self.join(c, &ip);
        }
    }

    /// Cut-off and paused processes due to come back do.
    fn undos_due(&mut self, c: &mut Cluster) {
        self.undo.sort();
        while self.undo.first().is_some_and(|(at, _, _)| *at <= c.now) {
            let (_, n, f) = self.undo.remove(0);
            match f {
                Fault::Pause => c.unpause(n),
                _ => c.heal(n),
            }
        }
    }

    /// The whole-cluster outage, once due: every process crashes, and starts again after the
    /// outage's length (together, or a little apart).
    fn outage_due(&mut self, c: &mut Cluster) {
        let Some((at, length)) = self.outage.filter(|(at, _)| *at <= c.now) else {
            return;
        };
        self.outage = None;
        c.note("outage", || {
            format!("every process crashes for {length} ms")
        });
        for n in 0..c.nodes.len() {
            if c.nodes[n].up() && !c.nodes[n].crashed() {
                c.unpause(n);
                c.heal(n);
                c.crash(n);
                let ip = c.nodes[n].id.server_ip().to_owned();
                // Together, or a little apart.
                let apart = if self.outage_rng.chance(50) {
                    self.outage_rng.between(1, 2_000)
                } else {
                    0
                };
                self.restarts.push((c.now.max(at) + length + apart, ip));
            }
        }
    }

    /// Carries out the deploy steps and the richer shapes' steps due before `until`, each at
    /// its time, in the order of their times.
    pub(crate) fn timed_until(&mut self, c: &mut Cluster, until: u64) {
        loop {
            let next = self
                .timed
                .iter()
                .enumerate()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, (at, _))| (k, *at))
                .filter(|(_, at)| *at < until);
            let Some((k, at)) = next else {
                self.deploy.carry_out(
                    c,
                    &mut self.deploys,
                    &mut self.deploy_rng,
                    until,
                    &mut self.refusals,
                );
                return;
            };
            self.deploy.carry_out(
                c,
                &mut self.deploys,
                &mut self.deploy_rng,
                at,
                &mut self.refusals,
            );
            c.run_until(at);
            self.disruptions.push(at);
            let (_, step) = self.timed.remove(k);
            let ips = self.ips.clone();
            let stage = Stage {
                ips: &ips,
                ..self.stage
            };
            let next = match step {
                Timed::EditStarts => {
                    stage.edit_inside_runs(c, &mut self.edits_rng, &mut self.refusals)
                }
                Timed::Edit(Edit::LagLeader { job, by }) => {
                    // Only in a world with the clock fault: one without keeps true clocks.
                    if let Some(n) = c
                        .leader_of(&job)
                        .filter(|_| self.kinds.contains(&Fault::Clock))
                    {
                        c.step_clock(n, -(by as i64));
                    }
                    Vec::new()
                }
                Timed::Edit(edit) => stage.carry_out(c, edit, &mut self.refusals),
                Timed::LeaderClock => {
                    self.step_leader_clock(c);
                    Vec::new()
                }
            };
            self.timed
                .extend(next.into_iter().map(|(at, e)| (at, Timed::Edit(e))));
        }
    }

    /// The leader of a random job (of those that have one) falls behind (200 ms to 5 s) or
    /// its clock steps (1 to 30 s, forward or back, but never to more than 10 s ahead).
    fn step_leader_clock(&mut self, c: &mut Cluster) {
        // The leaders of the jobs that have one now.
        let leaders: Vec<usize> = self
            .jobs
            .iter()
            .filter_map(|j| c.leader_of(&j.job_name))
            .collect();
        let Some(&n) = self.clocks_rng.pick(&leaders) else {
            return;
        };
        let by = if self.clocks_rng.chance(60) {
            -(self.clocks_rng.between(200, 5_000) as i64)
        } else {
            let step = self.clocks_rng.between(1_000, 30_000) as i64;
            if self.clocks_rng.chance(50) {
                step
            } else {
                -step
            }
        };
        // Ahead by 10 s at most, as one jump of the clock fault: a node ahead runs fires that
        // early and records them done, and after the heal sets its clock right, nothing is
        // due until true time catches up, longer than the liveness bounds allow (seed 69376
        // of the CI world, 39 s ahead, ran nothing for 30 s after the heal). Behind, any lag.
        let skew = c.nodes.get(n).map_or(0, |node| node.skew);
        let by = by.min(10_000 - skew.min(10_000));
        c.step_clock(n, by);
    }
}

impl DeployPlan<'_> {
    /// Carries out the deploy steps due before `until`, each at its time. A job that ignores
    /// cancellation is not removed: its leave could outlast the world. One removal in four is
    /// for good, if another live process is meant to host the job. A job the machine refuses
    /// to take back for another reason than that it is still leaving is a `deploy` violation.
    pub(crate) fn carry_out(
        &self,
        c: &mut Cluster,
        steps: &mut Vec<(u64, Deploy)>,
        rng: &mut Rng,
        until: u64,
        problems: &mut Vec<Violation>,
    ) {
        loop {
            steps.sort();
            if steps.first().is_none_or(|(at, _)| *at >= until) {
                return;
            }
            let (at, step) = steps.remove(0);
            c.run_until(at);
            let live = |c: &Cluster, n: usize| {
                let node = &c.nodes[n];
                node.up()
                    && !node.crashed()
                    && node.paused().is_none()
                    && !node.machine.is_stopped()
            };
            match step {
                Deploy::Remove if at < self.last_removal => {
                    let hosted: Vec<(usize, String)> = (0..c.nodes.len())
                        .filter(|n| live(c, *n))
                        .flat_map(|n| {
                            c.nodes[n]
                                .jobs
                                .iter()
                                .filter(|j| !self.ignore_cancel.contains(*j))
                                .map(|j| (n, j.clone()))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    if let Some((n, job)) = rng.pick(&hosted).cloned() {
                        let elsewhere = (0..c.nodes.len())
                            .any(|m| m != n && live(c, m) && c.nodes[m].jobs.contains(&job));
                        if c.remove_job(n, &job).is_ok() {
                            // Half reload the job at once, half later; some drop it for good.
                            let for_good = rng.chance(25) && elsewhere;
                            let after = if rng.chance(50) {
                                rng.between(0, 500)
                            } else {
                                rng.between(500, 30_000)
                            };
                            if !for_good {
                                steps.push((c.now + after, Deploy::Add(n, job)));
                            }
                        }
                    }
                    steps.push((
                        c.now + rng.between(self.gap / 2, self.gap * 3),
                        Deploy::Remove,
                    ));
                }
                Deploy::Remove => {}
                Deploy::Add(n, job) => {
                    // A process that crashed meanwhile comes back with its server's jobs.
                    if !c.nodes[n].up() || c.nodes[n].crashed() || c.nodes[n].machine.is_stopped() {
                        continue;
                    }
                    let Some(config) = self.jobs.iter().find(|j| j.job_name == job) else {
                        continue;
                    };
                    if !live(c, n) {
                        // Paused: again in a while.
                        steps.push((c.now + 500, Deploy::Add(n, job)));
                        continue;
                    }
                    match c.add_job(n, config) {
                        Ok(()) => {}
                        // Still leaving the job: again in a while.
                        Err(MachineError::JobLeaving(_)) => {
                            steps.push((c.now + 500, Deploy::Add(n, job)));
                        }
                        Err(e) => problems.push(Violation {
                            checker: "deploy",
                            time: c.now,
                            message: format!(
                                "node {n} ({}) cannot take job {job} back: {e}",
                                c.nodes[n].id
                            ),
                        }),
                    }
                }
            }
        }
    }
}
