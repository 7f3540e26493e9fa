//! A deterministic cluster: several real core machines over one in-memory store, on virtual
//! time. The engine of the simulator, and what the core's behaviour tests drive by hand.
//!
//! Everything runs on one thread in one order: registry requests are applied to the store when
//! a machine emits them and answered after [`Cluster::latency`]; watch events are delivered as
//! the store releases them; nodes act in index order at each instant; executions last what
//! [`Cluster::duration`] says and end early when cancelled (after [`Cluster::cancel_delay`]),
//! unless their job ignores cancellation. A world that races ([`Cluster::set_races`], see
//! [`crate::network`]) draws instead, from a seeded stream, each request's trip to the
//! registry (it applies on arrival) and its reply's way back, each watch delivery's delay,
//! lost replies and the order of the nodes at each instant; one node's messages keep their
//! order. Faults: [`Cluster::crash`], [`Cluster::partition`] (both ways), [`Cluster::deafen`]
//! (the node's requests arrive but it hears nothing back), [`Cluster::pause`] (a
//! stop-the-world pause of the whole process), [`Cluster::restart_registry`], lost replies
//! ([`Cluster::lose_replies`], [`Cluster::set_reply_loss`]), clock skew per node
//! ([`Node::skew`]). A node's state is a [`Process`] times a [`Link`].
//!
//! Adding a node or writing as an operator checks its input and returns a [`ClusterError`].
//! The methods that take a node's index `n` panic on an index that [`Cluster::add_node`] did
//! not return, as slice indexing does.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use siphasher::sip::SipHasher13;

use crate::elasticjob::JavaNode;
use crate::network::{InFlight, Network, Races};
use crate::node::Running;
pub use crate::node::{Link, LoseReplyTo, Node, Process};
use crate::timeline;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use shardjob_backend_mem::Store;
use shardjob_core::config::{KnownTypes, Strictness};
use shardjob_core::layout::{ItemLeaf, JobNode};
use shardjob_core::machine::record::{ItemRecord, RunKind};
use shardjob_core::machine::{
    Command, Execution, ExecutionId, ItemOutcome, JobSpec, LateWake, Machine, MachineError,
    MachineOptions, Mono, Now,
};
use shardjob_core::registry::{
    self, NodePath, RegistryError, RegistryEvent, RegistryOp, RegistryReply, RequestId,
    SessionEvent, SessionId, TxnOp,
};
use shardjob_core::{InstanceId, JobConfig, ShardingStrategy};

/// How many timeouts in a row a node's timer may stay due before the machine is taken to
/// spin ([`Cluster`]'s timeouts): at a step of a millisecond, a simulated second.
const BUSY_TIMER_STEPS: u32 = 1_000;

/// The most timeouts a machine may take within one simulated second with no other input
/// between them before it is taken to wake for nothing (see [`crate::checkers::wake_rate`],
/// which says why this many).
pub const QUIET_WAKES_PER_S: usize = 100;

/// Why the cluster refused a node or an operator's write. Nothing is changed when it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The node's instance id is not valid.
    #[error("instance id {id:?} is not valid: {why}")]
    InstanceId {
        /// The id given.
        id: String,
        /// What is wrong with it.
        why: String,
    },
    /// The node's machine refused one of its jobs.
    #[error("node {node:?} cannot host job {job:?}: {error}")]
    Job {
        /// The node's instance id.
        node: String,
        /// The job's name.
        job: String,
        /// The machine's reason.
        error: MachineError,
    },
    /// The node's machine refused one of [`Cluster::strategies`].
    #[error("node {node:?} cannot register a sharding strategy: {error}")]
    Strategy {
        /// The node's instance id.
        node: String,
        /// The machine's reason.
        error: MachineError,
    },
    /// An operator's write named a path the registry cannot hold.
    #[error("{path:?} is not a registry path: {why}")]
    Path {
        /// The path given.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// An ElasticJob node cannot host one of its jobs.
    #[error("elasticjob node {node:?} cannot host job {job:?}: {why}")]
    ElasticJob {
        /// The node's instance id.
        node: String,
        /// The job's name.
        job: String,
        /// Why.
        why: String,
    },
    /// An operator's edit named a job with no readable configuration in the registry.
    #[error("job {job:?} has no readable configuration in the registry")]
    NoConfig {
        /// The job's name.
        job: String,
    },
}

/// The type names the instances accept: the built-in ones and `strategies`.
pub(crate) fn known_types(strategies: &[Arc<dyn ShardingStrategy>]) -> KnownTypes {
    KnownTypes {
        strategies: strategies.iter().map(|s| s.name().to_owned()).collect(),
    }
}

/// The spec of a simulated job: the machine sees it as a job of type `job_type` (`SIMPLE`
/// unless [`Cluster::job_type`] says otherwise).
fn simple_job(config: &JobConfig, job_type: &str) -> JobSpec {
    JobSpec {
        config: config.clone(),
        job_type: job_type.to_owned(),
    }
}

/// An operator's path, or why the registry cannot hold it.
fn operator_path(path: &str) -> Result<NodePath, ClusterError> {
    NodePath::new(path).map_err(|e| ClusterError::Path {
        path: path.to_owned(),
        why: e.to_string(),
    })
}

/// One item run, as the cluster saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// Which node ran it: an index into [`Cluster::nodes`], or into [`Cluster::java`] for a
    /// run of an ElasticJob node.
    pub node: usize,
    /// Whether an ElasticJob node ran it (see [`crate::elasticjob`]).
    pub java: bool,
    /// The job.
    pub job: String,
    /// The item.
    pub item: u32,
    /// The scheduled fire (epoch ms).
    pub fire: i64,
    /// Why it ran.
    pub kind: RunKind,
    /// The job parameter it was given: a manual trigger's own, or the job's `jobParameter`.
    pub job_parameter: String,
    /// Its fencing token.
    pub token: u64,
    /// Virtual ms it started, in true time. A node fires by its own clock, so with a skewed
    /// clock ([`Node::skew`]) a run may start before its fire in true time.
    pub start: u64,
    /// When it started by its node's clock (epoch ms): [`RunRecord::start`] with the node's
    /// skew.
    pub wall_start: i64,
    /// Virtual ms it ended, once it has.
    pub end: Option<u64>,
    /// When cancellation was signalled to it, if it was.
    pub cancel_signal: Option<u64>,
    /// Whether it was cut short (cancelled, or its process crashed).
    pub cancelled: bool,
    /// Whether its process crashed under it.
    pub crashed: bool,
    /// When its process resumed from a pause during the run, if it did.
    pub resumed: Option<u64>,
    /// When the registry committed the transaction that records its end (its `running`
    /// marker removed, the item's record left without a run in progress), as the store saw
    /// it: also when the machine never heard the reply (a deaf node's completion applies and
    /// its reply is lost). A cut-short run whose end is committed finished its fire for the
    /// registry: the fire is never due again.
    pub end_committed: Option<u64>,
    /// The node's registry session when the run started (`None`: it had none).
    pub session: Option<SessionId>,
    /// When that session ended (expired, or closed), as the store saw it, if it has. The
    /// checkers hold a run to what the executor and the registry saw, never to what its
    /// machine reported: a run whose session ended before its end was committed may be run
    /// again elsewhere; one whose end was committed, or whose session lives, may not.
    pub session_end: Option<u64>,
}

impl RunRecord {
    /// Who ran it, in words: `node 3`, or `elasticjob 1` for a run of an ElasticJob node.
    pub fn runner(&self) -> String {
        if self.java {
            format!("elasticjob {}", self.node)
        } else {
            format!("node {}", self.node)
        }
    }

    /// How late it started by its own node's clock, ms: negative for a run started ahead of
    /// its fire.
    pub fn late_by_own_clock(&self) -> i64 {
        self.wall_start.saturating_sub(self.fire)
    }
}

/// A `running` marker a shardjob instance's transaction deleted ([`Cluster::marker_deletions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerDeletion {
    /// When the registry committed the deletion, virtual ms.
    pub at: u64,
    /// The node that deleted it.
    pub node: usize,
    /// The job.
    pub job: String,
    /// The item.
    pub item: u32,
    /// The revision the marker was created at: the fencing token of the run it stood for.
    pub created: u64,
}

/// A registration that found the `instances` node of its job in the store without any instance
/// node below it: the job's cluster (re)started. Seen by the cluster in the store, not told by
/// the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStart {
    /// Virtual ms of the registration.
    pub at: u64,
    /// The job.
    pub job: String,
    /// The node that registered (an index into [`Cluster::java`] if `java`).
    pub node: usize,
    /// Whether an ElasticJob node registered.
    pub java: bool,
    /// That node's wall clock when it sent the registration (epoch ms): what it stamps as
    /// the start. With travelling requests ([`Races::spread`]) the registration applies later.
    pub wall: i64,
}

impl ClusterStart {
    /// Who registered, in words: `node 3`, or `elasticjob 1`.
    pub fn starter(&self) -> String {
        if self.java {
            format!("elasticjob {}", self.node)
        } else {
            format!("node {}", self.node)
        }
    }
}

/// How long a run of (job, item) that starts at a virtual time lasts, ms.
pub type RunDuration = Box<dyn Fn(&str, u32, u64) -> u64>;

/// An operator's shutdown of a job on one instance: its instance node deleted while the
/// session that owned it lived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorShutdown {
    /// Virtual ms of the deletion.
    pub at: u64,
    /// The node.
    pub node: usize,
    /// The job.
    pub job: String,
    /// The session that owned the deleted node.
    pub session: SessionId,
    /// When the job was added back to the node (as restarting the process would), if it was.
    pub ended: Option<u64>,
}

/// One step of ElasticJob's re-sharding of a job ([`Cluster::java_sharding`], and the same
/// steps of shardjob instances in [`Cluster::shardjob_sharding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JavaSharding {
    /// An instance created `leader/sharding/necessary` at this virtual ms.
    Flagged(u64),
    /// A leader's sharding transaction (the flag deleted) applied at this ms.
    Sharded(u64),
}

