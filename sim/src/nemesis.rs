//! The nemesis: what goes wrong in a world during its chaos, one method per fault (see
//! [`Fault`]), with the restarts and undos it owes, the deploys and the outage it plans, and
//! the timed steps of the richer shapes ([`Shape::Edits`], [`Shape::LeaderClocks`],
//! [`Shape::Flaps`], [`Shape::TriggerFailover`], [`Shape::Foreign`], [`Shape::SplitEnd`],
//! [`Shape::LateRemoval`], and the rolling replacements of [`crate::rolling`]).
//!
//! Each kind of draw comes from its own stream of the swarm ([`Swarm`]), so that a seed that
//! does not draw a shape keeps what it did before.
//!
//! [`Shape::Edits`]: crate::swarm::Shape::Edits
//! [`Shape::LeaderClocks`]: crate::swarm::Shape::LeaderClocks
//! [`Shape::Flaps`]: crate::swarm::Shape::Flaps
//! [`Shape::TriggerFailover`]: crate::swarm::Shape::TriggerFailover
//! [`Shape::Foreign`]: crate::swarm::Shape::Foreign
//! [`Shape::SplitEnd`]: crate::swarm::Shape::SplitEnd
//! [`Shape::LateRemoval`]: crate::swarm::Shape::LateRemoval

use std::collections::BTreeSet;

use shardjob_core::JobConfig;
use shardjob_core::machine::MachineError;

use crate::checkers::Violation;
use crate::cluster::{Cluster, LoseReplyTo};
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
    /// A session flap begins ([`Shape::Flaps`]), or is tried again `tries` more times, a
    /// second apart, while too few processes are connected.
    FlapStarts { tries: u32 },
    /// A later step of one.
    Flap(FlapStep),
    /// An operator triggers a job whose runs are then failed over ([`Shape::TriggerFailover`]),
    /// or tries again `tries` more times, a second apart, while no job can be.
    TriggerStarts { tries: u32 },
    /// A later step of one.
    Trigger(TriggerStep),
    /// Foreign nodes are written into a job ([`Shape::Foreign`]).
    Foreign,
    /// A step of a rolling replacement ([`crate::rolling`]).
    Roll(crate::rolling::RollStep),
    /// A run's end is split by a lowered transaction limit and loses its first part's reply
    /// ([`Shape::SplitEnd`]), or the run it needs is looked for again `tries` more times, a
    /// quarter of a second apart.
    SplitEndStarts { tries: u32 },
    /// A stale marker is left for a late removal ([`Shape::LateRemoval`]), or an item it
    /// needs is looked for again `tries` more times, as the next window of a job opens.
    LateRemovalStarts { tries: u32 },
    /// A node's watch falls this many ms behind its reads (a late removal's leader).
    SlowWatch(usize, u64),
    /// A watch slowed by [`Timed::SlowWatch`] delivers on time again.
    RestoreWatch(usize),
    /// A node no longer loses the reply to the request picked for it: the episode of a split
    /// end or of a late removal is over.
    ReplyKept(usize),
}

/// A later step of a session flap ([`Shape::Flaps`]).
#[derive(Debug, Clone)]
pub(crate) enum FlapStep {
    /// A process loses its link to the registry.
    Cut(usize),
    /// A process the flap cut off is reconnected.
    Back(usize),
    /// A process the flap cut off is reconnected, its watch slowed by this many ms.
    BackSlow(usize, u64),
    /// A watch the flap slowed delivers on time again.
    Restore(usize),
}

