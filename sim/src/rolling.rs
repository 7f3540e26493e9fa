//! Rolling replacement of one kind of instance by the other, as a deploy tool does it during a
//! migration (`docs/migration.md`, "Rolling"; `docs/migration-design.md` section 4):
//! [`Shape::RollToShardjob`] replaces the world's ElasticJob instances by shardjob ones until
//! none is left (the "last J leaves" of 3.8), [`Shape::RollToElasticjob`] the shardjob
//! instances by ElasticJob ones (a rollback). The usual faults go on meanwhile, on the
//! processes of both kinds.
//!
//! The plan ([`RollPlan`]: when the first server is replaced, the pace) is drawn with the
//! world; each replacement draws, from the roll's own stream, how it goes:
//!
//! - the old process is stopped gracefully (SIGTERM: an ElasticJob JVM lets the fire in
//!   progress end, then removes its leader and instance nodes, [`Cluster::stop_java`]; a
//!   shardjob process leaves its jobs within its shutdown grace, [`Cluster::shutdown`]), and
//!   killed (`kill -9`) if it is still there after the deploy tool's grace; one stop in five is
//!   a `kill -9` at once;
//! - the new process starts on the same server once the old one has gone (four times in ten),
//!   on a new server a moment after the stop (four in ten), or on a new server a moment
//!   before it (two in ten: the new one is up before the old one is stopped).
//!
//! A server replaced is retired from its old kind: a process of that kind that crashed there
//! (a fault, the outage) is not started there again, by the nemesis or by the heal; and after
//! a rollback the heal starts no shardjob process. A process being stopped is left alone by
//! the other faults (the outage aside). The roll ends when no process of the old kind is left
//! ([`RollReport::last_left`]): everything the checkers report from then on is about a
//! cluster of the new kind only.
//!
//! Only seeds that draw a roll (or worlds that ask for one, [`WorldConfig::rolling`]) draw
//! from its stream or take any of its steps: every other seed keeps its world.
//!
//! [`Shape::RollToShardjob`]: crate::swarm::Shape::RollToShardjob
//! [`Shape::RollToElasticjob`]: crate::swarm::Shape::RollToElasticjob
//! [`WorldConfig::rolling`]: crate::world::WorldConfig::rolling

use std::collections::BTreeSet;

use crate::cluster::Cluster;
use crate::nemesis::Nemesis;
use crate::swarm::{ROLL_GRACE_EXTRA_MS, ROLL_GRACE_JAVA_MS, Rng, RollPlan, Rolling};
use crate::world::RollReport;

/// How often a step that waits for a process to go looks again, ms.
const POLL_MS: u64 = 250;

/// A step of a rolling replacement, at its time.
#[derive(Debug, Clone)]
pub(crate) enum RollStep {
    /// The next server of the old kind is replaced (nothing, once none is left).
    Next,
    /// The process of the old kind on server `ip` is stopped.
    Stop {
        /// The server.
        ip: String,
    },
    /// A process of the new kind starts on server `ip`.
    Start {
        /// The server.
        ip: String,
    },
    /// A process of the new kind starts on server `ip` a moment after the old kind's process
    /// there has gone (looked for again every [`POLL_MS`] until then).
    StartOnceGone {
        /// The server.
        ip: String,
    },
    /// The deploy tool's grace for a process it stopped is over: it is killed if it is still
    /// there (an ElasticJob one with `java`, by its index in [`Cluster::java`], else by its
    /// index in [`Cluster::nodes`]).
    Kill {
        /// Whether it is an ElasticJob process.
        java: bool,
        /// Its index.
        index: usize,
    },
    /// Looks (every [`POLL_MS`]) for the moment the last process of the old kind has gone.
    Watch,
}

impl RollStep {
    /// Whether the step only looks (no act of the nemesis, unless what it waited for came).
    pub(crate) fn is_poll(&self) -> bool {
        matches!(self, RollStep::StartOnceGone { .. } | RollStep::Watch)
    }
}

/// A world's rolling replacement as it goes.
pub(crate) struct Roll {
    plan: RollPlan,
    rng: Rng,
    /// The servers of the old kind not replaced yet, in order (known at the first step: the
    /// world's first processes have started then).
    left: Option<Vec<String>>,
    /// The servers replaced (retired from the old kind).
    retired: BTreeSet<String>,
    /// The processes told to stop (ElasticJob's with `true`, by index), whose deploy tool's
    /// grace runs.
    signalled: BTreeSet<(bool, usize)>,
    /// How many new servers were taken.
    fresh: u32,
    /// The deploy tool's grace for a shardjob process: the machines' shutdown grace and a bit.
    shard_grace: u64,
    stopped: usize,
    started: usize,
    last_left: Option<u64>,
}