/// Several machines over one store.
pub struct Cluster {
    /// The shared registry store.
    pub store: Store,
    /// Virtual time, ms.
    pub now: u64,
    /// The wall-clock time at virtual 0.
    pub wall_origin: DateTime<Utc>,
    /// The nodes, in the order they were added (a restarted process is a new node).
    pub nodes: Vec<Node>,
    /// The ElasticJob instances, in the order they were added, apart from the shardjob nodes
    /// (see [`crate::elasticjob`]).
    pub java: Vec<JavaNode>,
    /// Requests the ElasticJob nodes sent.
    pub requests_java: u64,
    /// The job type the shardjob nodes host their jobs as, which they write into each job's
    /// root (`SIMPLE` by default; `SCRIPT` to share jobs with ElasticJob nodes, which refuse
    /// a job whose root names another type).
    pub job_type: String,
    /// The latest fire an ElasticJob instance missed, per (job, item), not yet replayed by
    /// a misfire run: the world's record of which fire a `misfire` flag stands for.
    pub(crate) java_missed: BTreeMap<(String, u32), i64>,
    /// The fire an item queued for failover by an ElasticJob instance replays, per (job,
    /// item): the fire its runner (its `running` node) claimed or last started when it was
    /// queued; `None` for a runner that is no instance (a foreign marker: no fire).
    pub(crate) java_failover: BTreeMap<(String, u32), Option<i64>>,
    /// ElasticJob's re-sharding of each job, as the registry applied it: when an ElasticJob
    /// instance created `leader/sharding/necessary`, and when one committed a sharding (its
    /// transaction deletes the flag), in virtual ms, in order (for the attribution of runs of
    /// one fire under two plans, [`crate::checkers::attribution`]).
    pub java_sharding: BTreeMap<String, Vec<JavaSharding>>,
    /// The same steps of the shardjob instances (a shardjob leader of a job shared with
    /// ElasticJob sets and consumes the flag as an ElasticJob leader does): with
    /// [`Cluster::java_sharding`], the flag's whole history. Kept while the world has
    /// ElasticJob nodes only.
    pub shardjob_sharding: BTreeMap<String, Vec<JavaSharding>>,
    /// The runs an ElasticJob instance started from its items (scheduled, triggered, or its
    /// misfire loop's: not failover runs) on an item whose `instance` node named another
    /// instance at that moment (J reads its items from its cache: 1.5 step 2 of
    /// `docs/migration-design.md`), by (job, item, J node, start ms).
    pub java_stale_starts: BTreeSet<(String, u32, usize, u64)>,
    /// The fires an ElasticJob instance flagged as missed on an item (its Quartz missed them
    /// while its cache gave it the item) after a shardjob run of that fire had started there
    /// and not died, by (job, item, fire): its misfire loop replays such a fire over the items
    /// it has then, whoever owned them at the fire.
    pub java_flagged_after_run: BTreeSet<(String, u32, i64)>,
    /// The items queued for failover whose owner was registered when an ElasticJob instance
    /// queued them (J handled the DELETED of an earlier registration under the same id: 1.7 of
    /// `docs/migration-design.md`), until a J's failover run takes them, by (job, item).
    pub(crate) java_failover_of_live: BTreeSet<(String, u32)>,
    /// The failover runs an ElasticJob instance started for such an item, by (job, item, J
    /// node, start ms).
    pub java_live_failovers: BTreeSet<(String, u32, usize, u64)>,
    /// When the registry committed each shardjob claim, by (job, item, fencing token): the
    /// `running` marker's creation, which checks the item's state (the re-sharding flag
    /// among it while the job is shared with ElasticJob) at that moment; its run starts a
    /// reply later. Kept while the world has ElasticJob nodes only.
    pub claim_commits: BTreeMap<(String, u32, u64), u64>,
    /// Every item run seen.
    pub runs: Vec<RunRecord>,
    /// The largest clock skew any node has had, ms ([`Cluster::set_skew`],
    /// [`Cluster::step_clock`]).
    pub skew_seen: u64,
    /// Every start of a job's cluster, in order.
    pub starts: Vec<ClusterStart>,
    /// The last run of each (node, job, item) that ended, an index into `runs`.
    last_ended: BTreeMap<(usize, String, u32), usize>,
    /// Registry round-trip latency, ms, when requests do not travel ([`Races::spread`] is 0).
    pub latency: u64,
    /// Extra delay before a node sees watch events, ms.
    pub watch_delay: u64,
    /// How long a request whose answer never comes takes to time out, ms.
    pub request_timeout: u64,
    /// How long a run lasts.
    pub duration: RunDuration,
    /// How long a cancelled run takes to stop, ms.
    pub cancel_delay: u64,
    /// Jobs whose runs ignore cancellation.
    pub ignore_cancel: BTreeSet<String>,
    /// The session timeout of every node.
    pub session_timeout: Duration,
    /// Options every new node starts from (its id is set per node).
    pub options: Option<MachineOptions>,
    /// Custom sharding strategies every new node registers before its jobs (one whose name the
    /// machine refuses, see [`Machine::add_strategy`], is left out).
    pub strategies: Vec<Arc<dyn ShardingStrategy>>,
    /// Registry requests sent, per node.
    pub requests: Vec<u64>,
    /// Transactions sent, per node.
    pub transactions: Vec<u64>,
    /// A hash of everything that happened, for the determinism check. SipHash-1-3 with zero
    /// keys, pinned (not std's `DefaultHasher`, whose algorithm may change in any release), so
    /// that a trace hash kept by a test stays valid across toolchains.
    pub trace: SipHasher13,
    /// Keep a readable log of what happened (costly).
    pub keep_log: bool,
    /// The readable log, when kept.
    pub log: Vec<String>,
    /// When an operator disabled each item (by its `disabled` node's path).
    pub disabled_since: BTreeMap<String, u64>,
    /// Every write or deletion by an operator, whether the registry took it or not:
    /// (virtual ms, path). What the lost-fire checker may excuse a skipped fire by.
    pub operator_log: Vec<(u64, String)>,
    /// Every creation of an item's `execution` record the registry committed: (virtual ms,
    /// job, item). An item runs no fire from before its creation.
    pub item_creations: Vec<(u64, String, u32)>,
    /// When an ElasticJob instance last created each item's node (`sharding/N`, ElasticJob's
    /// `resetShardingInfo`), by (job, item): ElasticJob writes no `execution` record, so a
    /// shardjob claim that creates the first record of such an item is no creation of it; the
    /// item exists from the node's creation ([`Cluster::item_creations`]).
    pub java_item_nodes: BTreeMap<(String, u32), u64>,
    /// Every `running` marker a shardjob instance's transaction deleted, as the registry
    /// committed it: what the marker checker ([`crate::checkers::markers`]) holds against
    /// the runs.
    pub marker_deletions: Vec<MarkerDeletion>,
    /// What the machines' self-checks found ([`Machine::self_check`], after every input):
    /// (virtual ms, node, finding). An ElasticJob node's finding (its tasks never settled) is
    /// keyed `usize::MAX - j` and its text names the node.
    pub invariant_violations: Vec<(u64, usize, String)>,
    /// Runs (by index) that started although their item had been disabled for a while.
    pub disabled_runs: Vec<usize>,
    /// Runs of fires (not triggers) of shardjob nodes (by index) that started more than
    /// [`EARLY_BESIDE_JAVA_MS`] before their fire in true time while an ElasticJob instance
    /// had been registered in the job for two seconds (see [`crate::checkers::early`]).
    pub early_runs: Vec<usize>,
    /// Operators' shutdowns: instance nodes an operator deleted while their session lived.
    pub shutdowns: Vec<OperatorShutdown>,
    /// The (node, job, session) of every instance node that its node was shown (by a
    /// delivered watch event or tree read): an instance cannot tell the deletion of a node it
    /// was never shown from a registration that never applied.
    pub shown_own: BTreeSet<(usize, String, SessionId)>,
    /// Runs (by index) that a node started in the session in which an operator had shut the
    /// job down on it a while before.
    pub shutdown_runs: Vec<usize>,
    /// Breaches of the prepare protocol ([`Command::Prepare`], [`Command::StartPrepared`],
    /// [`Command::Discard`]), with their virtual time.
    pub protocol_errors: Vec<(u64, String)>,
    /// Runs announced with [`Command::Prepare`], and how many of them were discarded.
    pub prepared: (u64, u64),
    /// Check every node's wake times about once a simulated second
    /// ([`Machine::late_wakes`]); on by default.
    pub wake_audit: bool,
    /// Jobs whose wake came later than their decision wanted: (virtual time, node, finding).
    pub late_wakes: Vec<(u64, usize, LateWake)>,
    /// Nodes that took more than [`QUIET_WAKES_PER_S`] timeouts within a simulated second
    /// with no other input between them: (virtual time, node, timeouts in that second), the
    /// first time for each node.
    pub wake_storms: Vec<(u64, usize, usize)>,
    /// The most timeouts any node took within a simulated second with no other input between
    /// them (a statistic of the world).
    pub quiet_wake_peak: usize,
    next_audit: u64,
    operator: Option<SessionId>,
    /// The nodes whose watch [`Cluster::slow_watch`] slowed.
    slowed: BTreeSet<usize>,
    /// The wire when the world races ([`Cluster::set_races`]).
    pub(crate) network: Network,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("now", &self.now)
            .field("nodes", &self.nodes)
            .finish()
    }
}

/// How early (ms, true time) a shardjob node's scheduled run of a job shared with ElasticJob
/// may start at most: the machine's limit on its clock's lead on the registry's while the job
/// is mixed (1 s), plus the drift the clock watch lets pass unseen as a step (500 ms), plus
/// the round trips that bound a measurement.
pub const EARLY_BESIDE_JAVA_MS: i64 = 1_700;

impl Cluster {
    /// An empty cluster starting at 2026-11-22 06:00:00 UTC with 1 ms registry latency, runs
    /// of 100 ms and a 3 s session timeout.
    pub fn new() -> Self {
        let origin = wall_origin();
        let mut store = Store::new();
        // The registry stamps its writes with true time, as a ZooKeeper whose clock is right.
        store.set_wall_origin(Some(origin.timestamp_millis()));
        Self {
            store,
            now: 0,
            wall_origin: origin,
            nodes: Vec::new(),
            java: Vec::new(),
            requests_java: 0,
            job_type: "SIMPLE".to_owned(),
            java_missed: BTreeMap::new(),
            java_failover: BTreeMap::new(),
            java_sharding: BTreeMap::new(),
            shardjob_sharding: BTreeMap::new(),
            java_stale_starts: BTreeSet::new(),
            java_flagged_after_run: BTreeSet::new(),
            java_failover_of_live: BTreeSet::new(),
            java_live_failovers: BTreeSet::new(),
            claim_commits: BTreeMap::new(),
            runs: Vec::new(),
            skew_seen: 0,
            starts: Vec::new(),
            last_ended: BTreeMap::new(),
            latency: 1,
            watch_delay: 0,
            request_timeout: 2_000,
            duration: Box::new(|_, _, _| 100),
            cancel_delay: 10,
            ignore_cancel: BTreeSet::new(),
            session_timeout: Duration::from_secs(3),
            options: None,
            strategies: Vec::new(),
            requests: Vec::new(),
            transactions: Vec::new(),
            trace: SipHasher13::new(),
            keep_log: false,
            log: Vec::new(),
            disabled_since: BTreeMap::new(),
            operator_log: Vec::new(),
            item_creations: Vec::new(),
            java_item_nodes: BTreeMap::new(),
            marker_deletions: Vec::new(),
            invariant_violations: Vec::new(),
            disabled_runs: Vec::new(),
            early_runs: Vec::new(),
            shutdowns: Vec::new(),
            shown_own: BTreeSet::new(),
            shutdown_runs: Vec::new(),
            protocol_errors: Vec::new(),
            prepared: (0, 0),
            wake_audit: true,
            late_wakes: Vec::new(),
            wake_storms: Vec::new(),
            quiet_wake_peak: 0,
            next_audit: 0,
            operator: None,
            slowed: BTreeSet::new(),
            network: Network::new(Races::NONE, 0),
        }
    }

