//! What the machine reports: events for logs, tracing, metrics and tests.

use std::collections::BTreeMap;

use crate::instance::InstanceId;
use crate::registry::RegistryError;

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
    /// The registry's configuration of a job, now in force, sets `maxTimeDiffSeconds`
    /// (ElasticJob's check of an instance's clock against the registry's before each run),
    /// which shardjob does not honour: the job runs here without that check. A job this
    /// instance is given with the key set is refused instead ([`Machine::add_job`](super::Machine::add_job)); one that
    /// ElasticJob (or its console) wrote into the registry is run, so that a job shared with
    /// ElasticJob keeps running here, and said so once per configuration.
    UnhonouredTimeDiff {
        /// The job.
        job: String,
        /// The value set, in seconds.
        seconds: i32,
    },
    /// This instance's wall clock is off the registry's by more than the job allows, so the
    /// job's runs are held here: while the job is shared with ElasticJob instances, more than
    /// a second (a fire run early or late here may be the one an ElasticJob instance runs at
    /// its time); when its configuration sets `maxTimeDiffSeconds`, more than that (as
    /// ElasticJob refuses to run). Reported once per hold; the fires missed meanwhile are
    /// owed as misfires. Set the host's clock right (NTP).
    RegistryClockOff {
        /// The job.
        job: String,
        /// How far ahead of the registry's this clock is at least (ms; negative: behind).
        off_ms: i64,
        /// The most the job allows (ms).
        limit_ms: i64,
    },
    /// A hold of [`MachineEvent::RegistryClockOff`] ended: the clock is within the job's
    /// limit again.
    RegistryClockBack {
        /// The job.
        job: String,
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
    /// The items of the job this instance owns in the sharding plan changed (reported once the
    /// plan gives an item to anyone; ascending).
    ItemsOwned {
        /// The job.
        job: String,
        /// The items.
        items: Vec<u32>,
    },
    /// The job's leader set or cleared `leader/sharding/necessary`: while it is set, a re-shard
    /// is pending, and streaming jobs stop fetching so that their items can move.
    ReshardingPending {
        /// The job.
        job: String,
        /// Whether the flag is set.
        pending: bool,
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
    /// The leader removed an item's `running` marker that no session held and whose owner
    /// (the marker's value) had been gone for a session timeout: a persistent marker left by a
    /// killed ElasticJob instance with `failover` on, or one written by hand. It kept the item
    /// from running. `settled` says what became of the fire the marker stood for.
    StaleRunningCleared {
        /// The job.
        job: String,
        /// The item.
        item: u32,
        /// The marker's path.
        path: String,
        /// The marker's value (its owner, as written).
        value: String,
        /// What became of the marker's fire.
        settled: StaleSettle,
    },
    /// The leader removed a node ElasticJob left in a job it no longer shares: the
    /// `failovering` mark of a failover its runner never finished, or a failover queued under
    /// `leader/failover/items` that no ElasticJob instance claimed (`docs/migration-design.md`
    /// 3.8). The fire it stood for is not run again (nothing tells which it was), unless the
    /// item's execution record names it: then shardjob's own failover runs it.
    JavaLeftOverCleared {
        /// The job.
        job: String,
        /// The node's path.
        path: String,
        /// The node's value (the ElasticJob instance that ran the failover, or empty).
        value: String,
    },
    /// An ElasticJob instance leads the job and has kept `leader/sharding/necessary` set for
    /// [`MachineOptions::reshard_wait`](super::MachineOptions::reshard_wait): new runs of the
    /// job stay held here until it re-shards, as ElasticJob's own instances wait (the fire gate
    /// of a job shared with ElasticJob, `docs/migration-design.md` 3.4). Reported once per
    /// hold.
    ReshardStalled {
        /// The job.
        job: String,
        /// The leader's instance id, as its node holds it.
        leader: String,
        /// How long the hold has lasted so far (ms).
        waited_ms: u64,
    },
    /// A job shared with ElasticJob (or that was): a persistent `running` marker of a shardjob
    /// run left behind by its session was removed, by its own instance (an earlier session,
    /// whose runs were cancelled before it expired) or, while the job is mixed and ElasticJob's
    /// failover did not take it within a session timeout, by another (its instance is gone).
    /// The item's recorded run is then an orphan: failed over if the job is no longer mixed,
    /// settled if it is ([`MachineEvent::OrphansSettled`]). `docs/migration-design.md` 3.4.
    LeftMarkerRemoved {
        /// The job.
        job: String,
        /// The item.
        item: u32,
        /// The marker's value: the instance whose run it stood for.
        value: String,
    },
    /// A job shared with ElasticJob, with failover on: runs whose `running` marker is gone (their
    /// instance's session ended) are ElasticJob's failover's, which shardjob leaves to it
    /// (`docs/migration-design.md` 3.5). Their fires count as done here: run by ElasticJob's
    /// failover, or given up where it could not fail them over.
    OrphansSettled {
        /// The job.
        job: String,
        /// The items, ascending.
        items: Vec<u32>,
    },
    /// A job led by ElasticJob: its leader's plan has given items to instances that are gone
    /// (or to none), with no re-sharding flag up, for a session timeout (its sharding read
    /// the instances before it waited for running items, and the flag an instance's leave set
    /// meanwhile went with it: ElasticJob re-shards only on a change and at a fire, so the
    /// items would wait for the next change). This instance set the flag; the ElasticJob
    /// leader re-shards at its next fire (`docs/migration-design.md` 3.7).
    GoneOwnersFlagged {
        /// The job.
        job: String,
        /// The items, ascending, with the owner the plan names (empty: none).
        items: Vec<(u32, String)>,
    },
    /// The leader found an `instances/` node that no session holds (a persistent node: written
    /// by hand or by a tool, never by a live instance): it is never given items. Reported once
    /// per leadership; `deleting` when it is plainly garbage (its id is not `{ip}@-@{pid}`, or
    /// its value is not an instance's YAML) and the leader deletes it. While an ElasticJob
    /// instance leads (which deletes none, and whose every sharding throws on such a node), the
    /// first shardjob candidate deletes the garbage ones and reports each once deleted.
    UnboundInstance {
        /// The job.
        job: String,
        /// The node's path.
        path: String,
        /// The node's value.
        value: String,
        /// Whether the leader deletes it.
        deleting: bool,
    },
}

/// What became of the fire a stale `running` marker stood for
/// ([`MachineEvent::StaleRunningCleared`]): the latest fire at or before the moment the
/// leader first saw the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleSettle {
    /// `failover` is on: the fire (epoch ms) is failed over, run once by a live instance.
    FailedOver {
        /// The fire.
        fire: i64,
    },
    /// `failover` is off: the fire (epoch ms) is given up, as ElasticJob gives up the fire of
    /// a dead instance.
    GivenUp {
        /// The fire.
        fire: i64,
    },
    /// Only the marker went: the item's record shows its fire done already, names a run that
    /// failover takes (if on), or the job has no fire to attribute.
    Removed,
}
