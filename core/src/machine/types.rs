//! The machine's inputs and outputs.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{JobConfig, KnownTypes};
use crate::instance::InstanceId;
use crate::registry::{RegistryError, RegistryOp, RequestId, Revision};

use super::record::RunKind;

/// A point in time as the driver sees it: a monotonic clock for timeouts and leases, and the
/// wall clock for cron. The machine never reads a clock itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Milliseconds of a monotonic clock (any origin; never goes back).
    pub mono: u64,
    /// The wall-clock time, UTC. May jump; only cron uses it.
    pub wall: DateTime<Utc>,
}

impl Now {
    /// The wall time in epoch milliseconds.
    pub fn wall_ms(&self) -> i64 {
        self.wall.timestamp_millis()
    }

    /// The monotonic time at which the wall clock will show `wall`, if it keeps its pace.
    pub fn mono_at(&self, wall_ms: i64) -> u64 {
        let delta = wall_ms.saturating_sub(self.wall_ms());
        if delta <= 0 {
            self.mono
        } else {
            self.mono.saturating_add(delta as u64)
        }
    }
}

/// Tunables of a [`Machine`](super::Machine). The defaults suit production.
#[derive(Debug, Clone)]
pub struct MachineOptions {
    /// This instance's id (`ip@-@pid` by default).
    pub instance_id: InstanceId,
    /// Share of the session timeout kept as a safety margin: the instance stops starting items
    /// and cancels running ones once `timeout × (1 − margin)` has passed since the last request
    /// that proved its session alive. Default 1/3.
    pub safety_margin: f64,
    /// How long the leader waits after a membership change before re-sharding, so that a burst
    /// of joins is one re-shard. Default 200 ms.
    pub reshard_debounce: Duration,
    /// How long the leader waits for running items that must move before it re-shards
    /// anyway (their running markers keep the new owner from starting them before the old run
    /// ends). No instance starts a new run of the job while the leader waits, so the wait
    /// normally ends with the longest run in progress. Default 30 s.
    pub reshard_wait: Duration,
    /// How long an instance leaves a dead instance's orphaned items to the instance whose
    /// share they are before claiming them itself. Default 2 s.
    pub failover_takeover_delay: Duration,
    /// How late a fire may start and still count as on time when `misfire` is off. Default 1 s.
    pub misfire_tolerance: Duration,
    /// First retry delay after a transient registry error (doubles up to 16×). Default 250 ms.
    pub retry_backoff: Duration,
    /// How long a graceful shutdown waits for running items before cancelling them. Default
    /// 30 s.
    pub shutdown_grace: Duration,
    /// How long the machine waits for the watch to show its own committed writes before it
    /// reloads the tree. Default 10 s.
    pub sync_timeout: Duration,
    /// How long before a scheduled fire its items are claimed. The claim (one registry round
    /// trip, more when many jobs fire at the same instant) is then done when the fire comes, and
    /// the job body starts on time; an item claimed ahead shows as running meanwhile, and a claim
    /// that cannot start (session in doubt, shutdown) is released without counting as a run.
    /// Zero claims at the fire. Default 250 ms.
    pub claim_ahead: Duration,
    /// The most items one transaction of the machine may touch (claims, adoptions,
    /// completions, re-sharding, housekeeping), for registries that limit the size of a
    /// transaction (etcd's `--max-txn-ops`). Larger work is split into several transactions,
    /// each safe on its own; the level-triggered decisions take the rest after the watch shows
    /// the previous one. `None` (the default): no limit, one transaction per decision.
    ///
    /// Whatever this says, a transaction the registry refuses as
    /// [`RegistryError::TooLarge`] halves the job's limit (down to one item) and is tried
    /// again at once, so a limit is found without configuration; see
    /// [`MachineOptions::fit_txn_ops`] to derive this one from a registry's operation limit.
    pub max_txn_items: Option<usize>,
    /// Announce runs claimed ahead with [`Command::Prepare`] as soon as the claim succeeds,
    /// so that the driver can set them up before the fire and the start itself costs little
    /// when many jobs fire at the same instant. Off (the default): a run claimed ahead shows
    /// only at its start.
    pub prepare_ahead: bool,
    /// Evaluate every job now and then (a tenth of them each second the machine is awake),
    /// whether or not it is due: a net under the machine's own wake times. On (the default)
    /// in production. The simulator turns it off in some seeds, because the net also hides a
    /// wake that is missing from the liveness checker.
    pub safety_sweep: bool,
    /// Extra names accepted in job configurations (custom strategies).
    pub known_types: KnownTypes,
    /// Planted bugs switched on (simulator self-test only).
    #[cfg(feature = "plant-bugs")]
    pub plants: std::collections::BTreeSet<super::plant::Plant>,
}