    /// Makes the registry refuse transactions with more than `limit` compares or writes, as
    /// etcd's `--max-txn-ops` does ([`Store::set_max_txn_ops`]); `None` lifts the limit.
    pub fn set_max_txn_ops(&mut self, limit: Option<usize>) {
        self.store.set_max_txn_ops(limit);
    }

    /// Node `n`'s view of now.
    pub fn time_of(&self, n: usize) -> Now {
        let skew = self.nodes.get(n).map_or(0, |node| node.skew);
        // Read from milliseconds (every input to every machine carries it). Beyond chrono's
        // range, which no world's hours reach, the origin.
        let wall = self
            .wall_origin
            .timestamp_millis()
            .checked_add(self.now as i64)
            .and_then(|ms| ms.checked_add(skew))
            .and_then(DateTime::<Utc>::from_timestamp_millis)
            .unwrap_or(self.wall_origin);
        Now {
            mono: Mono(self.now),
            wall,
        }
    }

    /// The true wall time now.
    pub fn time(&self) -> Now {
        Now {
            mono: Mono(self.now),
            wall: self.wall_origin + chrono::Duration::milliseconds(self.now as i64),
        }
    }

    fn store_now(&self) -> Duration {
        Duration::from_millis(self.now)
    }

    pub(crate) fn note(&mut self, what: impl Hash, text: impl FnOnce() -> String) {
        self.now.hash(&mut self.trace);
        what.hash(&mut self.trace);
        if self.keep_log {
            let line = format!("{:>10} {}", timeline::clock(self.now), text());
            self.log.push(line);
        }
    }

    /// Adds a node with the given jobs and connects it. Returns its index, or why the node
    /// cannot be added (an invalid id, a job or one of [`Cluster::strategies`] its machine
    /// refuses), in which case the cluster is left as it was.
    pub fn add_node(&mut self, id: &str, jobs: &[JobConfig]) -> Result<usize, ClusterError> {
        let id = InstanceId::new(id).map_err(|e| ClusterError::InstanceId {
            id: id.to_owned(),
            why: e.to_string(),
        })?;
        let mut opts = self
            .options
            .clone()
            .unwrap_or_else(|| MachineOptions::new(id.clone()));
        opts.instance_id = id.clone();
        self.add_node_with(opts, jobs)
    }

    /// Adds a node with options, as [`Cluster::add_node`] does.
    pub fn add_node_with(
        &mut self,
        opts: MachineOptions,
        jobs: &[JobConfig],
    ) -> Result<usize, ClusterError> {
        let id = opts.instance_id.clone();
        let mut opts = opts;
        opts.registry_clock = self.store.wall_origin().is_some();
        let mut machine = Machine::new(opts);
        for strategy in &self.strategies {
            machine
                .add_strategy(Arc::clone(strategy))
                .map_err(|error| ClusterError::Strategy {
                    node: id.to_string(),
                    error,
                })?;
        }
        let n = self.nodes.len();
        let now = self.time();
        for config in jobs {
            let spec = simple_job(config, &self.job_type);
            machine
                .add_job(spec, now)
                .map_err(|error| ClusterError::Job {
                    node: id.to_string(),
                    job: config.job_name.clone(),
                    error,
                })?;
        }
        let hosted = jobs.iter().map(|j| j.job_name.clone()).collect();
        self.nodes.push(Node::new(id.clone(), machine, hosted));
        self.requests.push(0);
        self.transactions.push(0);
        self.note(("join", n), || format!("node {n} ({id}) starts"));
        self.connect(n);
        Ok(n)
    }

    fn connect(&mut self, n: usize) {
        let now = self.store_now();
        let info = self.store.open_session(self.session_timeout, now);
        let watch = self.store.watch(info.id, &NodePath::root(), now).ok();
        if let Some(w) = watch {
            if self.watch_delay > 0 {
                self.store
                    .set_watch_latency(w, Duration::from_millis(self.watch_delay));
            }
        }
        let node = &mut self.nodes[n];
        node.session = Some(info.id);
        node.watch = watch;
        let t = self.time_of(n);
        self.nodes[n]
            .machine
            .handle_registry_event(RegistryEvent::Session(SessionEvent::Connected(info)), t);
        self.pump(n);
    }

    /// Crashes a node: it stops at once without closing its session, which expires after its
    /// timeout. Its runs stop with it.
    pub fn crash(&mut self, n: usize) {
        let now = self.store_now();
        self.note(("crash", n), || format!("node {n} crashes"));
        let node = &mut self.nodes[n];
        node.set_process(Process::Crashed);
        node.replies.clear();
        node.inbox.clear();
        node.prepared.clear();
        self.network.drop_node(n);
        let node = &mut self.nodes[n];
        let gone: Vec<Running> = std::mem::take(&mut node.running).into_values().collect();
        node.first_end = None;
        for r in gone {
            for i in r.runs {
                self.runs[i].end = Some(self.now);
                let run = &self.runs[i];
                self.last_ended
                    .insert((run.node, run.job.clone(), run.item), i);
                self.runs[i].cancelled = true;
                self.runs[i].crashed = true;
            }
        }
        if let Some(s) = self.nodes[n].session {
            self.store.kill(s, now);
        }
    }

    /// Cuts a node off from the registry (both ways).
    pub fn partition(&mut self, n: usize) {
        let now = self.store_now();
        self.note(("partition", n), || format!("node {n} is cut off"));
        let deaf = self.nodes[n].deaf();
        self.nodes[n].set_link(Link::Partitioned { deaf });
        if let Some(s) = self.nodes[n].session {
            self.store.suspend(s, now);
        }
    }

    /// Heals a node's partition (and deafness).
    pub fn heal(&mut self, n: usize) {
        let now = self.store_now();
        self.note(("heal", n), || format!("node {n} is reconnected"));
        let (deaf, partitioned) = (self.nodes[n].deaf(), self.nodes[n].partitioned());
        self.nodes[n].set_link(Link::Connected);
        if deaf {
            if let Some(w) = self.nodes[n].watch {
                self.store.release_watch(w);
            }
        }
        if !partitioned {
            return;
        }
        if let Some(s) = self.nodes[n].session {
            self.store.resume(s, now);
            if !self.store.is_alive(s) {
                self.renew(n);
            }
        }
    }

    /// Makes a node deaf: its requests reach the registry (its session stays alive) but no
    /// reply or event reaches it; requests time out after [`Cluster::request_timeout`].
    pub fn deafen(&mut self, n: usize) {
        self.note(("deaf", n), || format!("node {n} hears nothing"));
        let link = match self.nodes[n].link() {
            Link::Connected | Link::Deaf => Link::Deaf,
            Link::Partitioned { .. } => Link::Partitioned { deaf: true },
        };
        self.nodes[n].set_link(link);
        if let Some(w) = self.nodes[n].watch {
            self.store.hold_watch(w);
        }
    }

    /// Pauses a whole process (a stop-the-world garbage collection): it handles nothing, its
    /// runs make no progress, and its session is not kept alive.
    pub fn pause(&mut self, n: usize) {
        let now = self.store_now();
        if !self.nodes[n].active() {
            return;
        }
        self.note(("pause", n), || format!("node {n} pauses"));
        let since = self.now;
        self.nodes[n].set_process(Process::Paused { since });
        if let Some(s) = self.nodes[n].session {
            if !self.nodes[n].partitioned() {
                self.store.suspend(s, now);
            }
        }
    }

    /// Ends a pause: runs resume where they were, the client reconnects.
    pub fn unpause(&mut self, n: usize) {
        let Some(since) = self.nodes[n].paused() else {
            return;
        };
        self.nodes[n].set_process(Process::Up);
        let now = self.store_now();
        let frozen = self.now - since;
        self.note(("unpause", n), || {
            format!("node {n} resumes after {frozen} ms")
        });
        let resumed = self.now;
        for r in self.nodes[n].running.values_mut() {
            r.ends += frozen;
            for &i in &r.runs {
                self.runs[i].resumed = Some(resumed);
            }
        }
        self.nodes[n].ends_changed();
        for reply in &mut self.nodes[n].replies {
            reply.0 = reply.0.max(resumed);
        }
        if !self.nodes[n].partitioned() {
            if let Some(s) = self.nodes[n].session {
                self.store.resume(s, now);
                if !self.store.is_alive(s) {
                    self.renew(n);
                }
            }
        }
    }

    /// A registry restart: every connected client is cut off for `outage_ms`, and sessions
    /// of clients that are gone count their timeout from now again (ZooKeeper restores them
    /// from its log), so their ephemeral nodes stay one more timeout.
    pub fn restart_registry(&mut self, outage_ms: u64) {
        let now = self.store_now();
        self.note("registry-restart", || {
            format!("the registry restarts ({outage_ms} ms)")
        });
        let mut cut = Vec::new();
        for n in 0..self.nodes.len() {
            if self.nodes[n].active() && !self.nodes[n].partitioned() {
                self.partition(n);
                cut.push(n);
            }
        }
        let mut cut_java = Vec::new();
        for j in 0..self.java.len() {
            if self.java[j].active() && !self.java[j].partitioned() {
                self.partition_java(j);
                cut_java.push(j);
            }
        }
        self.store.restart_sessions(now);
        let until = self.now + outage_ms;
        self.run_until(until);
        for n in cut {
            if self.nodes[n].up() {
                self.heal(n);
            }
        }
        for j in cut_java {
            if self.java[j].up() {
                self.heal_java(j);
            }
        }
    }

    /// Makes the world race as `races` says, drawing from `seed` (see [`crate::network`]).
    /// Set it before the first node joins: the races of requests already sent are not
    /// redrawn.
    pub fn set_races(&mut self, races: Races, seed: u64) {
        self.network = Network::new(races, seed);
        if self.keep_log {
            self.log.push(format!("world: races: {races}"));
        }
    }

    /// The races of the world ([`Cluster::set_races`]).
    pub fn races(&self) -> Races {
        self.network.races
    }

    /// Makes node `n` lose the replies to its next `count` requests (see
    /// [`Node::lose_replies`]).
    pub fn lose_replies(&mut self, n: usize, count: u32) {
        self.note(("lose-replies", n, count), || {
            format!("node {n} loses the replies to its next {count} requests")
        });
        self.nodes[n].set_lose_replies(count);
    }

    /// Makes node `n` lose each reply with a chance of `per_mille` (see [`Node::reply_loss`]);
    /// 0 ends it.
    pub fn set_reply_loss(&mut self, n: usize, per_mille: u32) {
        self.note(("reply-loss", n, per_mille), || {
            format!("node {n} loses {per_mille}‰ of its replies")
        });
        self.nodes[n].set_reply_loss(per_mille);
    }

