//! A seeded world: jobs, instances and a nemesis drawn from one seed, run on virtual time,
//! then healed and checked.
//!
//! Each seed draws its own mix of faults (swarm testing): which kinds are on, how often, how
//! long. The world runs in three phases: chaos (faults and operator actions), heal (every
//! fault undone, every server and item enabled) and settle, after which the checkers look at
//! everything that happened.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use shardjob_core::machine::MachineOptions;
use shardjob_core::{InstanceId, JobConfig, ShardingStrategy};

use crate::checkers::{self, Violation};
use crate::cluster::{Cluster, RunRecord};
use crate::nemesis::Nemesis;
use crate::network::Races;
use crate::swarm::{Header, Swarm, default_options, mix};
pub use crate::swarm::{
    MAX_DRAWN_JOBS, MAX_DURATION_MS, MAX_INSTANCES, MAX_ITEMS, Rolling, SESSION_TIMEOUTS, Shape,
};

/// The kinds of fault the nemesis can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// A process crashes and is started again later with a new pid.
    Crash,
    /// A process is cut off from the registry, both ways.
    Partition,
    /// A process's requests reach the registry, but nothing comes back.
    Deaf,
    /// A process freezes (a long garbage-collection pause).
    Pause,
    /// The registry restarts, showing dead sessions' nodes for one more timeout.
    RegistryRestart,
    /// Registry requests and watch events are slow.
    Latency,
    /// Clocks are skewed and jump.
    Clock,
    /// Some jobs run longer than their interval.
    Overrun,
    /// Operators disable and enable servers and items, trigger jobs and change configuration.
    Operator,
    /// A live process stops hosting one of its jobs (`SchedulerHandle::remove_job`) and takes it
    /// back later, as a redeploy that reloads the job does.
    Deploy,
    /// Every process crashes at once and comes back later (a whole-cluster outage, or a
    /// deploy that stops everything): fires missed meanwhile are given up at the start, or
    /// caught up within a job's catch-up bound.
    Outage,
}

impl Fault {
    /// Every fault kind.
    pub const ALL: [Fault; 11] = [
        Fault::Crash,
        Fault::Partition,
        Fault::Deaf,
        Fault::Pause,
        Fault::RegistryRestart,
        Fault::Latency,
        Fault::Clock,
        Fault::Overrun,
        Fault::Operator,
        Fault::Deploy,
        Fault::Outage,
    ];

    /// Whether the fault is drawn apart from the others (deploys and outages came later: a
    /// stream of their own keeps the other draws of a seed as they were), and so is not one of
    /// the nemesis's acts.
    pub fn apart(self) -> bool {
        matches!(self, Fault::Deploy | Fault::Outage)
    }

    /// The fault in words, for a timeline's header: `registry restart`.
    pub fn words(self) -> String {
        let mut name = String::new();
        for ch in format!("{self:?}").chars() {
            if ch.is_uppercase() && !name.is_empty() {
                name.push(' ');
            }
            name.extend(ch.to_lowercase());
        }
        name
    }
}