impl MachineOptions {
    /// Options with every default for the given instance.
    pub fn new(instance_id: InstanceId) -> Self {
        Self {
            instance_id,
            safety_margin: 1.0 / 3.0,
            reshard_debounce: Duration::from_millis(200),
            reshard_wait: Duration::from_secs(30),
            failover_takeover_delay: Duration::from_secs(2),
            misfire_tolerance: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(250),
            shutdown_grace: Duration::from_secs(30),
            sync_timeout: Duration::from_secs(10),
            claim_ahead: Duration::from_millis(250),
            max_txn_items: None,
            prepare_ahead: false,
            safety_sweep: true,
            known_types: KnownTypes::default(),
            #[cfg(feature = "plant-bugs")]
            plants: std::collections::BTreeSet::new(),
        }
    }
}

impl MachineOptions {
    /// The most registry operations one item of a machine transaction costs, counted as etcd
    /// counts them (compares and writes separately, with the tree emulation's extra compares):
    /// a claim costs 6 compares and 2 writes per item, a failover claim 6 and 3, a completion 5
    /// and 3, a new item 4 and 3; a removed item counts as two items.
    pub const OPS_PER_ITEM: usize = 8;

    /// The operations of a transaction that do not depend on its items (session, leader and
    /// flag checks), with a margin.
    pub const OPS_PER_TXN: usize = 8;

    /// Sets [`MachineOptions::max_txn_items`] for a registry that allows at most `max_ops`
    /// operations (or compares) per transaction, such as
    /// [`Registry::max_txn_ops`](crate::registry::Registry::max_txn_ops): at least one item.
    pub fn fit_txn_ops(&mut self, max_ops: usize) {
        let items = max_ops.saturating_sub(Self::OPS_PER_TXN) / Self::OPS_PER_ITEM;
        self.max_txn_items = Some(items.max(1));
    }
}

/// A job to host: its local configuration and its type as written in the job root node.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The local configuration. The registry's copy wins unless it is missing or
    /// `overwrite` is set.
    pub config: JobConfig,
    /// The job type or class name stored in `/{job}` (ElasticJob refuses to start a job whose
    /// stored type differs; so does shardjob).
    pub job_type: String,
}

/// Identifies one execution the machine asked the driver to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExecutionId(pub u64);

/// One item of an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRun {
    /// The item.
    pub item: u32,
    /// Its `shardingItemParameters` entry, if any.
    pub parameter: Option<String>,
    /// The fencing token: the registry revision at which this run's `running` marker was
    /// created. It grows with every run of the item; downstream systems can refuse writes that
    /// carry a smaller token than one already seen.
    pub fencing_token: Revision,
}

/// Items to start: one job, one fire, one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    /// Its id, to report back with [`Machine::handle_execution_finished`](super::Machine).
    pub id: ExecutionId,
    /// The job.
    pub job_name: String,
    /// ElasticJob's task id: `{job}@-@{items}@-@READY@-@{instance id}`.
    pub task_id: String,
    /// `shardingTotalCount`.
    pub sharding_total_count: u32,
    /// `jobParameter`, or the trigger's parameter for a trigger that carried one.
    pub job_parameter: String,
    /// The scheduled fire time (the trigger time for a trigger).
    pub fire_time: DateTime<Utc>,
    /// Why it runs.
    pub kind: RunKind,
    /// The items, ascending.
    pub items: Vec<ItemRun>,
}

/// How one item's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemOutcome {
    /// The job body returned success.
    Succeeded,
    /// The job body failed, with a message.
    Failed(String),
    /// The run was cancelled before it finished.
    Cancelled,
}

/// Why the machine asks for running items to be cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// The session could not be confirmed within the safety margin: another instance may take
    /// the items over soon.
    SessionInDoubt,
    /// The session is gone; the items may already run elsewhere.
    SessionLost,
    /// A graceful shutdown's grace period ran out.
    Shutdown,
    /// The job was removed from this instance.
    JobRemoved,
    /// An operator shut the job down on this instance (deleted its instance node while its
    /// session lived): the items are handed over at once.
    OperatorShutdown,
}