    /// Makes node `n` lose the reply to its next failover claim of an item of `job`, or, with
    /// `None`, no longer (see [`Node::loses_failover_reply`]).
    pub fn lose_failover_reply(&mut self, n: usize, job: Option<&str>) {
        if self.nodes[n].loses_failover_reply() == job {
            return;
        }
        self.note(("lose-failover-reply", n, job), || match job {
            Some(job) => {
                format!("node {n} will lose the reply to its next failover claim of {job}")
            }
            None => format!("node {n} no longer loses the reply to a failover claim"),
        });
        self.nodes[n].set_lose_failover_reply(job.map(str::to_owned));
    }

    /// Makes node `n` lose the reply to the request `request` picks, or, with `None`, no longer
    /// (see [`Node::loses_reply_to`]).
    pub fn lose_reply_to(&mut self, n: usize, request: Option<LoseReplyTo>) {
        if self.nodes[n].loses_reply_to() == request.as_ref() {
            return;
        }
        self.note(("lose-reply-to", n, &request), || match &request {
            Some(LoseReplyTo::EndPart { job, .. }) => format!(
                "node {n} will lose the reply to the first part of its run's end of {job} recorded in parts"
            ),
            Some(LoseReplyTo::Removal { path }) => {
                format!("node {n} will lose the reply to its removal of {path}")
            }
            None => format!("node {n} no longer loses the reply to a request picked for it"),
        });
        self.nodes[n].set_lose_reply_to(request);
    }

    /// Makes node `n`'s watch deliver each event `ms` after it happened, from now on (a
    /// watch that lags behind the registry's reads, as from a server catching up); the
    /// node's events already on their way keep their times. [`Cluster::restore_watches`]
    /// ends it.
    pub fn slow_watch(&mut self, n: usize, ms: u64) {
        let Some(w) = self.nodes[n].watch else {
            return;
        };
        self.note(("slow-watch", n, ms), || {
            format!("node {n}'s watch delivers {ms} ms late")
        });
        self.store.set_watch_latency(w, Duration::from_millis(ms));
        self.slowed.insert(n);
    }

    /// Brings every watch slowed by [`Cluster::slow_watch`] back to
    /// [`Cluster::watch_delay`].
    pub fn restore_watches(&mut self) {
        // Each by [`Cluster::restore_watch`], which restores only a node still in `slowed`
        // (taking the set first left it empty, and every slowed watch lagging past the heal).
        let slowed: Vec<usize> = self.slowed.iter().copied().collect();
        for n in slowed {
            self.restore_watch(n);
        }
    }

    /// Brings node `n`'s watch back to [`Cluster::watch_delay`], if it was slowed.
    pub fn restore_watch(&mut self, n: usize) {
        if !self.slowed.remove(&n) {
            return;
        }
        let delay = self.watch_delay;
        self.note(("restore-watch", n), || {
            format!("node {n}'s watch delivers on time again")
        });
        if let Some(w) = self.nodes[n].watch {
            self.store
                .set_watch_latency(w, Duration::from_millis(delay));
        }
    }

    /// The heal's end of lost replies: none drawn any more ([`Races::reply_loss`]), none on
    /// any node ([`Cluster::lose_replies`], [`Cluster::set_reply_loss`],
    /// [`Cluster::lose_failover_reply`], [`Cluster::lose_reply_to`]). The other races go
    /// on: they slow the world down, they do not stop it.
    pub fn calm(&mut self) {
        if self.network.races.reply_loss > 0 {
            self.note("calm", || "no more replies are lost".to_owned());
            self.network.races.reply_loss = 0;
        }
        for node in &mut self.nodes {
            node.set_lose_replies(0);
            node.set_reply_loss(0);
            node.set_lose_failover_reply(None);
            node.set_lose_reply_to(None);
        }
    }

    /// The longest a registry round trip usually takes, ms: [`Cluster::latency`], or with
    /// travelling requests two legs of [`Races::spread`] (a spike takes up to three times
    /// more).
    pub fn latency_bound(&self) -> u64 {
        if self.network.travels() {
            2 * self.network.races.spread
        } else {
            self.latency
        }
    }

    /// The longest a watch delivery is usually late, ms: [`Cluster::watch_delay`] and
    /// [`Races::watch_spread`].
    pub fn watch_delay_bound(&self) -> u64 {
        self.watch_delay + self.network.races.watch_spread
    }

    fn renew(&mut self, n: usize) {
        let now = self.store_now();
        let Some(old) = self.nodes[n].session else {
            return;
        };
        if let Some(info) = self.store.reconnect(old, now) {
            self.nodes[n].session = Some(info.id);
        }
    }

    /// Operator command on a node's machine.
    pub fn trigger(&mut self, n: usize, job: &str) {
        self.trigger_with(n, job, None);
    }

    /// A manual trigger of `job` on node `n` with a parameter that replaces the job's
    /// `jobParameter` for its runs (none, or an empty one: the job's own).
    pub fn trigger_with(&mut self, n: usize, job: &str, parameter: Option<&str>) {
        let t = self.time_of(n);
        self.note(("trigger", n, job), || match parameter {
            Some(p) => format!("node {n}: trigger {job} with parameter {p:?}"),
            None => format!("node {n}: trigger {job}"),
        });
        let parameter = parameter.map(str::to_owned);
        if let Err(e) = self.nodes[n].machine.trigger(job, parameter, t) {
            self.note(("trigger-refused", n), || {
                format!("node {n}: trigger refused: {e}")
            });
        }
        self.pump(n);
    }

    /// Removes a job from a live node's machine, as `SchedulerHandle::remove_job` does: its runs
    /// finish (or are cancelled after the shutdown grace), then the node leaves the job.
    pub fn remove_job(&mut self, n: usize, job: &str) -> Result<(), MachineError> {
        let t = self.time_of(n);
        let result = self.nodes[n].machine.remove_job(job, t);
        if result.is_ok() {
            self.nodes[n].jobs.remove(job);
        }
        self.note(("remove-job", n, job, result.is_ok()), || {
            format!("node {n}: remove job {job}: {}", timeline::outcome(&result))
        });
        self.pump(n);
        result
    }

    /// Adds a job to a live node's machine, as `SchedulerHandle::add_job` does.
    pub fn add_job(&mut self, n: usize, config: &JobConfig) -> Result<(), MachineError> {
        let t = self.time_of(n);
        let spec = simple_job(config, &self.job_type);
        let result = self.nodes[n].machine.add_job(spec, t);
        let job = &config.job_name;
        if result.is_ok() {
            self.nodes[n].jobs.insert(job.clone());
            let now = self.now;
            for s in self
                .shutdowns
                .iter_mut()
                .filter(|s| s.node == n && s.job == *job && s.ended.is_none())
            {
                s.ended = Some(now);
            }
        }
        self.note(("add-job", n, job, result.is_ok()), || {
            format!("node {n}: add job {job}: {}", timeline::outcome(&result))
        });
        self.pump(n);
        result
    }

    /// Starts a graceful shutdown of a node.
    pub fn shutdown(&mut self, n: usize) {
        let t = self.time_of(n);
        self.note(("shutdown", n), || format!("node {n}: graceful shutdown"));
        self.nodes[n].shutdown_requested = true;
        self.nodes[n].machine.shutdown(t);
        self.pump(n);
    }

    /// Carries out a node's commands until it has none.
    fn pump(&mut self, n: usize) {
        let origin = self.wall_origin.timestamp_millis();
        self.nodes[n].inputs += 1;
        self.nodes[n].timer = None;
        // After every input: the machine's invariants and its cache's self-check (off only in
        // a build that times the machine itself: see the `self-check` feature).
        #[cfg(feature = "self-check")]
        for found in self.nodes[n].machine.self_check() {
            self.invariant_violations.push((self.now, n, found));
        }
        while let Some(cmd) = self.nodes[n].machine.poll_command() {
            if !self.nodes[n].up() {
                continue;
            }
            match cmd {
                Command::Registry { id, op } => {
                    self.requests[n] += 1;
                    if matches!(op, RegistryOp::Transact(_)) {
                        self.transactions[n] += 1;
                    }
                    self.send(n, id, op);
                }
                Command::Start(exec) => {
                    // A run announced ahead is started by its id only.
                    if self.nodes[n].prepared.remove(&exec.id).is_some() {
                        let why = format!(
                            "node {n}: {:?} was prepared, then started as a new run",
                            exec.id
                        );
                        self.protocol_errors.push((self.now, why));
                    }
                    self.start(n, exec);
                }
                Command::StartPrepared(id) => match self.nodes[n].prepared.remove(&id) {
                    Some(exec) => self.start(n, exec),
                    None => {
                        let why = format!("node {n}: start of {id:?}, which is not prepared");
                        self.protocol_errors.push((self.now, why));
                    }
                },
                Command::Prepare(exec) => {
                    self.note(("prepare", n, exec.id.0), || {
                        format!(
                            "node {n}: prepare run #{} of {} ({}, fire {})",
                            exec.id.0,
                            exec.job_name,
                            timeline::kind(exec.kind),
                            timeline::fire(exec.fire_time.timestamp_millis(), origin)
                        )
                    });
                    let id = exec.id;
                    self.prepared.0 += 1;
                    if self.nodes[n].running.contains_key(&id)
                        || self.nodes[n].prepared.insert(id, exec).is_some()
                    {
                        let why = format!("node {n}: {id:?} prepared twice or while running");
                        self.protocol_errors.push((self.now, why));
                    }
                }
                Command::Discard(id) => {
                    self.note(("discard", n, id.0), || {
                        format!("node {n}: discard prepared run #{}", id.0)
                    });
                    self.prepared.1 += 1;
                    if self.nodes[n].prepared.remove(&id).is_none() {
                        let why = format!("node {n}: discard of {id:?}, which is not prepared");
                        self.protocol_errors.push((self.now, why));
                    }
                }
                Command::Cancel { id, reason } => {
                    let now = self.now;
                    let delay = self.cancel_delay;
                    self.note(("cancel", n, id.0), || {
                        format!(
                            "node {n}: cancel run #{} because {}",
                            id.0,
                            timeline::cancel_reason(reason)
                        )
                    });
                    if let Some(r) = self.nodes[n].running.get_mut(&id) {
                        for &i in &r.runs {
                            self.runs[i].cancel_signal.get_or_insert(now);
                        }
                        if !self.ignore_cancel.contains(&r.exec.job_name) {
                            r.cancelled = true;
                            r.ends = r.ends.min(now + delay);
                        }
                        self.nodes[n].ends_changed();
                    }
                }
                Command::CloseSession => {
                    let now = self.store_now();
                    self.note(("close", n), || format!("node {n} closes its session"));
                    if let Some(s) = self.nodes[n].session.take() {
                        let _ = self.store.close_session(s, now);
                        if !self.store.is_alive(s) {
                            self.session_ended(s);
                        }
                    }
                    self.nodes[n].set_process(Process::Stopped);
                }
                Command::Event(e) => {
                    let now = self.now;
                    let origin = self.wall_origin.timestamp_millis();
                    self.note(("event", n), || {
                        format!("node {n}: {}", timeline::event(&e, origin))
                    });
                    self.nodes[n].events.push((now, e));
                }
            }
        }
    }