impl Roll {
    /// The roll of `plan`, drawing from `rng`; `shutdown_grace`: the shardjob machines'
    /// shutdown grace, ms.
    pub(crate) fn new(plan: RollPlan, rng: Rng, shutdown_grace: u64) -> Self {
        Self {
            plan,
            rng,
            left: None,
            retired: BTreeSet::new(),
            signalled: BTreeSet::new(),
            fresh: 0,
            shard_grace: shutdown_grace + ROLL_GRACE_EXTRA_MS,
            stopped: 0,
            started: 0,
            last_left: None,
        }
    }

    /// Which way it goes.
    pub(crate) fn direction(&self) -> Rolling {
        self.plan.direction
    }

    /// Whether the old kind is ElasticJob's.
    fn old_java(&self) -> bool {
        self.plan.direction == Rolling::ToShardjob
    }

    /// Whether server `ip` was retired from its kind (ElasticJob's with `java`).
    pub(crate) fn retired(&self, java: bool, ip: &str) -> bool {
        java == self.old_java() && self.retired.contains(ip)
    }

    /// A new server for a process of the new kind: `10.0.3.k` for shardjob's, `10.0.4.k` for
    /// ElasticJob's.
    fn fresh_ip(&mut self) -> String {
        self.fresh += 1;
        let net = if self.old_java() { 3 } else { 4 };
        format!("10.0.{net}.{}", self.fresh)
    }
}

/// The process of the old kind running on server `ip` (not stopped, not being stopped): an
/// ElasticJob one by its index in [`Cluster::java`] with `java`, else a shardjob one by its
/// index in [`Cluster::nodes`].
fn running_on(c: &Cluster, java: bool, ip: &str) -> Option<usize> {
    if java {
        (0..c.java.len()).find(|j| {
            let n = &c.java[*j];
            n.id.server_ip() == ip && n.up() && !n.stop_requested
        })
    } else {
        (0..c.nodes.len()).find(|k| {
            let n = &c.nodes[*k];
            n.id.server_ip() == ip && n.up() && !n.shutdown_requested && !n.machine.is_stopped()
        })
    }
}

/// Whether a process of the old kind (ElasticJob's with `java`) is still there, on server
/// `ip` or (`None`) anywhere: running, paused or being stopped.
fn still_there(c: &Cluster, java: bool, ip: Option<&str>) -> bool {
    let on = |id: &shardjob_core::InstanceId| ip.is_none_or(|ip| id.server_ip() == ip);
    if java {
        c.java.iter().any(|n| n.up() && on(&n.id))
    } else {
        c.nodes
            .iter()
            .any(|n| n.up() && !n.machine.is_stopped() && on(&n.id))
    }
}