/// The shape of a world.
#[derive(Debug, Clone)]
pub struct WorldConfig {
    /// The seed: the same seed gives the same world and the same run.
    pub seed: u64,
    /// shardjob instances at the start. 0 with `elasticjob` > 0: a world of ElasticJob
    /// instances only (0 without them: one).
    pub instances: usize,
    /// Jobs drawn from the seed (ignored when `jobs` is given).
    pub job_count: usize,
    /// The users' own jobs; drawn from the seed when empty.
    pub jobs: Vec<JobConfig>,
    /// Simulated time, ms (chaos is the first 70 %, then heal and settle).
    pub duration_ms: u64,
    /// Fault kinds allowed; each seed turns on a random subset of them.
    pub faults: BTreeSet<Fault>,
    /// Keep a readable timeline (slower).
    pub keep_log: bool,
    /// Options of every instance (planted bugs are set here).
    pub options: Option<MachineOptions>,
    /// Most items of a drawn job (and of an operator's new total); 8 by default.
    pub max_items: u32,
    /// Let seeds draw a registry limit on the operations of a transaction (etcd's
    /// `--max-txn-ops`), and whether the instances know it beforehand.
    pub txn_limits: bool,
    /// How long the runs of the named jobs take, ms: each run draws its length from
    /// `lo..=hi` (`1 <= lo <= hi <= 86_400_000`). The runs of other jobs take a twentieth to a
    /// half of their interval (of at most 20 s), and with the `Overrun` fault one job in five
    /// runs for one to three intervals.
    pub run_ms: BTreeMap<String, (u64, u64)>,
    /// The jobs whose runs go on when cancelled, like a job whose code never looks at its
    /// cancellation signal; `None`: one job in ten, drawn by the seed. Their runs may overlap
    /// (counted apart, and the later run must hold the higher fencing token), and the
    /// liveness checker leaves them out.
    pub ignore_cancel: Option<BTreeSet<String>>,
    /// Custom sharding strategies, which every instance registers (as with the runtime's
    /// `SchedulerBuilder::strategy`), so that jobs may name them in
    /// `jobShardingStrategyType`. They are held to the built-in strategies' contract: the
    /// `strategy` checker reports an assignment a leader refused, and the convergence checker
    /// items left without exactly one live owner.
    pub strategies: Vec<Arc<dyn ShardingStrategy>>,
    /// The registry session timeout of every instance, 100 ms to 10 minutes; `None`: 2 to 6 s,
    /// drawn by the seed (100 ms to 60 s in a world of drawn jobs that draws
    /// [`Shape::Sessions`]). Faults that cut an instance off last up to two timeouts, and the
    /// checks after the heal wait two timeouts and 20 s for the cluster to settle: a long
    /// timeout needs a long world (`duration_ms`).
    pub session_timeout: Option<Duration>,
    /// Which instances host the named jobs, by index `0..instances` (instance `k` is server
    /// `10.0.0.{k+1}`, and a restarted process keeps its server's jobs); a job not named is
    /// hosted by every instance, as every job is by the extra instances the heal starts when
    /// fewer than two are alive. Empty, in a world of drawn jobs: one seed in four hosts some
    /// jobs on some instances only (given two jobs and two instances or more), as in a rolling
    /// deploy that adds a job; naming any job, even on every instance, keeps the seed from
    /// drawing.
    pub hosts: BTreeMap<String, BTreeSet<usize>>,
    /// The richer shapes allowed ([`Shape`]); each seed draws its own, each from a stream of
    /// its own, so that a seed that draws none keeps the world it had before they existed.
    /// Empty: every seed's world as before them.
    pub shapes: BTreeSet<Shape>,
    /// How the world races ([`Races`]); `None`: drawn by the seed from a stream of its own
    /// (half of the seeds race). [`Races::NONE`] replays a seed found before the races as it
    /// was.
    pub races: Option<Races>,
    /// ElasticJob 3.0.4 instances added to the world ([`crate::elasticjob`]), on servers
    /// `10.0.2.{k+1}`, each hosting every job as a `SCRIPT` job beside the shardjob
    /// instances (which host them as `SCRIPT` jobs too), under the same faults (crashes and
    /// restarts, cut-offs, pauses, clock steps, registry restarts, the outage). 0, the
    /// default: none, and the world is what it was before they existed. shardjob's side of a
    /// mixed job (`docs/migration-design.md`, section 3) is not built: such a world measures
    /// what goes wrong, it is not expected to pass.
    pub elasticjob: usize,
    /// A rolling replacement of one kind of instance by the other during the chaos
    /// ([`Shape::RollToShardjob`], [`Shape::RollToElasticjob`], `sim/src/rolling.rs`), in every
    /// seed. `None`, the default: drawn by half of the seeds of a world with both kinds of
    /// instances whose `shapes` allow it (none in other worlds). `ToShardjob` needs ElasticJob
    /// instances (`elasticjob` > 0); `ToElasticjob` shardjob ones (in a world without
    /// ElasticJob instances it brings them: the jobs are then `SCRIPT` jobs).
    pub rolling: Option<Rolling>,
}