    /// Sends a request of node `n`. Without travel ([`Races::spread`] 0) it applies now and
    /// is answered after [`Cluster::latency`]; with travel it reaches the registry after a
    /// drawn leg (never before an earlier request of the node), applies then, and its answer
    /// takes another leg (never before an earlier answer). A deaf node, or a lost reply, hears
    /// a timeout after [`Cluster::request_timeout`] instead, although the request applies.
    fn send(&mut self, n: usize, id: RequestId, op: RegistryOp) {
        let max_ops = self.store.max_txn_ops();
        let counted = self.nodes[n].take_lost_reply()
            || self.nodes[n].take_lost_failover_reply(&op)
            || self.nodes[n].take_lost_reply_to(&op, max_ops);
        let per_mille = self.nodes[n].reply_loss();
        let lost = counted || self.network.loses(per_mille);
        let answered = !(self.nodes[n].deaf() || lost);
        let timeout = (
            self.now + self.request_timeout,
            id,
            RegistryReply::Failed(RegistryError::Timeout),
        );
        if !self.network.travels() || self.nodes[n].partitioned() {
            // Applied now: a cut-off node's request is refused by the registry at once.
            let wall = self.time_of(n).wall_ms();
            let reply = self.execute(n, self.nodes[n].session, wall, op);
            let reply = if answered {
                let at = if self.network.travels() {
                    self.reply_time(n)
                } else {
                    self.now + self.latency
                };
                (at, id, reply)
            } else {
                timeout
            };
            self.nodes[n].replies.push(reply);
            return;
        }
        let at = (self.now + self.network.leg()).max(self.nodes[n].wire.request);
        self.nodes[n].wire.request = at;
        if !answered {
            self.nodes[n].replies.push(timeout);
        }
        let session = self.nodes[n].session;
        let wall = self.time_of(n).wall_ms();
        self.network.send(
            at,
            InFlight {
                node: n,
                java: false,
                ends: Vec::new(),
                session,
                wall,
                id,
                op,
                answered,
            },
        );
    }

    /// When an answer sent to node `n` now arrives: after a drawn leg, never before an earlier
    /// answer.
    fn reply_time(&mut self, n: usize) -> u64 {
        let at = (self.now + self.network.leg()).max(self.nodes[n].wire.reply);
        self.nodes[n].wire.reply = at;
        at
    }

    /// Applies the requests that reached the registry by now, in the order they arrived, and
    /// sends their answers back. Whether there was one.
    fn arrive(&mut self) -> bool {
        let mut any = false;
        while let Some(r) = self.network.arrived(self.now) {
            any = true;
            if r.java {
                self.arrive_java(r);
                continue;
            }
            let reply = self.execute(r.node, r.session, r.wall, r.op);
            if r.answered {
                let at = self.reply_time(r.node);
                self.nodes[r.node].replies.push((at, r.id, reply));
            }
        }
        any
    }

    /// Whether an ElasticJob instance's node of `job` exists and was written at `by` (epoch
    /// ms, true time) or before.
    fn java_registered(&self, job: &str, by: i64) -> bool {
        self.java.iter().any(|j| {
            NodePath::new(format!("/{job}/instances/{}", j.id))
                .ok()
                .and_then(|p| self.store.node(&p))
                .is_some_and(|n| n.stat.mtime_ms.is_some_and(|t| t <= by))
        })
    }

    fn start(&mut self, n: usize, exec: Execution) {
        let origin = self.wall_origin.timestamp_millis();
        let mut runs = Vec::new();
        let mut longest = 0;
        for item in &exec.items {
            longest = longest.max((self.duration)(&exec.job_name, item.item, self.now));
            runs.push(self.runs.len());
            let run = RunRecord {
                node: n,
                java: false,
                job: exec.job_name.clone(),
                item: item.item,
                fire: exec.fire_time.timestamp_millis(),
                kind: exec.kind,
                job_parameter: exec.job_parameter.clone(),
                token: item.fencing_token.0,
                start: self.now,
                wall_start: self.time_of(n).wall.timestamp_millis(),
                end: None,
                cancel_signal: None,
                cancelled: false,
                crashed: false,
                resumed: None,
                end_committed: None,
                session: self.nodes[n].session,
                session_end: None,
            };
            let disabled = format!("/{}/sharding/{}/disabled", run.job, run.item);
            if self.exists(&disabled)
                && self
                    .disabled_since
                    .get(&disabled)
                    .is_some_and(|t| *t + 1_000 <= self.now)
            {
                self.disabled_runs.push(self.runs.len());
            }
            if run.kind != RunKind::Trigger
                && run.fire - (origin + self.now as i64) > EARLY_BESIDE_JAVA_MS
                && self.java_registered(&run.job, origin + self.now as i64 - 2_000)
            {
                self.early_runs.push(self.runs.len());
            }
            let session = self.nodes[n].session;
            if self.shutdowns.iter().any(|s| {
                s.node == n
                    && s.job == run.job
                    && Some(s.session) == session
                    && s.ended.is_none()
                    && s.at + 1_000 <= self.now
                    && self.shown_own.contains(&(n, s.job.clone(), s.session))
            }) {
                self.shutdown_runs.push(self.runs.len());
            }
            let key = (n, run.job.clone(), run.item, run.fire, run.token);
            self.note(("start", key), || {
                format!(
                    "node {n}: start {}/{} ({}, fire {}, token {})",
                    run.job,
                    run.item,
                    timeline::kind(run.kind),
                    timeline::fire(run.fire, origin),
                    run.token
                )
            });
            self.runs.push(run);
        }
        let ends = self.now + longest;
        self.nodes[n].running.insert(
            exec.id,
            Running {
                exec,
                ends,
                cancelled: false,
                runs,
            },
        );
        self.nodes[n].ends_changed();
    }