/// What the machine asks the driver to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run a registry request and report its reply with the id.
    Registry {
        /// Identifies the reply.
        id: RequestId,
        /// The request.
        op: RegistryOp,
    },
    /// Start running items.
    Start(Execution),
    /// Start the run announced with [`Command::Prepare`] under this id, as announced (only
    /// with [`MachineOptions::prepare_ahead`]).
    StartPrepared(ExecutionId),
    /// A run claimed ahead of its fire (only with [`MachineOptions::prepare_ahead`]). The
    /// driver may set it up now (tasks, contexts) but must run nothing of it before
    /// [`Command::StartPrepared`] with its id; [`Command::Discard`] says it never will start.
    Prepare(Execution),
    /// A run announced with [`Command::Prepare`] will not start: drop what was set up for it.
    /// It is not to be reported finished.
    Discard(ExecutionId),
    /// Signal cancellation to a running execution; report it finished when it stops.
    Cancel {
        /// The execution.
        id: ExecutionId,
        /// Why.
        reason: CancelReason,
    },
    /// Close the registry session (the end of a graceful shutdown).
    CloseSession,
    /// Something worth logging or tracing.
    Event(MachineEvent),
}

/// Things that happened, for logs, tracing and tests.
#[derive(Debug, Clone, PartialEq)]
pub enum MachineEvent {
    /// The job is registered and runs on this instance.
    JobActive {
        /// The job.
        job: String,
    },
    /// The registry's configuration of a job cannot be used; the job keeps its last good
    /// configuration, or does not run if it has none. Other jobs are not affected.
    ConfigInvalid {
        /// The job.
        job: String,
        /// What is wrong.
        error: String,
    },
    /// The job root holds another job type; the job does not run here.
    JobTypeConflict {
        /// The job.
        job: String,
        /// The type in the registry.
        registry: String,
        /// The local type.
        local: String,
    },
    /// This instance became the job's leader.
    BecameLeader {
        /// The job.
        job: String,
    },
    /// The leader wrote a new sharding plan.
    Resharded {
        /// The job.
        job: String,
        /// The new owners, item by item.
        owners: BTreeMap<u32, InstanceId>,
        /// Items that moved while a run of theirs lasted (after the wait deadline, or because
        /// their owner was gone): the new owner starts them once that run ends.
        moved_running: Vec<u32>,
    },
    /// A re-shard too large for one transaction is being written in parts: `written` of its
    /// `total` items are written (reported every
    /// [`RESHARD_PROGRESS_STEP`](super::RESHARD_PROGRESS_STEP) items, never for the last
    /// part, which [`MachineEvent::Resharded`] reports). `total` is what the re-shard has to
    /// write as the leader last worked it out; it changes if the plan does meanwhile.
    ReshardProgress {
        /// The job.
        job: String,
        /// Items moved, created or removed by the parts written so far.
        written: usize,
        /// Items written so far plus those still to write.
        total: usize,
    },
    /// The job's sharding strategy gave an assignment that breaks its contract (an item given
    /// to no one, to two instances, or to one that is not a candidate, or an item out of
    /// range): the leader keeps the plan as it is. Reported once, until the candidates, the
    /// configuration or the items change.
    PlanRefused {
        /// The job.
        job: String,
        /// The strategy's type name.
        strategy: String,
        /// What is wrong with the assignment.
        problem: String,
    },
    /// The registry refused a transaction of the job as too large
    /// ([`RegistryError::TooLarge`]): from now on the job's transactions touch at most `items`
    /// items each, and the refused work is tried again at once in smaller parts.
    TxnSplit {
        /// The job.
        job: String,
        /// The new most items per transaction.
        items: usize,
    },
    /// A node the machine reads holds something it cannot understand; it is treated as absent.
    CorruptNode {
        /// The node.
        path: String,
        /// What is wrong.
        error: String,
    },
    /// A registry request failed.
    RegistryFailed {
        /// The job, if the request was for one.
        job: Option<String>,
        /// What the request was for.
        purpose: &'static str,
        /// The error.
        error: RegistryError,
    },
    /// The end of an execution was recorded: its markers are gone and the fire counts as done.
    RunRecorded {
        /// The job.
        job: String,
        /// The items.
        items: Vec<u32>,
    },
    /// The end of an execution, or of one part of it, could not be recorded: the session was
    /// lost (the fire will be failed over if failover is on), or the registry refused it
    /// (often because an earlier attempt applied and only its reply was lost).
    CompletionLost {
        /// The job.
        job: String,
        /// The items.
        items: Vec<u32>,
    },
    /// The wall clock stepped against the monotonic one (a correction, a suspended host that
    /// resumed): every job's next fire is worked out again, and runs claimed ahead start by
    /// the new clock.
    ClockStepped {
        /// How far it stepped, in milliseconds (negative: back).
        by_ms: i64,
    },
    /// The session could not be confirmed in time: items were cancelled and none start until
    /// it is confirmed again.
    SessionInDoubt,
    /// The session ended; the instance re-registers with a new one.
    SessionLost,
    /// The instance leaves a job whose registry subtree it has not loaded (a load that
    /// keeps failing, or is still in flight) without deleting anything: a job never loaded
    /// has written nothing, and past a shutdown's grace the closed session takes this
    /// instance's nodes with it. [`MachineEvent::JobLeft`] follows.
    LeftUnloaded {
        /// The job.
        job: String,
        /// Why, for the log.
        reason: String,
    },
    /// An operator shut the job down on this instance: its instance node was deleted while
    /// its session lived (a probe sent after the deletion was seen confirmed the session, so
    /// the deletion was not the session's expiry). The job's running items are cancelled and
    /// recorded, so that their items move at once, and the instance leaves the job
    /// ([`MachineEvent::JobLeft`] follows); it runs nothing more of it until the job is added
    /// again (in `shardjob run`, until the process restarts), as in ElasticJob.
    OperatorShutdown {
        /// The job.
        job: String,
    },
    /// The instance left the job (removed, or shut down).
    JobLeft {
        /// The job.
        job: String,
    },
}