impl WorldConfig {
    /// The standard world: 5 instances, 20 jobs, one simulated hour, every fault allowed.
    pub fn standard(seed: u64) -> Self {
        Self {
            seed,
            instances: 5,
            job_count: 20,
            jobs: Vec::new(),
            duration_ms: 3_600_000,
            faults: Fault::ALL.into_iter().collect(),
            keep_log: false,
            options: None,
            max_items: 8,
            txn_limits: true,
            run_ms: BTreeMap::new(),
            ignore_cancel: None,
            strategies: Vec::new(),
            session_timeout: None,
            hosts: BTreeMap::new(),
            shapes: Shape::ALL.into_iter().collect(),
            races: None,
            elasticjob: 0,
            rolling: None,
        }
    }
}

/// The outcome of one seed.
#[derive(Debug)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Broken invariants (those of ElasticJob's own semantics left out: see
    /// `elasticjob_own`).
    pub violations: Vec<Violation>,
    /// In a world with ElasticJob processes, the violations their own semantics made, with the
    /// behaviour each stands for ([`checkers::attribution`]): counted, but no failure.
    pub elasticjob_own: Vec<(Violation, checkers::attribution::Behaviour)>,
    /// The hash of the whole trace.
    pub trace_hash: u64,
    /// Simulated ms.
    pub sim_ms: u64,
    /// Fires run again after a cut-short attempt.
    pub retries: usize,
    /// Overlaps of jobs that ignore cancellation (allowed, with growing tokens).
    pub ignored_cancel: usize,
    /// Overlaps of a paused process after it woke (allowed, with growing tokens).
    pub fenced_after_pause: usize,
    /// Item runs started.
    pub runs: usize,
    /// The most timeouts a node took within a simulated second with no other input between
    /// them (see [`checkers::wake_rate`]).
    pub quiet_wake_peak: usize,
    /// Every item run, in the order they started (empty if the world did not run): what a
    /// user checks their own rules on, beyond the checkers'.
    pub records: Vec<RunRecord>,
    /// The instance id of each node, by [`RunRecord::node`]. A restarted process is a new
    /// node, with a new id.
    pub instances: Vec<InstanceId>,
    /// The instance id of each ElasticJob node, by [`RunRecord::node`] of a run whose
    /// [`RunRecord::java`] is set.
    pub java_instances: Vec<InstanceId>,
    /// The wall time at virtual time 0: [`RunRecord::start`] and [`RunRecord::end`] are ms
    /// after it, [`RunRecord::fire`] is epoch ms.
    pub wall_origin: DateTime<Utc>,
    /// The faults this seed turned on.
    pub faults: BTreeSet<Fault>,
    /// The richer shapes this seed drew.
    pub shapes: BTreeSet<Shape>,
    /// How the world raced.
    pub races: Races,
    /// The registry's limit on the operations of a transaction this seed drew, if any.
    pub txn_limit: Option<usize>,
    /// The session timeout of the instances (zero if the world did not run).
    pub session_timeout: Duration,
    /// The jobs hosted by some instances only, and which (see [`WorldConfig::hosts`]).
    pub hosts: BTreeMap<String, BTreeSet<usize>>,
    /// The rolling replacement the seed made, if any.
    pub roll: Option<RollReport>,
    /// The readable timeline, if kept.
    pub log: Vec<String>,
}

/// What a seed's rolling replacement did ([`WorldConfig::rolling`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollReport {
    /// Which way it went.
    pub direction: Rolling,
    /// How many processes of the old kind were stopped or killed (those that crashed before
    /// their turn and were not started again are not counted).
    pub stopped: usize,
    /// How many processes of the new kind it started.
    pub started: usize,
    /// When the last process of the old kind had gone (exited or killed), virtual ms: from
    /// then on the world's jobs are run by the new kind only (in a roll to shardjob, the "last
    /// ElasticJob instance leaves" of `docs/migration-design.md` 3.8). `None` if some was
    /// still there at the heal.
    pub last_left: Option<u64>,
}