/// A later step of a failed-over trigger ([`Shape::TriggerFailover`]).
#[derive(Debug, Clone)]
pub(crate) enum TriggerStep {
    /// An instance running the trigger's run of `job` crashes (looked for `tries` more times,
    /// a few ms apart, until one runs).
    CrashRunner { job: String, tries: u32 },
    /// An instance running one of `items` of `job` crashes: one that took none of the
    /// trigger's runs over since the first crash (in the world's runs from index `since` on),
    /// running an item that one of those whose failover claim lost its reply took over
    /// (looked for `tries` more times). `flagged`: the processes set to lose that reply;
    /// `lossy`: those whose loss was used up, once the step first looked.
    CrashAgain {
        job: String,
        items: BTreeSet<u32>,
        since: usize,
        tries: u32,
        flagged: BTreeSet<usize>,
        lossy: Option<BTreeSet<usize>>,
    },
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
    /// The jobs of the ElasticJob instances, if the world has any
    /// ([`crate::world::WorldConfig::elasticjob`]).
    java_jobs: Vec<crate::elasticjob::JavaJob>,
    /// The ElasticJob instances' servers.
    pub(crate) java_ips: Vec<String>,
    /// Crashed ElasticJob processes to start again, with their time.
    pub(crate) java_restarts: Vec<(u64, String)>,
    /// Faults of ElasticJob processes to undo, with their time.
    java_undo: Vec<(u64, usize, Fault)>,
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
    flaps_rng: Rng,
    /// Until when a session flap goes on: the nemesis's other acts wait (they would move its
    /// timing: a registry restart, say, lengthens the sessions it means to expire).
    flap_until: u64,
    trigger_rng: Rng,
    /// Whether a failed-over trigger goes on: another waits for its end, and so do the
    /// nemesis's other acts (which would crash or cut off the processes it is about).
    trigger_busy: bool,
    /// Whether a failed-over trigger got as far as its later crash: no other begins then, and
    /// the nemesis's other acts are over.
    trigger_done: bool,
    foreign_rng: Rng,
    /// How many foreign instance nodes were written (each gets its own id).
    foreign_count: u32,
    split_rng: Rng,
    late_rng: Rng,
    /// How many markers late removals left (each gets its own dead owner).
    late_count: u32,
    /// Until when a split end or a late removal goes on: the nemesis's drawn acts wait (a
    /// crash or a cut-off of the processes it is about would end it otherwise); the other
    /// shapes' steps go on.
    quiet_until: u64,
    /// When the heal comes: no split end or late removal begins in the last 10 s before it.
    heal_at: u64,
    /// What the cluster refused to do, as violations (none, as the choices were checked
    /// before the world ran).
    pub(crate) refusals: Vec<Violation>,
    /// When the nemesis acted (a fault, its undo, a restart, an operator, a deploy, a step of
    /// a shape): a fire due meanwhile may wait for the world to calm down, and no longer.
    pub(crate) disruptions: Vec<u64>,
    /// The rolling replacement, if the world makes one ([`crate::rolling`]).
    pub(crate) roll: Option<crate::rolling::Roll>,
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
            mut flaps_rng,
            mut trigger_rng,
            mut foreign_rng,
            roll_rng,
            mut split_rng,
            mut late_rng,
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
        // A flap spans a session timeout and a few seconds; a failed-over trigger two session
        // timeouts and some 20 s (the later crash, and the fires it loses when the machine is
        // wrong): both begin early enough to end before the heal.
        let timeout = swarm.session_timeout.as_millis() as u64;
        if swarm.shapes.contains(&Shape::Flaps) {
            let last = heal_at.saturating_sub(timeout + 5_000);
            for _ in 0..flaps_rng.between(1, most).min(60) {
                let at = flaps_rng.between(mean_gap / 4, last.max(mean_gap / 4));
                timed.push((at, Timed::FlapStarts { tries: 60 }));
            }
        }
        if swarm.shapes.contains(&Shape::TriggerFailover) {
            let last = heal_at.saturating_sub(2 * timeout + 25_000);
            for _ in 0..trigger_rng.between(1, most).min(60) {
                let at = trigger_rng.between(mean_gap / 4, last.max(mean_gap / 4));
                timed.push((at, Timed::TriggerStarts { tries: 60 }));
            }
        }
        // Foreign nodes: early enough that the marker's grace (a session timeout, after the
        // leader sees it) and the failover of its fire end well before the heal.
        if swarm.shapes.contains(&Shape::Foreign) {
            let last = heal_at.saturating_sub(2 * timeout + 30_000);
            if last > mean_gap / 4 {
                for _ in 0..foreign_rng.between(1, 3) {
                    let at = foreign_rng.between(mean_gap / 4, last);
                    timed.push((at, Timed::Foreign));
                }
            }
        }
        let roll = swarm.roll.map(|plan| {
            timed.push((plan.first, Timed::Roll(crate::rolling::RollStep::Next)));
            crate::rolling::Roll::new(plan, roll_rng, grace)
        });
        // A split end waits for a run of many items (its job fires every minute); a late removal
        // for an idle item just before its fire: both begin early enough to be over before
        // the heal (a session timeout of grace, a request's timeout, the lag of a watch).
        if swarm.shapes.contains(&Shape::SplitEnd) {
            let last = heal_at.saturating_sub(2 * timeout + 30_000);
            let at = split_rng.between(mean_gap / 4, last.max(mean_gap / 4));
            timed.push((at, Timed::SplitEndStarts { tries: 400 }));
        }
        if swarm.shapes.contains(&Shape::LateRemoval) {
            let last = heal_at.saturating_sub(2 * timeout + 30_000);
            for _ in 0..late_rng.between(1, 3) {
                let at = late_rng.between(mean_gap / 4, last.max(mean_gap / 4));
                timed.push((at, Timed::LateRemovalStarts { tries: 100 }));
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
            java_jobs: Vec::new(),
            java_ips: Vec::new(),
            java_restarts: Vec::new(),
            java_undo: Vec::new(),
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
            flaps_rng,
            flap_until: 0,
            trigger_rng,
            trigger_busy: false,
            trigger_done: false,
            foreign_rng,
            foreign_count: 0,
            split_rng,
            late_rng,
            late_count: 0,
            quiet_until: 0,
            heal_at,
            refusals: Vec::new(),
            disruptions: Vec::new(),
            roll,
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

    /// Starts `count` ElasticJob instances, on servers `10.0.2.{k+1}`, hosting every job as
    /// a `SCRIPT` job (the shardjob nodes host them under that type too).
    pub(crate) fn start_java(&mut self, c: &mut Cluster, count: usize) {
        self.java_jobs = self
            .jobs
            .iter()
            .map(|j| crate::elasticjob::JavaJob::script(j.clone()))
            .collect();
        for k in 0..count {
            let ip = format!("10.0.2.{}", k + 1);
            self.join_java(c, &ip);
            self.java_ips.push(ip);
        }
    }

    /// Starts an ElasticJob process on server `ip` (the next pid).
    pub(crate) fn join_java(&mut self, c: &mut Cluster, ip: &str) -> Option<usize> {
        let result = c.add_elasticjob_node(&format!("{ip}@-@{}", self.next_pid), &self.java_jobs);
        self.next_pid += 1;
        refusal(c.now, result, &mut self.refusals)
    }

    /// The ElasticJob processes that run, hear the registry and are not cut off, as indices
    /// after the shardjob nodes' (`c.nodes.len() + j`): a nemesis's pick among shardjob and
    /// ElasticJob processes alike. None in a world without them.
    fn java_up(c: &Cluster) -> impl Iterator<Item = usize> + '_ {
        (0..c.java.len())
            .filter(|j| {
                let n = &c.java[*j];
                n.active() && !n.partitioned() && !n.deaf() && !n.stop_requested
            })
            .map(|j| c.nodes.len() + j)
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
            // A process being stopped (by a rolling replacement) is left alone, as an
            // ElasticJob one is ([`Self::java_up`]).
            let up: Vec<usize> = (0..c.nodes.len())
                .filter(|n| c.nodes[*n].up() && !c.nodes[*n].partitioned() && !c.nodes[*n].deaf())
                .filter(|n| c.nodes[*n].paused().is_none() && !c.nodes[*n].shutdown_requested)
                .collect();
            // ElasticJob processes suffer the same faults (none in a world without them).
            let mut up_all = up.clone();
            up_all.extend(Self::java_up(c));
            let fault = *self.rng.pick(&self.kinds).unwrap_or(&Fault::Deploy);
            // While a session flap or a failed-over trigger goes on, it is the act of the
            // moment; once a failed-over trigger got as far as its later crash, the chaos is
            // over but for deploys and an outage (a crash of a process that took a run over
            // would end its session, and with it whatever its claim left in the registry).
            let fault = if c.now < self.flap_until
                || c.now < self.quiet_until
                || self.trigger_busy
                || self.trigger_done
            {
                Fault::Deploy
            } else {
                fault
            };
            match fault {
                Fault::Crash if up_all.len() > 1 => self.crash(c, &up_all),
                Fault::Partition | Fault::Deaf | Fault::Pause if !up_all.is_empty() => {
                    self.cut_off(c, &up_all, fault)
                }
                Fault::RegistryRestart => self.restart_registry(c),
                Fault::Clock if !up_all.is_empty() => self.jump_clock(c, &up_all),
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
        if let Some(j) = n.checked_sub(c.nodes.len()) {
            c.crash_java(j);
            let ip = c.java[j].id.server_ip().to_owned();
            self.java_restarts
                .push((c.now + self.rng.between(1_000, 60_000), ip));
            return;
        }
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
        if let Some(j) = n.checked_sub(c.nodes.len()) {
            match fault {
                Fault::Partition => c.partition_java(j),
                Fault::Deaf => c.deafen_java(j),
                _ => c.pause_java(j),
            }
            self.java_undo.push((c.now + length, j, fault));
            return;
        }
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
        if let Some(j) = n.checked_sub(c.nodes.len()) {
            let skew = c.java[j].skew + jump;
            c.set_java_skew(j, skew);
            c.note(("java-clock", j, jump), || {
                format!("elasticjob {j}: wall clock stepped by {jump} ms")
            });
            return;
        }
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
            if !self.retired(false, &ip) {
                self.join(c, &ip);
            }
        }
        self.java_restarts.sort();
        while self
            .java_restarts
            .first()
            .is_some_and(|(at, _)| *at <= c.now)
        {
            let (_, ip) = self.java_restarts.remove(0);
            if !self.retired(true, &ip) {
                self.join_java(c, &ip);
            }
        }
    }

    /// Whether a rolling replacement retired server `ip` of its kind (ElasticJob's with
    /// `java`): no process of that kind is started there again.
    pub(crate) fn retired(&self, java: bool, ip: &str) -> bool {
        self.roll.as_ref().is_some_and(|r| r.retired(java, ip))
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
        self.java_undo.sort();
        while self
            .java_undo
            .first()
            .is_some_and(|(at, _, _)| *at <= c.now)
        {
            let (_, j, f) = self.java_undo.remove(0);
            match f {
                Fault::Pause => c.unpause_java(j),
                _ => c.heal_java(j),
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
        for j in 0..c.java.len() {
            if c.java[j].up() {
                c.unpause_java(j);
                c.heal_java(j);
                c.crash_java(j);
                let ip = c.java[j].id.server_ip().to_owned();
                let apart = if self.outage_rng.chance(50) {
                    self.outage_rng.between(1, 2_000)
                } else {
                    0
                };
                self.java_restarts
                    .push((c.now.max(at) + length + apart, ip));
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
            let (_, step) = self.timed.remove(k);
            // A rolling replacement's polls (has a process exited yet?) are no act.
            if !matches!(&step, Timed::Roll(s) if s.is_poll()) {
                self.disruptions.push(at);
            }
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
                Timed::FlapStarts { tries } => {
                    match self.flap(c) {
                        Some(steps) => self
                            .timed
                            .extend(steps.into_iter().map(|(at, f)| (at, Timed::Flap(f)))),
                        None if tries > 0 => self
                            .timed
                            .push((c.now + 1_000, Timed::FlapStarts { tries: tries - 1 })),
                        None => {}
                    }
                    Vec::new()
                }
                Timed::Flap(step) => {
                    self.flap_step(c, step);
                    Vec::new()
                }
                Timed::TriggerStarts { tries } => {
                    match self.trigger_to_fail_over(c) {
                        Some(steps) => self
                            .timed
                            .extend(steps.into_iter().map(|(at, t)| (at, Timed::Trigger(t)))),
                        None if tries > 0 => self
                            .timed
                            .push((c.now + 1_000, Timed::TriggerStarts { tries: tries - 1 })),
                        None => {}
                    }
                    Vec::new()
                }
                Timed::Foreign => {
                    self.foreign(c);
                    Vec::new()
                }
                Timed::Roll(step) => {
                    let steps = self.roll_step(c, step);
                    self.timed
                        .extend(steps.into_iter().map(|(at, r)| (at, Timed::Roll(r))));
                    Vec::new()
                }
                Timed::SplitEndStarts { tries } => {
                    match self.split_end(c) {
                        Some(steps) => self.timed.extend(steps),
                        None if tries > 0 && c.now + 10_000 < self.heal_at => self
                            .timed
                            .push((c.now + 250, Timed::SplitEndStarts { tries: tries - 1 })),
                        None => {}
                    }
                    Vec::new()
                }
                Timed::LateRemovalStarts { tries } => {
                    match self.late_removal(c) {
                        Ok(steps) => self.timed.extend(steps),
                        Err(at) if tries > 0 && at.saturating_add(10_000) < self.heal_at => self
                            .timed
                            .push((at, Timed::LateRemovalStarts { tries: tries - 1 })),
                        Err(_) => {}
                    }
                    Vec::new()
                }
                Timed::SlowWatch(n, lag) => {
                    if c.nodes[n].active() {
                        c.slow_watch(n, c.watch_delay + lag);
                    }
                    Vec::new()
                }
                Timed::RestoreWatch(n) => {
                    c.restore_watch(n);
                    Vec::new()
                }
                Timed::ReplyKept(n) => {
                    c.lose_reply_to(n, None);
                    Vec::new()
                }
                Timed::Trigger(step) => {
                    let steps = self.trigger_step(c, step);
                    // No step left: the episode is over.
                    self.trigger_busy = !steps.is_empty();
                    self.timed
                        .extend(steps.into_iter().map(|(at, t)| (at, Timed::Trigger(t))));
                    Vec::new()
                }
            };
            self.timed
                .extend(next.into_iter().map(|(at, e)| (at, Timed::Edit(e))));
        }
    }

    /// Foreign nodes ([`Shape::Foreign`]): in a job drawn at random, a persistent instance node
    /// of server `10.9.9.9` (an instance's YAML, or garbage), and a persistent `running` marker
    /// on an item that exists and runs nowhere now, held by that node's id or by a dead
    /// instance's.
    fn foreign(&mut self, c: &mut Cluster) {
        let Some(job) = self.foreign_rng.pick(self.jobs).map(|j| j.job_name.clone()) else {
            return;
        };
        self.foreign_count += 1;
        let pid = 90_000 + self.foreign_count;
        let (id, value) = if self.foreign_rng.chance(50) {
            let id = format!("10.9.9.9@-@{pid}");
            let value = format!("jobInstanceId: {id}\nserverIp: 10.9.9.9\n");
            (id, value)
        } else {
            (format!("10.9.9.9@-@junk{pid}"), "garbage".to_owned())
        };
        let result = c.foreign_create(&format!("/{job}/instances/{id}"), value.as_bytes());
        refusal(c.now, result, &mut self.refusals);
        let total = c
            .config_of(&job)
            .map_or(0, |config| config.sharding_total_count);
        if total == 0 {
            return;
        }
        let owner = if self.foreign_rng.chance(50) {
            id
        } else {
            format!("10.9.9.8@-@{pid}")
        };
        let first = self.foreign_rng.between(0, u64::from(total) - 1) as u32;
        for k in 0..total {
            let item = (first + k) % total;
            let path = format!("/{job}/sharding/{item}/running");
            match c.foreign_create(&path, owner.as_bytes()) {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    refusal::<()>(c.now, Err(e), &mut self.refusals);
                    return;
                }
            }
        }
    }

    /// Whether another episode of a richer shape goes on (a flap, a failed-over trigger, a
    /// split end, a late removal): a split end or a late removal waits for its end.
    fn episode_on(&self, c: &Cluster) -> bool {
        c.now < self.flap_until || c.now < self.quiet_until || self.trigger_busy
    }

    /// The first step of a split end ([`Shape::SplitEnd`]): a connected process runs an
    /// execution of 8 items or more, not ending within 100 ms; the registry's transaction
    /// limit is lowered below what the execution's end needs in one transaction (to 24 to 64
    /// operations, and at most 3 an item: an end costs 3 compares an item and a session
    /// check), and the process is set to lose the reply to the first part of that end that
    /// fits.
    /// The episode lasts until two session timeouts and three requests' timeouts after the
    /// run's end. `None` if no process runs such an execution now, or while another episode
    /// goes on.
    fn split_end(&mut self, c: &mut Cluster) -> Option<Vec<(u64, Timed)>> {
        if self.episode_on(c) {
            return None;
        }
        let mut runs: Vec<(usize, String, BTreeSet<u32>, u64)> = Vec::new();
        for n in Self::connected(c) {
            for r in c.nodes[n].running.values() {
                if r.cancelled || r.ends <= c.now + 100 || r.exec.items.len() < 8 {
                    continue;
                }
                let items = r.exec.items.iter().map(|i| i.item).collect();
                runs.push((n, r.exec.job_name.clone(), items, r.ends));
            }
        }
        let (n, job, items, ends) = self.split_rng.pick(&runs).cloned()?;
        let most = (3 * items.len() as u64).min(64);
        let limit = self.split_rng.between(24, most) as usize;
        c.note(("split-end", n, &job, limit), || {
            format!(
                "the registry's servers restart one by one with a limit of {limit} operations a \
                 transaction, while node {n} runs {} items of {job} in one execution; its \
                 connection will drop as it records the first part of their end",
                items.len()
            )
        });
        c.set_max_txn_ops(Some(limit));
        c.lose_reply_to(n, Some(LoseReplyTo::EndPart { job, items }));
        let timeout = c.session_timeout.as_millis() as u64;
        let until = ends + 2 * timeout + 3 * c.request_timeout;
        self.quiet_until = until;
        Some(vec![(until, Timed::ReplyKept(n))])
    }

    /// The first step of a late removal ([`Shape::LateRemoval`]): a job whose failover and
    /// misfire are on, led by a connected process, has an idle item (no `running` marker, its
    /// latest fire done, no run in its record) owned by another connected process, and the
    /// job's next fire comes more than a second (the fire's tolerance) and the watch's delay
    /// after now, and 300 ms before a session timeout (the marker's grace) has passed. A
    /// foreign hand then leaves a persistent `running` marker of a dead instance on the item;
    /// the leader's watch falls behind its reads by a request's timeout and 0.5 to 3 s more
    /// (the marker's creation, already on its way, comes on time), and the leader is set to
    /// lose the reply to its removal of the marker. The item's owner sees the fire blocked,
    /// and claims it once the marker goes; the leader, timed out and seeing the old marker
    /// still, removes it again. If no item is so now, or while another episode goes on, when
    /// to look again (`u64::MAX`: never, the session timeout is too short for the window).
    fn late_removal(&mut self, c: &mut Cluster) -> Result<Vec<(u64, Timed)>, u64> {
        use shardjob_core::machine::record::ItemRecord;
        if self.episode_on(c) {
            return Err(c.now + 500);
        }
        let connected = Self::connected(c);
        let timeout = c.session_timeout.as_millis() as i64;
        let delay = c.watch_delay_bound() as i64;
        // How long before the job's next fire the marker is left: the fire must come after
        // the fire's tolerance has passed since the leader saw the marker, and before its
        // grace is over.
        let (open, close) = (1_000 + delay + 200, timeout - 300);
        if open >= close {
            return Err(u64::MAX);
        }
        let now = c.time().wall;
        // When to look again: as the next window of a job opens, in 5 s at the latest.
        let mut again = c.now + 5_000;
        let mut candidates: Vec<(String, u32, usize)> = Vec::new();
        for j in self.jobs {
            let job = &j.job_name;
            // The drawn configuration sifts (cheaply); the registry's decides.
            let Some(cron) = j.cron.as_ref().filter(|_| j.failover && j.misfire) else {
                continue;
            };
            let Some(next) = cron.next_after(now, &j.time_zone) else {
                continue;
            };
            let Some(after) = cron.next_after(next, &j.time_zone) else {
                continue;
            };
            let (to_next, to_after) = (
                (next - now).num_milliseconds(),
                (after - now).num_milliseconds(),
            );
            if to_after - to_next <= open {
                continue;
            }
            let opens = if to_next >= close {
                to_next - close + 1
            } else {
                (to_next + 1).max(to_after - close + 1)
            };
            again = again.min(c.now + opens.max(1) as u64);
            if to_next <= open || to_next >= close {
                continue;
            }
            let Some(config) = c.config_of(job).filter(|f| f.failover && f.misfire) else {
                continue;
            };
            let Some(leader) = c.leader_of(job).filter(|l| connected.contains(l)) else {
                continue;
            };
            let latest = next.timestamp_millis() - (to_after - to_next);
            for (item, owner) in c.owners(job) {
                if item >= config.sharding_total_count {
                    continue;
                }
                let owned_by = connected
                    .iter()
                    .copied()
                    .find(|n| c.nodes[*n].id.as_str() == owner);
                if owned_by.is_none_or(|o| o == leader) {
                    continue;
                }
                if c.exists(&format!("/{job}/sharding/{item}/running")) {
                    continue;
                }
                let record = c
                    .read(&format!("/{job}/sharding/{item}/execution"))
                    .and_then(|text| ItemRecord::parse(text.as_bytes()).ok());
                if record.is_some_and(|r| r.run.is_none() && r.done == Some(latest)) {
                    candidates.push((job.clone(), item, leader));
                }
            }
        }
        let Some((job, item, leader)) = self.late_rng.pick(&candidates).cloned() else {
            return Err(again);
        };
        self.late_count += 1;
        let dead = format!("10.9.9.7@-@{}", 95_000 + self.late_count);
        let path = format!("/{job}/sharding/{item}/running");
        match c.foreign_create(&path, dead.as_bytes()) {
            Ok(true) => {}
            Ok(false) => return Err(again),
            Err(e) => {
                refusal::<()>(c.now, Err(e), &mut self.refusals);
                return Ok(Vec::new());
            }
        }
        let lag = c.request_timeout + self.late_rng.between(500, 3_000);
        c.note(("late-removal", leader, &path, lag), || {
            format!(
                "node {leader}, leading {job}, will lose the reply to its removal of {path}, \
                 its watch {lag} ms behind its reads"
            )
        });
        c.lose_reply_to(leader, Some(LoseReplyTo::Removal { path }));
        let removal = c.now + (delay + timeout) as u64;
        let until = removal + lag + c.request_timeout + 2_000;
        self.quiet_until = until;
        Ok(vec![
            (c.now, Timed::SlowWatch(leader, lag)),
            (until, Timed::RestoreWatch(leader)),
            (until, Timed::ReplyKept(leader)),
        ])
    }

    /// The processes that run and hear the registry, and are not cut off, deaf or paused.
    fn connected(c: &Cluster) -> Vec<usize> {
        (0..c.nodes.len())
            .filter(|n| {
                let node = &c.nodes[*n];
                node.active()
                    && !node.partitioned()
                    && !node.deaf()
                    && !node.machine.is_stopped()
                    && node.session.is_some()
            })
            .collect()
    }

    /// Whether a process other than `n` runs (paused or cut off, maybe), so that a crash of
    /// `n` leaves the world one.
    fn others_up(c: &Cluster, n: usize) -> bool {
        (0..c.nodes.len()).any(|m| m != n && c.nodes[m].up() && !c.nodes[m].machine.is_stopped())
    }

    /// The first step of a session flap ([`Shape::Flaps`]): the registry becomes unreachable
    /// from every connected process for just past the session timeout, and they come back one
    /// after another. The first to lose its link (the observer) is back first, its session
    /// expired: it opens a new one, and its watch, slowed by `lag` ms, hands it the new
    /// session (and so its reload of every job) `lag` ms later. One process (the flapper) lost
    /// its link `skew` ms after the others, so that its session expires a moment after the
    /// observer's new session began: the deletion of its instance nodes reaches the observer
    /// through the slowed watch as the observer's reload comes back. The flapper is back
    /// `back` ms after its expiry and registers anew at once, which that reload already reads;
    /// the others are back once the observer registered. `None` if fewer than two processes
    /// are connected now, or while an earlier flap goes on.
    fn flap(&mut self, c: &mut Cluster) -> Option<Vec<(u64, FlapStep)>> {
        let connected = Self::connected(c);
        if connected.len() < 2 || c.now < self.flap_until {
            return None;
        }
        let &flapper = self.flaps_rng.pick(&connected)?;
        let others: Vec<usize> = connected
            .iter()
            .copied()
            .filter(|n| *n != flapper)
            .collect();
        let &observer = self.flaps_rng.pick(&others)?;
        let timeout = c.session_timeout.as_millis() as u64;
        // What the flapper's registration takes once it is back: its new session through its
        // own watch, and a few round trips.
        let registration = 4 * c.latency_bound() + c.watch_delay_bound();
        let lag = registration + self.flaps_rng.between(300, 2_500);
        let back = self.flaps_rng.between(1, (lag - registration) / 2);
        let skew = self.flaps_rng.between(2, 500);
        let expiry = c.now + skew + timeout;
        let observer_back = expiry - 1;
        let rest_back = observer_back + lag + self.flaps_rng.between(300, 3_000);
        self.flap_until = rest_back + 1_000;
        c.note(("flap", flapper, observer, lag, back, skew), || {
            format!(
                "sessions flap: the registry is unreachable from every instance for just past \
                 the session timeout; node {observer} is back first, its watch {lag} ms late, \
                 node {flapper} (cut off {skew} ms after the others) {back} ms after its \
                 session expires, the others {} ms later",
                rest_back - observer_back
            )
        });
        let mut steps = vec![
            (c.now + skew, FlapStep::Cut(flapper)),
            (expiry + back, FlapStep::Back(flapper)),
            (observer_back, FlapStep::BackSlow(observer, lag)),
            (rest_back + lag, FlapStep::Restore(observer)),
        ];
        for n in others {
            c.partition(n);
            if n != observer {
                steps.push((rest_back, FlapStep::Back(n)));
            }
        }
        Some(steps)
    }

    /// Carries out a later step of a session flap.
    fn flap_step(&mut self, c: &mut Cluster, step: FlapStep) {
        match step {
            FlapStep::Cut(n) => {
                if c.nodes[n].active() && !c.nodes[n].partitioned() {
                    c.partition(n);
                }
            }
            FlapStep::BackSlow(n, lag) => {
                if c.nodes[n].up() && c.nodes[n].partitioned() {
                    c.slow_watch(n, c.watch_delay + lag);
                    c.heal(n);
                }
            }
            FlapStep::Back(n) => {
                if c.nodes[n].up() && c.nodes[n].partitioned() {
                    c.heal(n);
                }
            }
            FlapStep::Restore(n) => c.restore_watch(n),
        }
    }

    /// The first step of a failed-over trigger ([`Shape::TriggerFailover`]): an operator
    /// triggers a job whose failover is on, on every connected process that hosts it (as
    /// ElasticJob's trigger API does), if two or more do; `None` if no job can be now, or
    /// while an earlier one goes on.
    fn trigger_to_fail_over(&mut self, c: &mut Cluster) -> Option<Vec<(u64, TriggerStep)>> {
        if self.trigger_busy {
            return None;
        }
        // One episode that got as far as its later crash is enough: another would crash
        // processes again, among them, maybe, those holding what the first is about.
        if self.trigger_done {
            return Some(Vec::new());
        }
        let connected = Self::connected(c);
        // Jobs whose failover is on, hosted by two connected processes or more; of those, the
        // ones that fire every 15 s or more often, and of those the ones of two items or more,
        // if there are any (a later owner's crash in the middle of a run, and the fires after
        // it, are then soon, and the items' later owners are not always those that took their
        // runs over).
        let mut candidates: Vec<(String, u8)> = Vec::new();
        for j in self.jobs {
            let Some(config) = c.config_of(&j.job_name).filter(|cfg| cfg.failover) else {
                continue;
            };
            let hosts = connected
                .iter()
                .filter(|n| c.nodes[**n].jobs.contains(&j.job_name))
                .count();
            if hosts < 2 {
                continue;
            }
            let often = config.cron.as_ref().is_some_and(|cron| {
                let now = c.time().wall;
                let next = cron.next_after(now, &config.time_zone);
                let after = next.and_then(|t| cron.next_after(t, &config.time_zone));
                next.zip(after)
                    .is_some_and(|(a, b)| (b - a).num_milliseconds() <= 15_000)
            });
            let many = config.sharding_total_count >= 2;
            candidates.push((j.job_name.clone(), u8::from(often) * (1 + u8::from(many))));
        }
        let best = candidates.iter().map(|(_, rank)| *rank).max().unwrap_or(0);
        candidates.retain(|(_, rank)| *rank == best);
        let (job, _) = self.trigger_rng.pick(&candidates).cloned()?;
        c.note(("trigger-failover", &job), || {
            format!(
                "an operator triggers {job}; a process will crash in the middle of its run, \
                 and the replies to the failover claims will be lost"
            )
        });
        let ids: Vec<String> = connected
            .iter()
            .filter(|n| c.nodes[**n].jobs.contains(&job))
            .map(|n| c.nodes[*n].id.to_string())
            .collect();
        for id in ids {
            crate::operator::write(c, &format!("/{job}/trigger/{id}"), b"", &mut self.refusals);
        }
        self.trigger_busy = true;
        Some(vec![(
            c.now + 10,
            TriggerStep::CrashRunner { job, tries: 500 },
        )])
    }

    /// Carries out a later step of a failed-over trigger; returns the steps it leads to.
    fn trigger_step(&mut self, c: &mut Cluster, step: TriggerStep) -> Vec<(u64, TriggerStep)> {
        use shardjob_core::machine::record::RunKind;
        let connected = Self::connected(c);
        // The connected processes running items of `job`, with those items, of the runs
        // `wanted` (from what each process runs now, not from every run of the world).
        let running =
            |c: &Cluster, job: &str, wanted: &dyn Fn(&crate::cluster::RunRecord) -> bool| {
                let mut by_node: Vec<(usize, BTreeSet<u32>)> = Vec::new();
                for &n in &connected {
                    let items: BTreeSet<u32> = c.nodes[n]
                        .running
                        .values()
                        .flat_map(|r| r.runs.iter())
                        .filter_map(|i| c.runs.get(*i))
                        .filter(|r| r.end.is_none() && r.job == job && wanted(r))
                        .map(|r| r.item)
                        .collect();
                    if !items.is_empty() {
                        by_node.push((n, items));
                    }
                }
                by_node
            };
        match step {
            TriggerStep::CrashRunner { job, tries } => {
                let runners = running(c, &job, &|r| r.kind == RunKind::Trigger);
                let Some((n, items)) = self.trigger_rng.pick(&runners).cloned() else {
                    return if tries > 0 {
                        vec![(
                            c.now + 10,
                            TriggerStep::CrashRunner {
                                job,
                                tries: tries - 1,
                            },
                        )]
                    } else {
                        Vec::new()
                    };
                };
                if !Self::others_up(c, n) {
                    return Vec::new();
                }
                c.note(("crash-runner", n, &job), || {
                    let list: Vec<String> = items.iter().map(u32::to_string).collect();
                    format!(
                        "node {n} crashes in the middle of the trigger's run of {job}/{}",
                        list.join(", ")
                    )
                });
                c.crash(n);
                let ip = c.nodes[n].id.server_ip().to_owned();
                self.restarts
                    .push((c.now + self.trigger_rng.between(1_000, 60_000), ip));
                // Every other process, connected now or not, loses the reply to its next
                // failover claim of the job.
                let flagged: BTreeSet<usize> = (0..c.nodes.len())
                    .filter(|m| *m != n && c.nodes[*m].up() && !c.nodes[*m].machine.is_stopped())
                    .collect();
                for &m in &flagged {
                    c.lose_failover_reply(m, Some(&job));
                }
                let timeout = c.session_timeout.as_millis() as u64;
                let later =
                    c.now + timeout + c.request_timeout + self.trigger_rng.between(1_000, 8_000);
                vec![(
                    later,
                    TriggerStep::CrashAgain {
                        job,
                        items,
                        since: c.runs.len(),
                        tries: 300,
                        flagged,
                        lossy: None,
                    },
                )]
            }
            TriggerStep::CrashAgain {
                job,
                items,
                since,
                tries,
                flagged,
                lossy,
            } => {
                // Those whose failover claim lost its reply: flagged at the first crash, and
                // the loss used up since.
                let lossy = lossy.unwrap_or_else(|| {
                    let used: BTreeSet<usize> = flagged
                        .iter()
                        .copied()
                        .filter(|m| c.nodes[*m].loses_failover_reply().is_none())
                        .collect();
                    for n in 0..c.nodes.len() {
                        c.lose_failover_reply(n, None);
                    }
                    used
                });
                // Who took each item's trigger run over since the first crash.
                let takers: BTreeSet<(u32, usize)> = c
                    .runs
                    .get(since..)
                    .unwrap_or_default()
                    .iter()
                    .filter(|r| {
                        r.job == job && r.kind == RunKind::Trigger && items.contains(&r.item)
                    })
                    .map(|r| (r.item, r.node))
                    .collect();
                // A process running an item that one whose claim lost its reply took over, and
                // that took none over itself: its crash leaves the takers' sessions as they
                // were, and with them whatever their claims left in the registry.
                let took_any: BTreeSet<usize> = takers.iter().map(|(_, n)| *n).collect();
                let runners = running(c, &job, &|r| {
                    !took_any.contains(&r.node)
                        && takers
                            .iter()
                            .any(|(i, m)| *i == r.item && lossy.contains(m))
                });
                let Some((n, running_items)) = self.trigger_rng.pick(&runners).cloned() else {
                    return if tries > 0 && !lossy.is_empty() {
                        vec![(
                            c.now + 50,
                            TriggerStep::CrashAgain {
                                job,
                                items,
                                since,
                                tries: tries - 1,
                                flagged,
                                lossy: Some(lossy),
                            },
                        )]
                    } else {
                        Vec::new()
                    };
                };
                if !Self::others_up(c, n) {
                    return Vec::new();
                }
                self.trigger_done = true;
                c.note(("crash-again", n, &job), || {
                    let list: Vec<String> = running_items.iter().map(u32::to_string).collect();
                    format!(
                        "node {n}, running {job}/{} (failed over before), crashes too",
                        list.join(", ")
                    )
                });
                c.crash(n);
                let ip = c.nodes[n].id.server_ip().to_owned();
                self.restarts
                    .push((c.now + self.trigger_rng.between(1_000, 60_000), ip));
                Vec::new()
            }
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
                    && !node.shutdown_requested
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
                    // A process that crashed meanwhile comes back with its server's jobs; one
                    // being stopped takes nothing back.
                    if !c.nodes[n].up()
                        || c.nodes[n].crashed()
                        || c.nodes[n].machine.is_stopped()
                        || c.nodes[n].shutdown_requested
                    {
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
                            subject: Default::default(),
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