    /// Applies a request of node `n`, sent in `session` when the node's clock read `wall`
    /// (epoch ms), to the store. A registration that starts its job's cluster is recorded
    /// with that time: the instance stamps its start when it sends the registration, and
    /// cannot know when it reaches the registry.
    fn execute(
        &mut self,
        n: usize,
        session: Option<SessionId>,
        wall: i64,
        op: RegistryOp,
    ) -> RegistryReply {
        let now = self.store_now();
        let Some(s) = session else {
            return RegistryReply::Failed(RegistryError::ConnectionLoss);
        };
        let result = match op {
            RegistryOp::Get(p) => self.store.get(s, &p, now).map(RegistryReply::Node),
            RegistryOp::Children(p) => self.store.children(s, &p, now).map(RegistryReply::Children),
            RegistryOp::GetTree(p) => self.store.read_tree(s, &p, now).map(RegistryReply::Tree),
            RegistryOp::Transact(ops) => {
                // Registrations into an empty `instances/`, seen in the store as it stands.
                let starting: Vec<String> = ops
                    .iter()
                    .filter_map(|op| match op {
                        TxnOp::Create { path, .. } => Some(path),
                        _ => None,
                    })
                    .filter_map(|path| match JobNode::parse(path) {
                        Some((job, JobNode::Instance(_))) => {
                            let dir = path.parent()?;
                            // The directory, and nothing below it (a job's first registration,
                            // which creates the directory, is no start: no item has a record).
                            (self.store.tree(&dir).len() == 1).then(|| job.to_owned())
                        }
                        _ => None,
                    })
                    .collect();
                let ended = self.ends_recorded(n, &ops);
                let created: Vec<(String, u32)> = ops
                    .iter()
                    .filter_map(|op| match op {
                        TxnOp::Create { path, .. } => match JobNode::parse(path) {
                            Some((job, JobNode::ItemState(item, ItemLeaf::Execution))) => {
                                Some((job.to_owned(), item))
                            }
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                // The markers it deletes, with the revision each was created at (a run's
                // fencing token), read before the transaction applies.
                let deleted: Vec<(String, u32, u64)> = ops
                    .iter()
                    .filter_map(|op| match op {
                        TxnOp::Delete { path, .. } => match JobNode::parse(path) {
                            Some((job, JobNode::ItemState(item, ItemLeaf::Running))) => self
                                .store
                                .node(path)
                                .map(|m| (job.to_owned(), item, m.stat.created.0)),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                // The `misfire` flags it deletes: a shardjob claim covers the fire an
                // ElasticJob instance's flag owed, which no ElasticJob replay stands for then.
                let unflagged: Vec<(String, u32)> = ops
                    .iter()
                    .filter_map(|op| match op {
                        TxnOp::Delete { path, .. } => match JobNode::parse(path) {
                            Some((job, JobNode::ItemState(item, ItemLeaf::Misfire))) => {
                                Some((job.to_owned(), item))
                            }
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                // For the attribution of a world with ElasticJob nodes only (it reads them
                // nowhere else): the `running` markers it creates (claims), and its writes of
                // the re-sharding flag (a shardjob leader of a shared job sets and consumes it
                // as an ElasticJob leader does).
                let beside_java = !self.java.is_empty();
                let claimed: Vec<(String, u32, NodePath)> = ops
                    .iter()
                    .filter(|_| beside_java)
                    .filter_map(|op| match op {
                        TxnOp::Create { path, .. } => match JobNode::parse(path) {
                            Some((job, JobNode::ItemState(item, ItemLeaf::Running))) => {
                                Some((job.to_owned(), item, path.clone()))
                            }
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                let flag_steps: Vec<(String, JavaSharding)> = ops
                    .iter()
                    .filter(|_| beside_java)
                    .filter_map(|op| match op {
                        TxnOp::Create { path, .. } => match JobNode::parse(path) {
                            Some((job, JobNode::ShardingNecessary)) => {
                                Some((job.to_owned(), JavaSharding::Flagged(self.now)))
                            }
                            _ => None,
                        },
                        TxnOp::Delete { path, .. } => match JobNode::parse(path) {
                            Some((job, JobNode::ShardingNecessary)) => {
                                Some((job.to_owned(), JavaSharding::Sharded(self.now)))
                            }
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                let result = self.store.transact(s, ops, now);
                if result.is_ok() {
                    for (job, step) in flag_steps {
                        self.shardjob_sharding.entry(job).or_default().push(step);
                    }
                    for (job, item, path) in claimed {
                        if let Some(m) = self.store.node(&path) {
                            self.claim_commits
                                .insert((job, item, m.stat.created.0), self.now);
                        }
                    }
                    for key in unflagged {
                        self.java_missed.remove(&key);
                    }
                    for (job, item, created) in deleted {
                        self.marker_deletions.push(MarkerDeletion {
                            at: self.now,
                            node: n,
                            job,
                            item,
                            created,
                        });
                    }
                    for (job, item) in created {
                        // The first record of an item an ElasticJob instance created (its node
                        // still there): the item exists from that node's creation.
                        let at = self
                            .java_item_nodes
                            .get(&(job.clone(), item))
                            .copied()
                            .filter(|_| self.exists(&format!("/{job}/sharding/{item}")))
                            .unwrap_or(self.now);
                        self.item_creations.push((at, job, item));
                    }
                    for i in ended {
                        self.runs[i].end_committed = Some(self.now);
                    }
                    for job in starting {
                        self.starts.push(ClusterStart {
                            at: self.now,
                            job,
                            node: n,
                            java: false,
                            wall,
                        });
                    }
                }
                result.map(RegistryReply::Transacted)
            }
        };
        result.unwrap_or_else(RegistryReply::Failed)
    }

    /// The runs of node `n` whose end a transaction records, should it commit: it removes an
    /// item's `running` marker created at the run's fencing token and leaves the item's record
    /// without a run in progress (a completion). The runs, indices into `runs`.
    fn ends_recorded(&self, n: usize, ops: &[TxnOp]) -> Vec<usize> {
        let mut out = Vec::new();
        for op in ops {
            let TxnOp::Delete { path, .. } = op else {
                continue;
            };
            let Some((job, JobNode::ItemState(item, ItemLeaf::Running))) = JobNode::parse(path)
            else {
                continue;
            };
            let Some(i) = self.last_ended.get(&(n, job.to_owned(), item)).copied() else {
                continue;
            };
            let Some(marker) = self.store.node(path) else {
                continue;
            };
            let finished = ops.iter().any(|op| match op {
                TxnOp::Set { path: p, data, .. } => {
                    matches!(
                        JobNode::parse(p),
                        Some((j, JobNode::ItemState(k, ItemLeaf::Execution))) if j == job && k == item
                    ) && ItemRecord::parse(data).is_ok_and(|r| r.run.is_none())
                }
                _ => false,
            });
            if finished && marker.stat.created.0 == self.runs[i].token {
                out.push(i);
            }
        }
        out
    }

    /// Runs the cluster until virtual time `until` (ms), processing everything due.
    pub fn run_until(&mut self, until: u64) {
        loop {
            self.settle();
            self.audit_wakes();
            match self.next_time() {
                Some(t) if t <= until => self.now = t.max(self.now),
                _ => {
                    self.now = until.max(self.now);
                    self.settle();
                    return;
                }
            }
        }
    }

    /// Checks the wake times of every running node, at most once a simulated second. Only
    /// looks: the trace is the same with or without it.
    fn audit_wakes(&mut self) {
        if !self.wake_audit || self.now < self.next_audit {
            return;
        }
        self.next_audit = self.now.saturating_add(1_000);
        for n in 0..self.nodes.len() {
            if !self.nodes[n].active() {
                continue;
            }
            let now = self.time_of(n);
            let node = &mut self.nodes[n];
            for late in node.machine.late_wakes(now, &mut node.audit) {
                self.late_wakes.push((self.now, n, late));
            }
        }
    }

    /// Handles everything due now: the requests that reached the registry, then each node in
    /// turn, in index order or, when the world races ([`Races::shuffle`]), in an order drawn
    /// for this instant.
    fn settle(&mut self) {
        // ElasticJob nodes act after the shardjob nodes, or in the drawn order with them; a
        // world without them draws as it did before they existed.
        let count = self.nodes.len() + self.java.len();
        let order = self.network.order(count);
        let mut progressed = true;
        let mut rounds = 0;
        while progressed && rounds < 10_000 {
            progressed = false;
            rounds += 1;
            for s in self.store.advance_to(self.store_now()) {
                self.session_ended(s);
            }
            progressed |= self.arrive();
            for k in 0..count {
                let n = order.as_ref().and_then(|o| o.get(k)).copied().unwrap_or(k);
                progressed |= match n.checked_sub(self.nodes.len()) {
                    None => self.step_node(n),
                    Some(j) => self.step_java(j),
                };
            }
        }
        if let Some(order) = order {
            self.network.reuse(order);
        }
    }

    /// Notes the end of a session (expired or closed) in the runs that started in it.
    pub(crate) fn session_ended(&mut self, s: SessionId) {
        let now = self.now;
        for r in self
            .runs
            .iter_mut()
            .filter(|r| r.session == Some(s) && r.session_end.is_none())
        {
            r.session_end = Some(now);
        }
    }

    /// Runs for `ms` more milliseconds.
    pub fn run_for(&mut self, ms: u64) {
        let until = self.now + ms;
        self.run_until(until);
    }

    fn step_node(&mut self, n: usize) -> bool {
        if !self.nodes[n].active() {
            return false;
        }
        let mut progressed = false;
        let now = self.now;
        // Watch events: handed over as the store releases them, or, when deliveries race, each
        // delivery after a drawn delay (never before an earlier one).
        if let Some(w) = self.nodes[n].watch {
            let store_now = self.store_now();
            let changes = self.store.watch_changes();
            let idle = self.nodes[n].watch_poll.is_some_and(|(polled, seen, due)| {
                polled == w && seen == changes && due.is_none_or(|d| d > store_now)
            });
            let events = if idle {
                Vec::new()
            } else {
                let events = self.store.take_events(w, store_now);
                self.nodes[n].watch_poll =
                    Some((w, self.store.watch_changes(), self.store.watch_due(w)));
                events
            };
            if !events.is_empty() {
                progressed = true;
                if self.network.races.watch_spread > 0 {
                    let at = (now + self.network.watch_lag()).max(self.nodes[n].wire.event);
                    self.nodes[n].wire.event = at;
                    self.nodes[n].inbox.push_back((at, events));
                } else {
                    self.deliver(n, events);
                }
            }
        }
        while self.nodes[n].inbox.front().is_some_and(|d| d.0 <= now) {
            if let Some((_, events)) = self.nodes[n].inbox.pop_front() {
                progressed = true;
                self.deliver(n, events);
            }
        }
        // Replies.
        if self.nodes[n].replies.iter().any(|r| r.0 <= now) {
            let node = &mut self.nodes[n];
            let (due, rest): (Vec<_>, Vec<_>) = node.replies.drain(..).partition(|r| r.0 <= now);
            node.replies = rest;
            for (_, id, reply) in due {
                progressed = true;
                let reply = if self.nodes[n].partitioned() {
                    RegistryReply::Failed(RegistryError::ConnectionLoss)
                } else {
                    reply
                };
                if let RegistryReply::Tree(tree) = &reply {
                    for node in &tree.nodes {
                        self.note_own_node(n, &node.path, Some(&node.stat));
                    }
                }
                let t = self.time_of(n);
                self.nodes[n].machine.handle_registry_reply(id, reply, t);
                self.pump(n);
            }
        }
        // Runs that end.
        let ended: Vec<ExecutionId> = if self.nodes[n].first_end.is_some_and(|t| t <= now) {
            self.nodes[n]
                .running
                .iter()
                .filter(|(_, r)| r.ends <= now)
                .map(|(id, _)| *id)
                .collect()
        } else {
            Vec::new()
        };
        for id in ended {
            progressed = true;
            let Some(r) = self.nodes[n].running.remove(&id) else {
                continue;
            };
            self.nodes[n].ends_changed();
            let mut outcomes = BTreeMap::new();
            let job_name = &r.exec.job_name;
            for (k, item) in r.exec.items.iter().enumerate() {
                let outcome = if r.cancelled {
                    ItemOutcome::Cancelled
                } else {
                    ItemOutcome::Succeeded
                };
                outcomes.insert(item.item, outcome);
                if let Some(&i) = r.runs.get(k) {
                    self.runs[i].end = Some(now);
                    self.last_ended.insert((n, job_name.clone(), item.item), i);
                    self.runs[i].cancelled = r.cancelled;
                }
            }
            let job = r.exec.job_name.clone();
            let how = if r.cancelled {
                "ends, cancelled"
            } else {
                "ends"
            };
            self.note(("end", n, id.0), || {
                format!("node {n}: {job} run #{} {how}", id.0)
            });
            let t = self.time_of(n);
            self.nodes[n]
                .machine
                .handle_execution_finished(id, outcomes, t);
            self.pump(n);
        }
        // Timeouts.
        let network = &mut self.network;
        if self.nodes[n]
            .timer(|| network.timer_lag())
            .is_some_and(|t| t <= now)
        {
            let t = self.time_of(n);
            let quiet = self.nodes[n].inputs == self.nodes[n].inputs_after_wake;
            let runs = self.runs.len();
            self.nodes[n].machine.handle_timeout(t);
            self.pump(n);
            self.count_quiet_wake(n, quiet, self.runs.len() > runs);
            // A timeout that stays due is handled again at the next step of time, not now. One
            // that stays due step after step is a machine spinning (a driver would run it in a
            // busy loop): after a simulated second of it, that is a violation, said once.
            // From then on the node is woken once a second only, so that the world goes on.
            let node = &mut self.nodes[n];
            if node.machine.poll_timeout().is_some_and(|t| t.ms() <= now) {
                node.due_streak = node.due_streak.saturating_add(1);
                if node.due_streak >= BUSY_TIMER_STEPS {
                    node.timer = Some(Some(now.saturating_add(1_000)));
                }
                if node.due_streak == BUSY_TIMER_STEPS {
                    self.invariant_violations.push((
                        now,
                        n,
                        format!(
                            "its timer stayed due through {BUSY_TIMER_STEPS} timeouts in a row: \
                             handle_timeout does not do what poll_timeout asks it for"
                        ),
                    ));
                }
            } else {
                node.due_streak = 0;
            }
        }
        progressed
    }

    /// Counts a timeout of node `n` among those of the last simulated second that came with
    /// no other input between them (`quiet`: none since its previous timeout), and notes the
    /// node when they are more than [`QUIET_WAKES_PER_S`]. A timeout that started runs had
    /// work to do and is not counted (a fire of many runs starts them in chunks, a
    /// millisecond apart); while the machine's session is suspended nothing is counted (it
    /// then retries each completion it could not send every `retry_backoff`, which grows with
    /// the runs, not with time). Only looks: the trace is the same.
    fn count_quiet_wake(&mut self, n: usize, quiet: bool, started: bool) {
        let now = self.now;
        let node = &mut self.nodes[n];
        node.inputs_after_wake = node.inputs;
        if !quiet || node.suspended {
            node.quiet_wakes.clear();
        }
        if started || node.suspended {
            return;
        }
        node.quiet_wakes.push_back(now);
        while node
            .quiet_wakes
            .front()
            .is_some_and(|t| t.saturating_add(1_000) <= now)
        {
            node.quiet_wakes.pop_front();
        }
        let count = node.quiet_wakes.len();
        self.quiet_wake_peak = self.quiet_wake_peak.max(count);
        if count > QUIET_WAKES_PER_S && !node.wake_storm {
            node.wake_storm = true;
            self.wake_storms.push((now, n, count));
        }
    }

    /// etcd's watch is a stream of its own, not bound to the lease: an instance may see its
    /// ephemeral nodes deleted by the lease's expiry before its client learns the lease is
    /// gone. The store's watch ends with its session, as ZooKeeper's does; for half the
    /// sessions (even ids) the node is handed the deletion of each of its instance nodes that
    /// it had been shown in that session before it hears anything of the session's trouble
    /// (a suspension, then the expiry), as etcd's watch stream may deliver them.
    fn deletions_before_expiry(&mut self, n: usize, old: SessionId) {
        if old.0 % 2 != 0 {
            return;
        }
        let id = self.nodes[n].id.to_string();
        // The revision of the expiry's deletions, as etcd's watch tells it.
        let revision = self.store.session(old).and_then(|s| s.ended_at);
        let events: Vec<RegistryEvent> = self
            .shown_own
            .iter()
            .filter(|(m, _, s)| *m == n && *s == old)
            .filter_map(|(_, job, _)| NodePath::new(format!("/{job}/instances/{id}")).ok())
            .filter(|path| self.store.node(path).is_none())
            .map(|path| {
                RegistryEvent::Node(registry::WatchEvent {
                    kind: registry::WatchEventKind::Deleted,
                    path,
                    data: Vec::new(),
                    stat: None,
                    revision,
                })
            })
            .collect();
        if events.is_empty() {
            return;
        }
        self.note(("deleted-before-expiry", n), || {
            format!(
                "node {n}: sees its instance nodes deleted before it learns session {old:?} expired"
            )
        });
        let t = self.time_of(n);
        self.nodes[n].machine.handle_registry_events(events, t);
        self.pump(n);
    }

    /// Notes that node `n` was shown a node: its own instance node, if it is one.
    fn note_own_node(&mut self, n: usize, path: &NodePath, stat: Option<&registry::Stat>) {
        // Most paths shown are not instance nodes: their end tells at once.
        let id = self.nodes[n].id.as_str();
        if !path.as_str().ends_with(id) || path.name() != id {
            return;
        }
        let Some(session) = stat.and_then(|s| s.ephemeral_owner) else {
            return;
        };
        let Some(dir) = path.parent() else { return };
        if dir.name() != "instances" {
            return;
        }
        if let Some(job) = dir.parent() {
            self.shown_own.insert((n, job.name().to_owned(), session));
        }
    }

    /// Hands node `n` the watch events due to it. Node events go to the machine in batches;
    /// session events one by one, since the cluster acts on them (a new session after an
    /// expiry).
    fn deliver(&mut self, n: usize, events: Vec<RegistryEvent>) {
        for e in &events {
            if let RegistryEvent::Node(w) = e {
                if w.kind != registry::WatchEventKind::Deleted {
                    self.note_own_node(n, &w.path, w.stat.as_ref());
                }
            }
        }
        // Most deliveries are node events only: one batch, the vector as it came.
        if events.iter().all(|e| matches!(e, RegistryEvent::Node(_))) {
            let t = self.time_of(n);
            self.nodes[n].machine.handle_registry_events(events, t);
            self.pump(n);
            return;
        }
        // Before the session events that lead up to an expiry (a suspension first, often).
        for e in &events {
            if let RegistryEvent::Session(SessionEvent::Expired(old)) = e {
                self.deletions_before_expiry(n, *old);
            }
        }
        let mut batch = Vec::with_capacity(events.len());
        for ev in events {
            match ev {
                RegistryEvent::Node(_) => batch.push(ev),
                RegistryEvent::Session(s) => {
                    if !batch.is_empty() {
                        let t = self.time_of(n);
                        self.nodes[n]
                            .machine
                            .handle_registry_events(std::mem::take(&mut batch), t);
                        self.pump(n);
                    }
                    // Session ids grow: a late event of a session already replaced
                    // (the watch delivers with a delay) must not bring it back.
                    if let SessionEvent::Connected(info) = &s {
                        let current = self.nodes[n].session;
                        if current.is_none_or(|c| info.id > c) {
                            self.nodes[n].session = Some(info.id);
                        }
                    }
                    self.note(("session", n, format!("{s:?}")), || {
                        format!("node {n}: {}", timeline::session(&s))
                    });
                    self.nodes[n].suspended = matches!(s, SessionEvent::Suspended(_));
                    let t = self.time_of(n);
                    self.nodes[n]
                        .machine
                        .handle_registry_event(RegistryEvent::Session(s), t);
                    self.pump(n);
                    if matches!(s, SessionEvent::Expired(_)) && !self.nodes[n].partitioned() {
                        self.renew(n);
                    }
                }
            }
        }
        if !batch.is_empty() {
            let t = self.time_of(n);
            self.nodes[n].machine.handle_registry_events(batch, t);
            self.pump(n);
        }
    }

    fn next_time(&mut self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut at = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        for node in self.nodes.iter_mut().filter(|n| n.active()) {
            if let Some(t) = node.timer(|| self.network.timer_lag()) {
                at(t.max(self.now + 1));
            }
            if let Some(d) = node.inbox.front() {
                at(d.0.max(self.now + 1));
            }
            for r in &node.replies {
                at(r.0.max(self.now + 1));
            }
            if let Some(t) = node.first_end {
                at(t.max(self.now + 1));
            }
        }
        for j in 0..self.java.len() {
            if let Some(t) = self.java_next(j) {
                at(t);
            }
        }
        if let Some(t) = self.network.next_arrival() {
            at(t.max(self.now + 1));
        }
        if let Some(d) = self.store.next_deadline() {
            at(u64::try_from(d.as_millis())
                .unwrap_or(u64::MAX)
                .max(self.now + 1));
        }
        next
    }

    /// The operator's own session (it never expires), opened on first use.
    fn operator_session(&mut self, now: Duration) -> SessionId {
        *self.operator.get_or_insert_with(|| {
            self.store
                .open_session(Duration::from_secs(1 << 30), now)
                .id
        })
    }

    /// The configuration of `job` as the registry holds it now, read as the instances read it
    /// (leniently, with [`Cluster::strategies`] among the known types); `None` if there is
    /// none, or it cannot be read.
    pub fn config_of(&self, job: &str) -> Option<JobConfig> {
        let text = self.read(&format!("/{job}/config"))?;
        JobConfig::from_yaml_with(&text, Strictness::Lenient, &known_types(&self.strategies)).ok()
    }

    /// Changes `job`'s configuration in the registry as an operator would with ElasticJob's
    /// console (the item count, the cron, the failover and misfire flags...): reads it, edits
    /// it, writes it back with [`Cluster::operator_write`]. Item parameters beyond the new
    /// count are dropped, as the console does.
    pub fn operator_edit_config(
        &mut self,
        job: &str,
        edit: impl FnOnce(&mut JobConfig),
    ) -> Result<(), ClusterError> {
        let mut config = self.config_of(job).ok_or_else(|| ClusterError::NoConfig {
            job: job.to_owned(),
        })?;
        edit(&mut config);
        let total = config.sharding_total_count;
        config.sharding_item_parameters.retain(|i, _| *i < total);
        self.operator_write(&format!("/{job}/config"), config.to_yaml().as_bytes())
    }

    /// Writes a node as an operator would (creating it if missing), from a session of its own.
    /// A path the registry cannot hold is refused; a write the registry refuses (it is down,
    /// say) is part of the world: it goes into the log and the trace, as every operator action
    /// does.
    pub fn operator_write(&mut self, path: &str, data: &[u8]) -> Result<(), ClusterError> {
        let now = self.store_now();
        let path = operator_path(path)?;
        let session = self.operator_session(now);
        self.operator_log.push((self.now, path.to_string()));
        let result = match self.store.node(&path) {
            Some(_) => self
                .store
                .set(session, &path, data.to_vec(), None, now)
                .map(|_| ()),
            None => self
                .store
                .create(
                    session,
                    &path,
                    data.to_vec(),
                    registry::CreateMode::Persistent,
                    now,
                )
                .map(|_| ()),
        };
        if path.as_str().ends_with("/disabled") && result.is_ok() {
            self.disabled_since
                .entry(path.to_string())
                .or_insert(self.now);
        }
        let text = String::from_utf8_lossy(data).into_owned();
        self.note(("operator-write", path.to_string(), text.clone()), || {
            format!(
                "operator writes {}: {}",
                timeline::written(path.as_str(), &text),
                timeline::outcome(&result)
            )
        });
        Ok(())
    }

    /// Creates a persistent node no instance's session holds, as a hand or a foreign tool
    /// would (a killed ElasticJob instance's `running` marker, an instance node written by
    /// hand): only if it is missing and its parent exists. Returns whether it was created.
    /// Not an operator's edit: nothing is excused by it.
    pub fn foreign_create(&mut self, path: &str, data: &[u8]) -> Result<bool, ClusterError> {
        let now = self.store_now();
        let path = operator_path(path)?;
        let parent_there = path.parent().is_some_and(|p| self.store.node(&p).is_some());
        if self.store.node(&path).is_some() || !parent_there {
            return Ok(false);
        }
        let session = self.operator_session(now);
        let result = self.store.create(
            session,
            &path,
            data.to_vec(),
            registry::CreateMode::Persistent,
            now,
        );
        let text = String::from_utf8_lossy(data).into_owned();
        self.note(("foreign-write", path.to_string(), text.clone()), || {
            format!(
                "a foreign hand writes {} (persistent, no session): {}",
                timeline::written(path.as_str(), &text),
                timeline::outcome(&result)
            )
        });
        Ok(result.is_ok())
    }

    /// Deletes a node as an operator would; missing is fine. A path the registry cannot hold
    /// is refused, as by [`Cluster::operator_write`].
    pub fn operator_delete(&mut self, path: &str) -> Result<(), ClusterError> {
        let now = self.store_now();
        let path = operator_path(path)?;
        let session = self.operator_session(now);
        self.operator_log.push((self.now, path.to_string()));
        let result = self.store.delete(session, &path, None, now);
        self.disabled_since.remove(path.as_str());
        self.note(("operator-delete", path.to_string()), || {
            format!("operator deletes {path}: {}", timeline::outcome(&result))
        });
        Ok(())
    }

    /// An operator's shutdown of `job` on node `n`, as ElasticJob's `JobOperateAPI.shutdown`
    /// does it: the node's instance node is deleted (from the operator's session). Recorded
    /// as a shutdown when the node existed and its owner's session lived; once the instance
    /// is shown the node (before the deletion, or late), it is to stop the job and start
    /// nothing more of it in that session.
    pub fn operator_shutdown(&mut self, n: usize, job: &str) -> Result<(), ClusterError> {
        let path = format!("/{job}/instances/{}", self.nodes[n].id);
        let owner = operator_path(&path)
            .ok()
            .and_then(|p| self.store.node(&p))
            .and_then(|node| node.stat.ephemeral_owner)
            .filter(|s| self.store.is_alive(*s));
        self.operator_delete(&path)?;
        if let Some(session) = owner {
            if !self.exists(&path) {
                self.shutdowns.push(OperatorShutdown {
                    at: self.now,
                    node: n,
                    job: job.to_owned(),
                    session,
                    ended: None,
                });
            }
        }
        Ok(())
    }

    /// The data of a node in the store, as text.
    pub fn read(&self, path: &str) -> Option<String> {
        let node = self.store.node(&NodePath::new(path).ok()?)?;
        Some(String::from_utf8_lossy(&node.data).into_owned())
    }

    /// The current owner of each item of a job, from the store.
    pub fn owners(&self, job: &str) -> BTreeMap<u32, String> {
        let mut out = BTreeMap::new();
        let Ok(root) = NodePath::new(format!("/{job}/sharding")) else {
            return out;
        };
        for node in self.store.tree(&root) {
            if let Some((_, JobNode::ItemState(item, ItemLeaf::Instance))) =
                JobNode::parse(&node.path)
            {
                out.insert(item, String::from_utf8_lossy(&node.data).into_owned());
            }
        }
        out
    }

    /// The node that leads `job` now, as the registry shows it (its leader election node
    /// names the instance), if any node of the cluster has that id.
    pub fn leader_of(&self, job: &str) -> Option<usize> {
        let id = self.read(&format!("/{job}/leader/election/instance"))?;
        self.nodes.iter().position(|n| n.id.as_str() == id)
    }

    /// Sets node `n`'s wall clock `skew` ms off true time (ahead when positive), as it
    /// starts.
    pub fn set_skew(&mut self, n: usize, skew: i64) {
        if let Some(node) = self.nodes.get_mut(n) {
            node.skew = skew;
            self.skew_seen = self.skew_seen.max(skew.unsigned_abs());
        }
    }

    /// Steps node `n`'s wall clock by `by_ms` (back if negative), as an administrator or a
    /// time daemon does. In the log only: the step shows in the trace through what the node
    /// does after it.
    pub fn step_clock(&mut self, n: usize, by_ms: i64) {
        let Some(node) = self.nodes.get_mut(n) else {
            return;
        };
        node.skew += by_ms;
        self.skew_seen = self.skew_seen.max(node.skew.unsigned_abs());
        if self.keep_log {
            let skew = node.skew;
            let (dir, abs) = if by_ms < 0 {
                ("back", by_ms.unsigned_abs())
            } else {
                ("forward", by_ms.unsigned_abs())
            };
            self.log.push(format!(
                "{:>10} node {n}: wall clock set {dir} by {abs} ms (now {skew:+} ms off true time)",
                timeline::clock(self.now)
            ));
        }
    }

    /// Whether a node exists in the store.
    pub fn exists(&self, path: &str) -> bool {
        self.store.contains(path)
    }

    /// Runs of a job, in start order.
    pub fn runs_of(&self, job: &str) -> Vec<&RunRecord> {
        self.runs.iter().filter(|r| r.job == job).collect()
    }

    /// Panics if two runs of the same (job, item) overlap in time (see
    /// [`crate::checkers::overlap`]).
    pub fn assert_no_overlap(&self) {
        let found = crate::checkers::overlap::check(&self.runs, &self.ignore_cancel);
        assert!(
            found.violations.is_empty(),
            "overlapping runs: {:#?}",
            found.violations
        );
    }

    /// Panics if some job's wake came later than its own decision wanted (see
    /// [`Cluster::wake_audit`]).
    pub fn assert_no_late_wakes(&self) {
        assert!(
            self.late_wakes.is_empty(),
            "late wakes (time, node, finding): {:#?}",
            self.late_wakes
        );
    }

    /// The trace hash so far.
    pub fn trace_hash(&self) -> u64 {
        self.trace.finish()
    }
}

/// The wall-clock time at virtual 0 of every cluster: fixed, so a seed's trace does not depend
/// on the day it runs.
pub fn wall_origin() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 6, 0, 0)
        .single()
        .unwrap_or_default()
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::CronExpr;
    use shardjob_core::registry::CreateMode;

    /// A cluster of `nodes` nodes without jobs, racing as `races` says.
    fn racing(races: Races, seed: u64, nodes: usize) -> Cluster {
        let mut c = Cluster::new();
        c.set_races(races, seed);
        for k in 0..nodes {
            c.add_node(&format!("10.0.0.{}@-@1", k + 1), &[])
                .expect("a node without jobs");
        }
        c
    }

    fn create(path: &str) -> RegistryOp {
        RegistryOp::Transact(vec![TxnOp::Create {
            path: NodePath::new(path).expect("a valid path"),
            data: Vec::new(),
            mode: CreateMode::Persistent,
        }])
    }

    /// The revision at which `path` was created.
    fn created(c: &Cluster, path: &str) -> u64 {
        let node = c.store.node(&NodePath::new(path).expect("a valid path"));
        node.expect("the request applied").stat.created.0
    }

    /// Node `n % 2` sends a creation of `/r{i}` at virtual ms `i` for 200 requests; everything
    /// arrives. Returns the cluster.
    fn two_senders(seed: u64) -> Cluster {
        let races = Races {
            spread: 30,
            ..Races::NONE
        };
        let mut c = racing(races, seed, 2);
        for i in 0..200u64 {
            c.now = i;
            c.send(
                (i % 2) as usize,
                RequestId(10_000 + i),
                create(&format!("/r{i}")),
            );
            c.arrive();
        }
        c.now = 1_000;
        c.arrive();
        c
    }

    #[test]
    fn one_sessions_requests_and_replies_keep_their_order_under_drawn_latency() {
        for seed in 0..5 {
            let c = two_senders(seed);
            for n in 0..2u64 {
                let mine: Vec<u64> = (0..200).filter(|i| i % 2 == n).collect();
                let applied: Vec<u64> = mine
                    .iter()
                    .map(|i| created(&c, &format!("/r{i}")))
                    .collect();
                assert!(
                    applied.windows(2).all(|w| w[0] < w[1]),
                    "seed {seed}: node {n} applied out of order"
                );
                let replies = &c.nodes[n as usize].replies;
                let ids: Vec<u64> = replies.iter().map(|r| r.1.0 - 10_000).collect();
                assert_eq!(ids, mine, "seed {seed}: node {n}'s replies out of order");
                assert!(replies.windows(2).all(|w| w[0].0 <= w[1].0));
                assert!(
                    replies
                        .iter()
                        .all(|r| matches!(r.2, RegistryReply::Transacted(_)))
                );
            }
        }
    }

    #[test]
    fn two_sessions_race_a_later_request_applies_first() {
        let overtaken = |c: &Cluster| {
            (0..199u64).any(|i| created(c, &format!("/r{}", i + 1)) < created(c, &format!("/r{i}")))
        };
        assert!(
            overtaken(&two_senders(1)),
            "no request of one node overtook the other's"
        );
        // Without travel, requests apply in the order they are sent.
        let mut c = racing(Races::NONE, 1, 2);
        for i in 0..20u64 {
            c.now = i;
            c.send(
                (i % 2) as usize,
                RequestId(10_000 + i),
                create(&format!("/r{i}")),
            );
        }
        assert!(
            (0..19u64)
                .all(|i| created(&c, &format!("/r{}", i + 1)) > created(&c, &format!("/r{i}")))
        );
    }

    #[test]
    fn a_lost_reply_s_request_applied_and_the_node_hears_a_timeout() {
        for races in [
            Races::NONE,
            Races {
                spread: 20,
                ..Races::NONE
            },
        ] {
            let mut c = racing(races, 4, 1);
            c.set_reply_loss(0, 1_000);
            c.now = 10;
            c.send(0, RequestId(10_000), create("/lost"));
            c.now = 1_000;
            c.arrive();
            assert!(c.exists("/lost"), "{races}: the request did not apply");
            let replies = &c.nodes[0].replies;
            assert_eq!(replies.len(), 1);
            assert_eq!(replies[0].0, 10 + c.request_timeout);
            assert_eq!(replies[0].2, RegistryReply::Failed(RegistryError::Timeout));
            c.calm();
            assert_eq!(c.nodes[0].reply_loss(), 0);
        }
    }

    #[test]
    fn a_drawn_loss_loses_some_replies_and_only_before_the_calm() {
        let races = Races {
            reply_loss: 300,
            ..Races::NONE
        };
        let mut c = racing(races, 2, 1);
        for i in 0..100u64 {
            c.send(0, RequestId(10_000 + i), create(&format!("/r{i}")));
        }
        let lost = |c: &Cluster| {
            c.nodes[0]
                .replies
                .iter()
                .filter(|r| r.2 == RegistryReply::Failed(RegistryError::Timeout))
                .count()
        };
        assert!((10..60).contains(&lost(&c)), "{} of 100 lost", lost(&c));
        assert!((0..100).all(|i| c.exists(&format!("/r{i}"))));
        c.calm();
        let before = lost(&c);
        for i in 100..200u64 {
            c.send(0, RequestId(10_000 + i), create(&format!("/r{i}")));
        }
        assert_eq!(lost(&c), before);
    }

    #[test]
    fn a_request_in_flight_when_its_node_is_cut_off_is_refused() {
        let races = Races {
            spread: 20,
            ..Races::NONE
        };
        let mut c = racing(races, 5, 1);
        // A leg of 20 at most, 60 in a spike: the request is still in flight at once.
        c.send(0, RequestId(10_000), create("/cut"));
        c.partition(0);
        c.now = 1_000;
        c.arrive();
        assert!(!c.exists("/cut"));
        assert_eq!(
            c.nodes[0].replies[0].2,
            RegistryReply::Failed(RegistryError::ConnectionLoss)
        );
    }

    /// The leader of a job that three nodes join at once.
    fn first_leader(races: Races, seed: u64) -> String {
        let mut c = Cluster::new();
        c.set_races(races, seed);
        let mut job = JobConfig::new("pay", 3);
        job.cron = CronExpr::parse("0/5 * * * * ?").ok();
        for k in 1..=3 {
            c.add_node(&format!("10.0.0.{k}@-@1"), std::slice::from_ref(&job))
                .expect("a node");
        }
        c.run_until(3_000);
        c.read("/pay/leader/election/instance").unwrap_or_default()
    }

    #[test]
    fn the_order_of_the_nodes_at_an_instant_varies_with_the_seed() {
        let fixed: BTreeSet<String> = (0..12).map(|s| first_leader(Races::NONE, s)).collect();
        assert_eq!(fixed.len(), 1, "index order: always the same leader");
        let shuffled = Races {
            shuffle: true,
            ..Races::NONE
        };
        let drawn: BTreeSet<String> = (0..12).map(|s| first_leader(shuffled, s)).collect();
        assert!(drawn.len() > 1, "the same leader for every seed: {drawn:?}");
        assert_eq!(first_leader(shuffled, 3), first_leader(shuffled, 3));
    }
}