/// Runs one seed of a world: the swarm draws it ([`crate::swarm`]), the nemesis acts on it
/// until the heal ([`crate::nemesis`], [`crate::operator`]), the heal undoes every fault
/// ([`crate::heal`]), the cluster settles, and the checkers judge what happened
/// ([`checkers`]).
pub fn run(cfg: &WorldConfig) -> SeedReport {
    let (swarm, streams) = match Swarm::draw(cfg) {
        Ok(drawn) => drawn,
        Err(invalid) => {
            return SeedReport {
                seed: cfg.seed,
                violations: invalid,
                elasticjob_own: Vec::new(),
                trace_hash: 0,
                sim_ms: 0,
                retries: 0,
                ignored_cancel: 0,
                fenced_after_pause: 0,
                runs: 0,
                quiet_wake_peak: 0,
                records: Vec::new(),
                instances: Vec::new(),
                java_instances: Vec::new(),
                wall_origin: crate::cluster::wall_origin(),
                faults: BTreeSet::new(),
                shapes: BTreeSet::new(),
                races: Races::NONE,
                txn_limit: None,
                session_timeout: Duration::ZERO,
                hosts: BTreeMap::new(),
                roll: None,
                log: Vec::new(),
            };
        }
    };
    let seed = cfg.seed;
    let durations = swarm.durations.clone();

    let mut c = Cluster::new();
    c.keep_log = cfg.keep_log;
    c.options = swarm.options.clone();
    c.strategies = cfg.strategies.clone();
    c.set_max_txn_ops(swarm.txn_limit);
    c.ignore_cancel = swarm.ignore_cancel.clone();
    c.session_timeout = swarm.session_timeout;
    if let Some((latency, watch_delay)) = swarm.latency {
        c.latency = latency;
        c.watch_delay = watch_delay;
    }
    c.duration = Box::new(move |job, item, now| {
        let (lo, hi) = durations.get(job).copied().unwrap_or((50, 200));
        lo + mix(seed ^ u64::from(item), now) % (hi - lo + 1)
    });
    if c.keep_log {
        // What the world is, ahead of its timeline (the log only: the trace hashes none of it).
        let sweep = c
            .options
            .clone()
            .or_else(default_options)
            .is_none_or(|o| o.safety_sweep);
        let prepare = c.options.as_ref().is_some_and(|o| o.prepare_ahead);
        let header = Header {
            cfg,
            swarm: &swarm,
            sweep,
            prepare,
            latency: (c.latency, c.watch_delay),
            origin: c.wall_origin,
        };
        c.log.extend(header.lines());
    }
    // Races (latency drawn per request and per watch delivery, lost replies, a drawn order of
    // the nodes), from a stream of their own: half of the seeds draw none and stay the
    // fixed-latency worlds they were.
    let race_seed = mix(cfg.seed, 0x7261_6365_7300);
    let races = cfg.races.unwrap_or_else(|| {
        let mut drawn = Races::draw(race_seed);
        // A drawn leg stays well inside the session timeout (a spike is three legs' worth,
        // and a session is confirmed by a round trip): with round trips as long as the
        // session, no session survives at all, which is no race but a registry nobody runs.
        drawn.spread = drawn.spread.min(c.session_timeout.as_millis() as u64 / 20);
        drawn
    });
    c.set_races(races, race_seed);
    for (job, some) in &swarm.hosts {
        c.note(("hosts", job, some), || {
            let list: Vec<String> = some.iter().map(|k| k.to_string()).collect();
            format!("job {job} is hosted by instances {} only", list.join(", "))
        });
    }

    let heal_at = swarm.heal_at;
    let settle = swarm.settle_ms();
    // Jobs both kinds can host (a rollback brings ElasticJob instances into a world without).
    let rollback = swarm
        .roll
        .is_some_and(|plan| plan.direction == Rolling::ToElasticjob);
    if cfg.elasticjob > 0 || rollback {
        c.job_type = "SCRIPT".to_owned();
    }
    let mut nemesis = Nemesis::new(&c, &swarm, streams, cfg.max_items, cfg.duration_ms);
    // A world of ElasticJob instances only (`instances: 0`, `elasticjob` > 0) starts no
    // shardjob process (without ElasticJob instances, `instances: 0` still means one).
    let shardjob_slots = if cfg.instances == 0 && cfg.elasticjob > 0 {
        0
    } else {
        swarm.skews.len()
    };
    nemesis.start(&mut c, &swarm.skews[..shardjob_slots]);
    if cfg.elasticjob > 0 || rollback {
        nemesis.start_java(&mut c, cfg.elasticjob);
    }
    nemesis.chaos(&mut c, heal_at, swarm.mean_gap);
    let check_from = nemesis.heal(&mut c, heal_at, settle);
    c.run_until(cfg.duration_ms.max(check_from + 10_000));
    let end = c.now;
    let roll = nemesis.roll_report();
    let refusals = std::mem::take(&mut nemesis.refusals);
    let mut disruptions = std::mem::take(&mut nemesis.disruptions);
    drop(nemesis);
    // With a job of many items, what writing an item in a transaction of its own takes.
    let per_item = swarm.parts_ms(1);
    let Swarm {
        faults,
        shapes,
        jobs,
        durations: base,
        ignore_cancel,
        txn_limit,
        hosts,
        ..
    } = swarm;

    // Check.
    let mut violations = Vec::new();
    let overlaps = checkers::overlap::check(&c.runs, &ignore_cancel);
    violations.extend(overlaps.violations);
    let once = checkers::once::check(&c.runs);
    violations.extend(once.violations);
    let mut at_end = BTreeMap::new();
    let mut totals = Vec::new();
    let max_skew = c
        .nodes
        .iter()
        .map(|n| n.skew.unsigned_abs())
        .max()
        .unwrap_or(0);
    let (unreadable, configs) = checkers::readable::check(&c, &jobs, end);
    violations.extend(unreadable);
    for (name, config) in configs {
        totals.push((name.clone(), config.sharding_total_count));
        if ignore_cancel.contains(&name) {
            continue;
        }
        let (_, hi) = base.get(&name).copied().unwrap_or((0, 0));
        let bound = 2 * hi
            + 2 * max_skew
            + c.session_timeout.as_millis() as u64
            + 5_000
            + per_item * u64::from(config.sharding_total_count);
        at_end.insert(
            name,
            checkers::liveness::JobAtEnd {
                config,
                bound_ms: bound,
            },
        );
    }
    violations.extend(checkers::liveness::check(
        &c.runs,
        &at_end,
        c.wall_origin,
        check_from,
        end,
    ));
    // Start-up after downtime: no fire from beyond a job's catch-up bound before a start of
    // its cluster runs; after the heal, those within it do (jobs whose item count an operator
    // may have changed are left out of that part: a new item runs no fire from before it).
    let catchup: BTreeMap<String, i64> = jobs
        .iter()
        .filter_map(|j| {
            let config = c.config_of(&j.job_name)?;
            Some((j.job_name.clone(), config.misfire_catchup_ms()))
        })
        .collect();
    violations.extend(checkers::liveness::downtime(
        &c.runs, &c.starts, &catchup, 50,
    ));
    if !faults.contains(&Fault::Operator) {
        violations.extend(checkers::liveness::catch_ups(
            &c.runs, &c.starts, &at_end, heal_at, end, 50,
        ));
    }
    // With a job of many items, its items written one per transaction (its claims too).
    let largest = totals.iter().map(|(_, t)| u64::from(*t)).max().unwrap_or(0);
    let trips = c.latency_bound() * 4 + c.watch_delay_bound() * 2;
    let slack = 2_000 + 2 * max_skew + trips + per_item * largest;
    violations.extend(checkers::liveness::misfires(
        &c.runs,
        &at_end,
        c.wall_origin,
        check_from,
        end,
        slack,
    ));
    // No fire lost, during the chaos too (judged by the runs and the world's own record),
    // and none run later than a bound after the fire or the nemesis's last act before its
    // run: two runs of the job (the one it waited for, its own), two session timeouts (a
    // cut-off owner's session expires), the failover takeover delay, the wait of a re-shard
    // for running items, a deploy's shutdown grace (with deploys), skews, round trips, and
    // with a job of many items its items written one per transaction.
    disruptions.extend([heal_at, heal_at + settle / 2, check_from]);
    disruptions.sort_unstable();
    let opts = c.options.clone().or_else(default_options);
    let waits = opts.as_ref().map_or(62_000, |o| {
        (o.failover_takeover_delay + o.reshard_wait).as_millis() as u64
            + if faults.contains(&Fault::Deploy) {
                o.shutdown_grace.as_millis() as u64
            } else {
                0
            }
    });
    let skews = 2 * c.skew_seen.max(max_skew);
    let calm: BTreeMap<String, u64> = base
        .iter()
        .map(|(job, (_, hi))| {
            let timeouts = 2 * c.session_timeout.as_millis() as u64;
            (
                job.clone(),
                2 * hi + timeouts + waits + skews + trips + per_item * largest + 5_000,
            )
        })
        .collect();
    violations.extend(checkers::lost::check(
        &c.runs,
        &at_end,
        &checkers::lost::Facts {
            starts: &c.starts,
            operator: &c.operator_log,
            origin: c.wall_origin,
            slack_ms: 2_000 + skews + trips + per_item * largest,
            end,
            disruptions: &disruptions,
            calm_ms: &calm,
        },
    ));
    violations.extend(checkers::fresh::check(
        &c.runs,
        &c.item_creations,
        c.wall_origin,
        2_000 + skews,
    ));
    violations.extend(checkers::invariant::check(&c));
    violations.extend(checkers::markers::check(&c));
    violations.extend(checkers::convergence::check(&c, &totals, end));
    violations.extend(checkers::mixed::check(&c, &totals, end));
    // After a migration's last ElasticJob instance left: none of ElasticJob's nodes is left.
    if roll
        .as_ref()
        .is_some_and(|r| r.direction == Rolling::ToShardjob && r.last_left.is_some())
    {
        violations.extend(checkers::leftover::check(&c, &totals, end));
    }
    violations.extend(checkers::disabled::check(&c));
    violations.extend(checkers::early::check(&c));
    violations.extend(checkers::shutdown::check(&c));
    violations.extend(checkers::wake::check(&c));
    violations.extend(checkers::wake_rate::check(&c));
    // Whatever the registry's limit, every transaction is split until it fits; a user's
    // sharding strategy that breaks its contract is reported once per job.
    violations.extend(checkers::refused::check(&c));
    violations.extend(refusals);
    violations.extend(checkers::prepare::check(&c));
    violations.sort_by_key(|v| v.time);
    // In a world with ElasticJob processes, what ElasticJob's own semantics made is counted
    // apart (none of it in a world without them: every violation fails, as before).
    let plans = if c.java.is_empty() {
        BTreeMap::new()
    } else {
        checkers::attribution::plans(&c, &totals)
    };
    // After a rollback, no shardjob process was there from the moment the last one had gone.
    let shardjob_gone = roll
        .as_ref()
        .filter(|r| r.direction == Rolling::ToElasticjob)
        .and_then(|r| r.last_left)
        .map(|t| c.wall_origin.timestamp_millis() + t as i64);
    let split = checkers::attribution::split(
        violations,
        &c.runs,
        !c.java.is_empty(),
        &plans,
        shardjob_gone,
        &checkers::attribution::JavaTrace {
            sharding: std::mem::take(&mut c.java_sharding),
            stale_starts: std::mem::take(&mut c.java_stale_starts),
            flagged_after_run: std::mem::take(&mut c.java_flagged_after_run),
            live_failovers: std::mem::take(&mut c.java_live_failovers),
            claims: std::mem::take(&mut c.claim_commits),
            shardjob_sharding: std::mem::take(&mut c.shardjob_sharding),
            origin_ms: c.wall_origin.timestamp_millis(),
        },
    );

    SeedReport {
        seed: cfg.seed,
        violations: split.failing,
        elasticjob_own: split.elasticjob,
        trace_hash: c.trace_hash(),
        sim_ms: end,
        retries: once.retries,
        ignored_cancel: overlaps.ignored_cancel,
        fenced_after_pause: overlaps.fenced_after_pause,
        runs: c.runs.len(),
        quiet_wake_peak: c.quiet_wake_peak,
        records: std::mem::take(&mut c.runs),
        instances: c.nodes.iter().map(|n| n.id.clone()).collect(),
        java_instances: c.java.iter().map(|n| n.id.clone()).collect(),
        wall_origin: c.wall_origin,
        faults,
        shapes,
        races,
        txn_limit,
        session_timeout: c.session_timeout,
        hosts,
        roll,
        log: std::mem::take(&mut c.log),
    }
}