impl Nemesis<'_> {
    /// Carries out a step of the rolling replacement; returns the steps it leads to, each
    /// with its time.
    pub(crate) fn roll_step(&mut self, c: &mut Cluster, step: RollStep) -> Vec<(u64, RollStep)> {
        let Some(roll) = self.roll.as_ref() else {
            return Vec::new();
        };
        let java = roll.old_java();
        let (old, new, a_new) = (
            roll.direction().old_kind(),
            roll.direction().new_kind(),
            roll.direction().a_new_kind(),
        );
        match step {
            RollStep::Next => self.roll_next(c),
            RollStep::Stop { ip } => self.roll_stop(c, &ip),
            RollStep::Start { ip } => {
                self.roll_start(c, &ip);
                Vec::new()
            }
            RollStep::StartOnceGone { ip } => {
                if still_there(c, java, Some(&ip)) {
                    return vec![(c.now + POLL_MS, RollStep::StartOnceGone { ip })];
                }
                let Some(roll) = self.roll.as_mut() else {
                    return Vec::new();
                };
                let moment = roll.rng.between(100, 3_000);
                c.note(("roll-gone", ip.as_str()), || {
                    format!(
                        "rolling: the {old} process on {ip} has gone; {a_new} process starts \
                         there in {moment} ms"
                    )
                });
                vec![(c.now + moment, RollStep::Start { ip })]
            }
            RollStep::Kill { java, index } => {
                if java && c.java.get(index).is_some_and(|n| n.up()) {
                    c.note(("roll-kill-java", index), || {
                        format!(
                            "rolling: elasticjob {index} is still there after the deploy \
                             tool's grace: killed"
                        )
                    });
                    c.crash_java(index);
                } else if !java
                    && c.nodes
                        .get(index)
                        .is_some_and(|n| n.up() && !n.machine.is_stopped())
                {
                    c.note(("roll-kill", index), || {
                        format!(
                            "rolling: node {index} is still there after the deploy tool's \
                             grace: killed"
                        )
                    });
                    c.crash(index);
                }
                Vec::new()
            }
            RollStep::Watch => {
                if still_there(c, java, None) {
                    return vec![(c.now + POLL_MS, RollStep::Watch)];
                }
                c.note("roll-done", || {
                    format!("rolling: the last {old} process has gone; {new} processes only now")
                });
                if let Some(roll) = self.roll.as_mut() {
                    roll.last_left = Some(c.now);
                }
                Vec::new()
            }
        }
    }

    /// The next server of the old kind is replaced, in the way drawn for it.
    fn roll_next(&mut self, c: &mut Cluster) -> Vec<(u64, RollStep)> {
        let servers = if self.roll.as_ref().is_some_and(Roll::old_java) {
            self.java_ips.clone()
        } else {
            self.ips.clone()
        };
        let Some(roll) = self.roll.as_mut() else {
            return Vec::new();
        };
        let java = roll.old_java();
        let left = roll.left.get_or_insert(servers);
        if left.is_empty() {
            return vec![(c.now + POLL_MS, RollStep::Watch)];
        }
        let ip = left.remove(0);
        let more = !left.is_empty();
        roll.retired.insert(ip.clone());
        let way = roll.rng.below(10);
        let moment = roll.rng.between(200, 10_000);
        let fresh = (!(2..6).contains(&way)).then(|| roll.fresh_ip());
        let gap = roll.plan.gap;
        let (old, a_new) = (roll.direction().old_kind(), roll.direction().a_new_kind());
        // A process of the old kind that crashed there is not started again.
        if java {
            self.java_restarts.retain(|(_, server)| *server != ip);
        } else {
            self.restarts.retain(|(_, server)| *server != ip);
        }
        let now = c.now;
        let mut steps = Vec::new();
        match fresh {
            // On a new server, up before the old process is stopped.
            Some(to) if way < 2 => {
                c.note(("roll-next", ip.as_str(), 0), || {
                    format!(
                        "rolling: {ip} is replaced: {a_new} process starts on {to}, the {old} \
                         process on {ip} is stopped in {moment} ms"
                    )
                });
                self.roll_start(c, &to);
                steps.push((now + moment, RollStep::Stop { ip }));
            }
            // On a new server, a moment after the stop.
            Some(to) => {
                c.note(("roll-next", ip.as_str(), 1), || {
                    format!(
                        "rolling: {ip} is replaced: its {old} process is stopped, {a_new} \
                         process starts on {to} in {moment} ms"
                    )
                });
                steps.extend(self.roll_stop(c, &ip));
                steps.push((now + moment, RollStep::Start { ip: to }));
            }
            // On the same server, once the old process has gone.
            None => {
                c.note(("roll-next", ip.as_str(), 2), || {
                    format!(
                        "rolling: {ip} is replaced: its {old} process is stopped, {a_new} \
                         process starts there once it has gone"
                    )
                });
                steps.extend(self.roll_stop(c, &ip));
                steps.push((now + POLL_MS, RollStep::StartOnceGone { ip }));
            }
        }
        steps.push(if more {
            (now + gap, RollStep::Next)
        } else {
            (now + POLL_MS, RollStep::Watch)
        });
        steps
    }

    /// The old kind's process on server `ip` is stopped: gracefully (killed after the deploy
    /// tool's grace if still there), or killed at once one time in five. Nothing if none runs
    /// there (it crashed before its turn). A paused process handles the SIGTERM once it runs
    /// again (looked for every 500 ms), and the deploy tool's grace runs from the signal.
    fn roll_stop(&mut self, c: &mut Cluster, ip: &str) -> Vec<(u64, RollStep)> {
        let Some(roll) = self.roll.as_mut() else {
            return Vec::new();
        };
        let java = roll.old_java();
        let Some(index) = running_on(c, java, ip) else {
            return Vec::new();
        };
        let mut steps = Vec::new();
        if roll.signalled.insert((java, index)) {
            roll.stopped += 1;
            if roll.rng.chance(20) {
                if java {
                    c.note(("roll-kill-java-now", index), || {
                        format!("rolling: elasticjob {index} on {ip} is killed (kill -9)")
                    });
                    c.crash_java(index);
                } else {
                    c.note(("roll-kill-now", index), || {
                        format!("rolling: node {index} on {ip} is killed (kill -9)")
                    });
                    c.crash(index);
                }
                return steps;
            }
            let grace = if java {
                ROLL_GRACE_JAVA_MS
            } else {
                roll.shard_grace
            };
            steps.push((c.now + grace, RollStep::Kill { java, index }));
        }
        let paused = if java {
            c.java[index].paused().is_some()
        } else {
            c.nodes[index].paused().is_some()
        };
        if paused {
            steps.push((c.now + 500, RollStep::Stop { ip: ip.to_owned() }));
        } else if java {
            c.stop_java(index);
        } else {
            c.shutdown(index);
        }
        steps
    }

    /// A process of the new kind starts on server `ip`.
    fn roll_start(&mut self, c: &mut Cluster, ip: &str) {
        let Some(roll) = self.roll.as_mut() else {
            return;
        };
        roll.started += 1;
        if roll.old_java() {
            self.join(c, ip);
        } else {
            self.join_java(c, ip);
        }
    }

    /// What the rolling replacement did, if the world made one.
    pub(crate) fn roll_report(&self) -> Option<RollReport> {
        self.roll.as_ref().map(|r| RollReport {
            direction: r.direction(),
            stopped: r.stopped,
            started: r.started,
            last_left: r.last_left,
        })
    }
}