/// Errors of the operator commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    /// No such job on this instance.
    #[error("job {0:?} is not hosted by this instance")]
    UnknownJob(String),
    /// A job of that name is already hosted.
    #[error("job {0:?} is already hosted by this instance")]
    DuplicateJob(String),
    /// A job of that name is being removed from this instance: it can be added again once it
    /// has left ([`MachineEvent::JobLeft`]).
    #[error("job {0:?} is still leaving this instance; add it again once it has left")]
    JobLeaving(String),
    /// The job's local configuration is invalid.
    #[error("job {job:?} has an invalid configuration: {error}")]
    InvalidConfig {
        /// The job.
        job: String,
        /// What is wrong.
        error: String,
    },
    /// The instance is shutting down.
    #[error("the instance is shutting down")]
    ShuttingDown,
    /// A custom sharding strategy cannot be registered under its name.
    #[error("sharding strategy {name:?} cannot be registered: {why}")]
    StrategyName {
        /// The strategy's name.
        name: String,
        /// Why not.
        why: &'static str,
    },
}

/// A job whose wake comes later than its own decision wants (see [`Machine::late_wakes`]):
/// a bug of the machine's, which would run the job's items late, or never.
///
/// [`Machine::late_wakes`]: super::Machine::late_wakes
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateWake {
    /// The job.
    pub job: String,
    /// The job's wake (monotonic ms), if any.
    pub wake: Option<u64>,
    /// When its decision wants it evaluated (monotonic ms; now if it would claim at once).
    pub wanted: u64,
}

/// Where a [`Machine::late_wakes`] audit left off, so that the next one can skip the jobs
/// that did not change since. Start with the default; keep one per machine.
///
/// [`Machine::late_wakes`]: super::Machine::late_wakes
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditMark {
    /// `Machine::changes` at the last audit.
    pub(super) changes: u64,
    /// The wall clock's offset at the machine's last input before the last audit.
    pub(super) clock: Option<i64>,
    /// Jobs the last audit passed over while something was under way for them.
    pub(super) recheck: std::collections::BTreeSet<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry's operation limit leaves, after a transaction's own operations, room for
    /// whole items only; a limit too small for one still allows one.
    #[test]
    fn fit_txn_ops_counts_the_items_a_limit_has_room_for() {
        let me = crate::InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut opts = MachineOptions::new(me);
        opts.fit_txn_ops(64);
        assert_eq!(opts.max_txn_items, Some(7));
        opts.fit_txn_ops(MachineOptions::OPS_PER_TXN + 2 * MachineOptions::OPS_PER_ITEM - 1);
        assert_eq!(opts.max_txn_items, Some(1));
        opts.fit_txn_ops(0);
        assert_eq!(opts.max_txn_items, Some(1));
    }
}
