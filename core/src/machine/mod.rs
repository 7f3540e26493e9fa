//! The per-instance state machine: election, re-sharding, fenced execution, failover, misfire,
//! triggers and graceful leave, for every job an instance hosts.
//!
//! [`Machine`] is sans-IO in the manner of quinn-proto: it never performs IO, reads no clock and
//! starts no thread. The driver (the tokio runtime, or the simulator with virtual time) feeds it
//! and carries out what it asks:
//!
//! 1. Create it with [`Machine::new`], add jobs with [`Machine::add_job`].
//! 2. Open a registry session and **one** recursive watch on `/` (the namespace root) for all
//!    jobs. Tell the machine the session is there with
//!    `handle_registry_event(RegistryEvent::Session(SessionEvent::Connected(info)), now)`, then
//!    pass every event of the watch to [`Machine::handle_registry_event`] in order.
//! 3. After every `handle_*` call, drain [`Machine::poll_command`] until `None` and carry each
//!    command out: run [`Command::Registry`] requests (concurrently is fine) and report each
//!    reply with [`Machine::handle_registry_reply`]; start [`Command::Start`] executions and
//!    report their end with [`Machine::handle_execution_finished`]; signal
//!    [`Command::Cancel`]; close the session on [`Command::CloseSession`]. With
//!    [`MachineOptions::prepare_ahead`], a run claimed ahead of its fire comes first as
//!    [`Command::Prepare`] (set it up, run nothing), then as [`Command::StartPrepared`] with
//!    its id at the fire, or [`Command::Discard`] if it never starts.
//! 4. Call [`Machine::handle_timeout`] when the monotonic clock reaches
//!    [`Machine::poll_timeout`] (ask again after every call; it changes). Starts are handed out
//!    a bounded number per call: while [`Machine::next_start`] is still due, carry out the
//!    commands and call again.
//! 5. [`Machine::shutdown`] leaves gracefully; the machine is done when
//!    [`Machine::is_stopped`].
//!
//! # How it works
//!
//! The machine keeps a cache of each hosted job's subtree, loaded once per session and kept
//! current by the watch; it never polls. Decisions are level-triggered: after every input it
//! compares what the cache says with what should be and issues at most one state-changing
//! transaction per job at a time, then waits for the watch to show the result.
//!
//! - **Membership**: ephemeral `instances/{id}`; `servers/{ip}` is created ENABLED only when
//!   missing, so an operator's DISABLED survives restarts, and an ENABLED server node whose
//!   last instance leaves is deleted, so nodes do not pile up.
//! - **Election**: create-if-absent of the ephemeral `leader/election/instance`, by every
//!   eligible instance as soon as it is missing; no latch, nothing waits.
//! - **Re-sharding**: the leader compares the plan with what the strategy gives for the live,
//!   enabled instances (debounced) and writes the difference in one transaction that checks it
//!   is still leader and its session. Items that must move while a live owner runs them wait
//!   for the run to end, up to [`MachineOptions::reshard_wait`]
//!   (`leader/sharding/necessary` marks the wait, and no instance starts a new run of the job
//!   meanwhile, so the runs drain); then they move anyway, since their
//!   `running` marker keeps the new owner from starting before the old run ends. Items of
//!   owners that are gone move at once. Items beyond a reduced total are deleted with their
//!   state once their runs end (their `running` markers keep a later run of the same number
//!   from overlapping, should the total grow back meanwhile), holding nothing meanwhile.
//! - **Fenced execution**: at a fire, an instance claims all its due items of a job in one
//!   transaction: its session, ownership of every item, and the creation of session-bound
//!   `running` markers; the markers' creation revision is the items' fencing token. The end
//!   of the run is recorded in one more transaction (markers removed, execution record
//!   updated). Two transactions per job per fire, whatever the item count. If the session
//!   cannot be confirmed within the safety margin, nothing starts and running items are
//!   cancelled, before the registry can expire the session and let others take over.
//! - **Transaction limits**: a registry may refuse large transactions (etcd's
//!   `--max-txn-ops`, 128 compares by default). With [`MachineOptions::max_txn_items`] set, or
//!   once the registry refused one as [`RegistryError::TooLarge`] (the job's limit is then
//!   halved and the work tried again at once), claims, adoptions, completions, re-shards and
//!   housekeeping touch at most that many items per transaction, and the level-triggered
//!   decisions take the rest after the watch shows each part. Every part is fenced as a whole
//!   transaction is: claims take the items whose last finished fire is oldest first, with one
//!   execution per part; a completion part records only its own items; a re-shard part moves
//!   items independently (an item whose new owner is written can no longer be claimed by the
//!   old one, whose claims check the owner) and only the last part clears
//!   `leader/sharding/necessary`; a trigger keeps one fire time for all its parts. Setup,
//!   election and leave do not grow with the item count and are never split.
//! - **Execution record** (`sharding/{item}/execution`, see [`record`]): the last finished
//!   fire and the run in progress. A fire is due when it is later than the last finished one;
//!   missed fires collapse into one run right after (misfire), or are dropped when `misfire`
//!   is off and they are later than [`MachineOptions::misfire_tolerance`]. Fires missed
//!   while the job had no instance at all are not due (next section).
//! - **Failover**: a recorded run whose `running` marker vanished died with its session. With
//!   `failover` on, every live instance computes the same split of such orphans and claims its
//!   share at once, all of them in one transaction; unclaimed leftovers are taken by anyone
//!   after [`MachineOptions::failover_takeover_delay`]. A fire already finished is never run
//!   again.
//! - **Triggers**: `trigger/{id}` is consumed and queued; the run starts when the instance's
//!   items of the job are not running.
//! - **Session loss is not shutdown**: on expiry, executions are cancelled and the instance
//!   registers again with the new session.
//! - **Graceful leave**: [`Machine::shutdown`] and [`Machine::remove_job`] let runs finish (or
//!   cancel them after a grace period), record them, and delete the instance and leader nodes
//!   at once so others take over without waiting for a timeout.
//! - **Time**: every wait is a monotonic deadline; a fire's is worked out from the wall clock.
//!   A machine that hosts jobs asks to be woken at least every 10 s, so that it notices a wall
//!   clock that stepped (by more than half a second) even when nothing else happens; it then
//!   works out every job's next fire again and moves the runs claimed ahead to their fire by
//!   the new clock ([`MachineEvent::ClockStepped`]). With [`MachineOptions::safety_sweep`]
//!   (the default), every job is also evaluated now and then, due or not.
//!
//! # Start-up after downtime
//!
//! ElasticJob's scheduler starts afresh: a cluster that comes back after downtime does not
//! run the fires it missed meanwhile (a nightly job missed at 02:30 does not run at 15:00 when
//! the cluster is deployed). shardjob does the same, by one rule every instance applies to the
//! same registry data, so it does not matter which instance owns an item, or when it moves:
//!
//! - **A start**: a registration that finds the `instances` node without any instance node
//!   below it (not even one of a dead session that the registry still shows) starts the job's
//!   cluster. It writes its wall clock `S` into the `instances` node's data
//!   ([`record::StartRecord`]) in the same transaction that creates its instance node, so
//!   there is no moment between the two for a crash. The transaction proves the directory
//!   was empty: it checks the `instances` node's version as the instance saw it beside an
//!   empty directory, and every registration into a directory that is not empty checks that
//!   one instance node it saw there still exists (a create into an empty directory must
//!   therefore be a start, which changes that version). The write comes after the instance
//!   node's creation, so an instance that has seen only a part of the transaction sees the
//!   old version or the new instance, never an empty directory with the new version. Of
//!   several instances that start at once, one starts the cluster; the others' checks fail
//!   and they register again, into a directory that is no longer empty. A job's very first
//!   registration (no `instances` node yet) records no start: no item has a record then, and
//!   items are created with a record of their creation time.
//! - **The rule**: a fire earlier than `S - catch-up` is never due; `catch-up` is the job's
//!   `shardjob.misfire.catchup.seconds` prop ([`crate::config::MISFIRE_CATCHUP_PROP`], 0 by
//!   default). So by default no fire from before the start runs; with a catch-up bound, the
//!   fires at most that much before the start collapse into one MISFIRE run of the latest
//!   (whatever `misfire` says). An item's record is not touched by the rule: whichever
//!   instance owns the item later reads the same `S` and gives up the same fires.
//! - **What counts as downtime**: any time the job has no registered instance, whatever the
//!   cause: every process stopped, or crashed and their sessions expired, or the only
//!   instance's session expired (as in ElasticJob, whose scheduler pauses while the session is
//!   lost and does not run the fires missed meanwhile). While any instance is registered, even
//!   one whose process died and whose session has not expired yet, the cluster is up: missed
//!   fires (an owner crashed, an item moved) are caught up as misfires, as before. A run cut
//!   short by the downtime had started: with `failover` on it is failed over at the start
//!   like any orphan.

#[cfg(feature = "plant-bugs")]
pub mod plant;
pub mod record;
mod types;
mod view;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{JobConfig, Strictness};
use crate::instance::{DELIMITER, InstanceId};
use crate::layout::{ItemLeaf, JobNode, JobPaths};
use crate::registry::{
    Check, CreateMode, ErrorClass, NodePath, RegistryError, RegistryEvent, RegistryOp,
    RegistryReply, RequestId, Revision, SessionEvent, SessionInfo, TxnOp, TxnOpResult, Version,
};
use crate::sharding::{Assignment, BuiltinStrategy, ShardingStrategy, registry_order};

use record::{ItemRecord, RunKind, RunRecord, StartRecord};
pub use types::{
    AuditMark, CancelReason, Command, Execution, ExecutionId, ItemOutcome, ItemRun, JobSpec,
    LateWake, MachineError, MachineEvent, MachineOptions, Now,
};
use view::{Cache, Dir, JobView};

/// Whether a planted bug is switched on; always `false` without the `plant-bugs` feature.
#[cfg(feature = "plant-bugs")]
macro_rules! planted {
    ($opts:expr, $bug:ident) => {
        $opts.plants.contains(&plant::Plant::$bug)
    };
}
#[cfg(not(feature = "plant-bugs"))]
macro_rules! planted {
    ($opts:expr, $bug:ident) => {
        false
    };
}

/// How often every job is evaluated on a timeout, whether due or not (ms).
const SWEEP_MS: u64 = 10_000;
/// How far (ms) the wall clock may drift against the monotonic one before the machine treats
/// it as a step and works out every fire again. Wake times of fires are monotonic times taken
/// from the wall clock; after a step forward they would come late by the step.
const CLOCK_STEP_MS: i64 = 500;
/// A machine that hosts jobs wakes at least this often (ms), so that it notices a clock step
/// even when nothing else happens (a host suspended and resumed: the monotonic clock stood
/// still meanwhile, the wall clock did not).
const CLOCK_WATCH_MS: u64 = 10_000;
/// The most jobs the rolling sweep evaluates in one timeout; the rest of its slice follows
/// a millisecond later, so that ten thousand jobs never hold the machine for long.
const SWEEP_CHUNK: usize = 64;
/// The most runs claimed ahead handed out (or given back) in one timeout: the rest stay due,
/// so a driver can carry out the first starts while the machine checks the next ones (see
/// [`Machine::next_start`]).
const START_CHUNK: usize = 32;
/// How much older than the claim's lead the last registry reply may be when a run claimed
/// ahead starts.
const FRESH_VIEW_MS: u64 = 500;

/// Most fires looked at when catching up missed fires of one item in one evaluation.
const MAX_CATCH_UP_STEPS: usize = 100_000;

/// A re-shard written in parts reports its progress ([`MachineEvent::ReshardProgress`]) each
/// time this many more of its items are written: a job of the documented maximum of 100,000
/// items on a registry that limits transactions takes thousands of parts.
pub const RESHARD_PROGRESS_STEP: usize = 10_000;

/// The state machine of one shardjob instance. See the [module documentation](self).
#[derive(Debug)]
pub struct Machine {
    opts: MachineOptions,
    strategies: BTreeMap<String, Arc<dyn ShardingStrategy>>,
    session: Session,
    epoch: u64,
    /// Monotonic send time of the latest request whose success proved the session alive.
    confirmed: Option<u64>,
    in_doubt: bool,
    probe: Option<RequestId>,
    last_probe: u64,
    /// Boxed: a map node holds room for eleven entries, and a `Job` is large.
    jobs: BTreeMap<String, Box<Job>>,
    /// Every job's `wake`, ordered, so the next timeout is found without visiting each job.
    wakes: BTreeSet<(u64, String)>,
    /// Jobs to evaluate again once a probe confirms the session.
    probe_waiters: BTreeSet<String>,
    /// The number of the latest probe of the current session that succeeded (0: none).
    probe_ok: u64,
    /// Executions whose completion is retried at a time (entries may be stale: checked).
    retries: BTreeSet<(u64, ExecutionId)>,
    /// Executions claimed ahead, by the monotonic time of their fire (entries may be stale).
    starts: BTreeSet<(u64, ExecutionId)>,
    pending: BTreeMap<RequestId, Pending>,
    executions: BTreeMap<ExecutionId, Exec>,
    out: VecDeque<Command>,
    next_request: u64,
    next_execution: u64,
    shutdown: Option<u64>,
    stopped: bool,
    last_sweep: u64,
    /// The wall clock's lead on the monotonic one (ms) when it last stepped, or at the first
    /// timeout.
    clock_offset: Option<i64>,
    /// The wall clock's offset at the last input, step or not (for [`Machine::late_wakes`]).
    clock_last: Option<i64>,
    /// Counts the changes to jobs' views and the decisions on them; [`Job::changed`] holds
    /// the count at each job's last one (so that an audit can skip the jobs it saw as they are).
    changes: u64,
    /// When the machine last compared the clocks (monotonic ms).
    clock_seen: u64,
    /// The last job the rolling sweep evaluated.
    sweep_cursor: Option<String>,
    /// Jobs of the current sweep slice not evaluated yet.
    sweep_left: usize,
    /// When the rest of the slice is evaluated (set while `sweep_left > 0`).
    sweep_at: Option<u64>,
    /// Grows whenever a job's view of its disabled items or servers may have changed: on
    /// every applied event that [`view::bears_on_disabled`], and on every load from scratch.
    /// A start skips the disabled check when this has not moved since its claim.
    disables: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Session {
    None,
    Live(SessionInfo),
    Suspended(SessionInfo),
}

#[derive(Debug)]
struct Pending {
    epoch: u64,
    sent: u64,
    job: Option<String>,
    purpose: Purpose,
}

#[derive(Debug)]
enum Purpose {
    Load,
    Setup,
    Elect,
    Abdicate,
    Reshard {
        owners: BTreeMap<u32, InstanceId>,
        moved_running: Vec<u32>,
        /// Whether this transaction completes the plan (a plan too large for one transaction
        /// is written in parts; only the last one clears `leader/sharding/necessary`).
        last: bool,
        /// Items it touches (a removed item counts twice), for halving on `TooLarge`.
        units: usize,
        /// Items it moves, creates or removes.
        items: usize,
        /// Items the re-shard still has to write after it.
        remaining: usize,
    },
    Housekeeping {
        /// Whether this transaction removes every stale server node (else another follows).
        last: bool,
        /// Server nodes it removes.
        units: usize,
    },
    Flag,
    Claim(Vec<Claim>),
    /// Markers of this session found without an execution, confirmed by the transaction.
    Adopt(Vec<(RunKey, Vec<(ExecItem, Revision)>)>),
    ConsumeTrigger {
        parameter: String,
    },
    Complete(ExecutionId),
    Leave,
    Probe,
}

/// A fire and why it runs: what groups items into one execution.
type RunKey = (i64, RunKind);

/// One group of a claim: the items that will start as one execution.
#[derive(Debug)]
struct Claim {
    fire: i64,
    kind: RunKind,
    counts_as_fire: bool,
    parameter: Option<String>,
    items: Vec<ClaimedItem>,
}

#[derive(Debug, Clone)]
struct ClaimedItem {
    item: u32,
    running_op: usize,
    record_op: usize,
    failover_op: Option<usize>,
    /// The record as it will be after the claim.
    record: ItemRecord,
}

#[derive(Debug)]
struct Exec {
    job: String,
    epoch: u64,
    fire: i64,
    counts_as_fire: bool,
    items: Vec<ExecItem>,
    cancelled: bool,
    finished: bool,
    completing: bool,
    /// How many of `items` (the first ones) the completion in flight records.
    sending: usize,
    retry_at: Option<u64>,
    backoff: u32,
    /// Claimed ahead of its fire and not started yet.
    pending: Option<Ahead>,
    /// Whether the driver was told to start it (a claim given back never was).
    started: bool,
    /// [`Machine::disables`] when the claim ahead was recorded with none of its items, nor
    /// this server, disabled; `None` if some were, or nothing is claimed ahead.
    enabled_at: Option<u64>,
}

/// A run claimed ahead of its fire, until the fire comes.
#[derive(Debug)]
enum Ahead {
    /// Kept here, to hand to the driver with [`Command::Start`].
    Held(Execution),
    /// Announced to the driver with [`Command::Prepare`] ([`MachineOptions::prepare_ahead`]);
    /// started with [`Command::StartPrepared`], or dropped with [`Command::Discard`].
    Prepared,
}

#[derive(Debug, Clone)]
struct ExecItem {
    item: u32,
    running_version: Version,
    record_version: Version,
    record: ItemRecord,
    failover: Option<Version>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No session yet.
    Waiting,
    /// Loading the subtree.
    Loading,
    /// Loaded; setup (configuration, skeleton, registration) not done.
    Loaded,
    /// Registered; runs.
    Active,
    /// Cannot run (type conflict, no usable configuration); waits for the registry to change.
    Blocked,
}

#[derive(Debug)]
struct Job {
    paths: JobPaths,
    /// The local configuration (see [`JobSpec::config`]); `config` shares it while the
    /// registry's copy says the same.
    local: Arc<JobConfig>,
    /// The job type (see [`JobSpec::job_type`]).
    job_type: String,
    config: Option<Arc<JobConfig>>,
    /// The cache's count of configuration changes when `config` was last read from it.
    config_seen: Option<u64>,
    /// The local configuration's YAML as this machine last wrote it, until the registry's
    /// copy is next read: the same text needs no parse (at start-up with thousands of jobs,
    /// parsing back what was just written was about a third of the work).
    written_config: Option<String>,
    phase: Phase,
    cache: Cache,
    buffer: Vec<crate::registry::WatchEvent>,
    busy: Option<RequestId>,
    sync: Option<(Revision, u64)>,
    retry_at: Option<u64>,
    backoff: u32,
    /// A write of the job ended without a known outcome (a timeout, a lost connection) since
    /// its tree was last loaded: the registry may hold nodes of this session that the view
    /// does not show. A removed job reads its tree again before it leaves.
    unsure: bool,
    owned_since: BTreeMap<u32, i64>,
    running: BTreeMap<u32, ExecutionId>,
    /// Wall time (epoch ms) at which each item's last local run was recorded as finished:
    /// fires up to then came while it ran.
    last_end: BTreeMap<u32, i64>,
    triggers: VecDeque<String>,
    /// The trigger being claimed, when its items did not fit in one transaction.
    trigger_run: Option<TriggerRun>,
    reshard_wanted: Option<u64>,
    /// The cache's [`Cache::plan_version`](view::Cache) at which the plan was last found to
    /// need nothing: until the plan's inputs change, a re-shard is not worked out again.
    reshard_idle: Option<u64>,
    /// Items moved while running by the parts of a re-shard written so far.
    reshard_moved: Vec<u32>,
    /// Items written by the parts of a re-shard so far (its progress, reported every
    /// [`RESHARD_PROGRESS_STEP`] items).
    reshard_written: usize,
    /// The re-shard being written in parts, as worked out for its first part.
    reshard_plan: Option<Box<ReshardPlan>>,
    /// The most items per transaction learned from `TooLarge` refusals (see
    /// [`MachineOptions::max_txn_items`]).
    txn_items: Option<usize>,
    orphan_seen: BTreeMap<u32, u64>,
    /// When this instance first saw `leader/sharding/necessary` set (monotonic ms): new runs
    /// of the job are held from then until the flag clears, at most
    /// [`MachineOptions::reshard_wait`].
    necessary_seen: Option<u64>,
    was_leader: bool,
    leaving: bool,
    leave_deadline: Option<u64>,
    /// The session that owned this instance's node when the registry last showed it (in a
    /// watch event or a tree read, whether the cache took it or not): a deletion of the node
    /// seen in that same session is an operator's shutdown or the session's end, told apart by
    /// a probe (see [`Job::node_gone`]).
    registered_in: Option<crate::registry::SessionId>,
    /// The node was seen deleted in [`Job::registered_in`]'s session when requests up to this
    /// number had been sent: a probe with a later number that succeeds proves the session
    /// outlived the deletion (an operator's shutdown).
    node_gone: Option<u64>,
    /// Leaving because an operator shut the job down here.
    shut_down: bool,
    reported_corrupt: BTreeSet<String>,
    last_config_error: Option<String>,
    /// Why the last load of the subtree failed, until one succeeds.
    load_error: Option<String>,
    last_housekeeping: Option<u64>,
    last_reload: Option<u64>,
    wake: Option<u64>,
    /// The `wake` entered in `Machine::wakes`.
    wake_indexed: Option<u64>,
    /// The load in flight, if any.
    loading: Option<RequestId>,
    /// Next fires already computed.
    fires: FireMemo,
    /// [`Machine::changes`] at the last change to the job's view or decision on it.
    changed: u64,
}

/// A trigger whose items are claimed in several transactions: the same fire and parameter for
/// all of them.
#[derive(Debug, Clone)]
struct TriggerRun {
    parameter: String,
    fire: i64,
    /// Items not claimed yet.
    items: BTreeSet<u32>,
}

/// A job changed by a batch of node events.
struct Touched {
    job: String,
    /// Changed by anything but the run markers and records of its items.
    others: bool,
    /// The items whose run marker or record changed.
    items: Vec<u32>,
}

/// Remembers a few `next fire after t` answers of one configuration: the items of a job
/// mostly share their last fire, and croner's search is the costly part of a decision.
#[derive(Debug, Default, Clone)]
struct FireMemo {
    config: Option<Arc<JobConfig>>,
    answers: Vec<(i64, Option<i64>)>,
}

impl FireMemo {
    const SIZE: usize = 8;

    /// The first fire strictly after `after_ms` (epoch ms) under `config`'s cron and zone.
    fn next_after(&mut self, config: &Arc<JobConfig>, after_ms: i64) -> Option<i64> {
        if !self.config.as_ref().is_some_and(|c| Arc::ptr_eq(c, config)) {
            self.config = Some(Arc::clone(config));
            self.answers.clear();
        }
        if let Some((_, answer)) = self.answers.iter().find(|(a, _)| *a == after_ms) {
            return *answer;
        }
        let answer = config.cron.as_ref().and_then(|cron| {
            let after = DateTime::<Utc>::from_timestamp_millis(after_ms)?;
            cron.next_after(after, &config.time_zone)
                .map(|t| t.timestamp_millis())
        });
        if self.answers.len() == Self::SIZE {
            self.answers.remove(0);
        }
        self.answers.push((after_ms, answer));
        answer
    }
}

impl Job {
    /// After a committed transaction of ours: hold decisions until the watch shows its last
    /// write (or reload after `timeout_ms`), so they are not made on a view without it.
    fn await_own_writes(&mut self, results: &[TxnOpResult], now: Now, timeout_ms: u64) {
        if let Some(rev) = last_revision(results) {
            self.sync = Some((rev, now.mono.saturating_add(timeout_ms)));
        }
    }

    fn name(&self) -> &str {
        self.paths.job_name()
    }

    /// The registry showed this instance's node of the job.
    fn note_own_node(&mut self, stat: &crate::registry::Stat) {
        if let Some(owner) = stat.ephemeral_owner {
            self.registered_in = Some(owner);
        }
    }

    /// Whether new runs of the job are held because its leader waits to move items
    /// (`necessary`: the `leader/sharding/necessary` flag is set). While the leader waits for
    /// runs to end, no new run starts here, as in ElasticJob: the runs drain and the items
    /// move within one run's length, instead of the wait running out while the owners keep
    /// starting fires. The hold ends `reshard_wait` after this instance first saw the flag,
    /// even if it stays, so a leader that cannot finish the re-shard never stops the job.
    /// Called at every evaluation, whether or not the instance may claim, so that a flag seen
    /// again starts a new hold.
    fn held_for_reshard(
        &mut self,
        necessary: bool,
        opts: &MachineOptions,
        now: Now,
        wake: &mut Vec<u64>,
    ) -> bool {
        if !necessary {
            self.necessary_seen = None;
            return false;
        }
        waiting(&mut self.necessary_seen, ms(opts.reshard_wait), now, wake)
    }

    /// The most items one transaction of this job may touch, if limited.
    fn txn_limit(&self, opts: &MachineOptions) -> Option<usize> {
        let limit = match (opts.max_txn_items, self.txn_items) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        limit.map(|k| k.max(1))
    }
}

/// What [`Machine::evaluate`] decided for a job.
enum Action {
    Txn(Purpose, Vec<TxnOp>),
    Nothing,
}

/// An active job's instance as its view shows it: registered, on an enabled server, leading.
struct Standing {
    registered: bool,
    enabled: bool,
    i_lead: bool,
}

/// What a decision on an active job does before it looks at the job's items; each comes
/// before the next. Shared by the decision and its audit ([`Machine::late_wakes`]), so the
/// audit asks for claims exactly where the decision would make them.
enum Gate<'v> {
    /// This instance's node is gone: register again.
    Register,
    /// No leader, and this server is enabled: stand for election.
    Elect,
    /// Leading from a disabled server: step down.
    Abdicate,
    /// A trigger addressed to this instance, with its parameter: consume it.
    Trigger(&'v str),
    /// On to the items (the leader's duties, adoption, claims).
    Items,
}

impl Standing {
    fn of(j: &Job, view: &JobView, me: &InstanceId, sid: crate::registry::SessionId) -> Self {
        let i_lead = view.leader.as_deref() == Some(me.as_str())
            && j.cache
                .leader()
                .is_some_and(|s| s.ephemeral_owner.is_none_or(|o| o == sid));
        Self {
            registered: view.instances.contains(me),
            enabled: view.server_enabled(me.server_ip()),
            i_lead,
        }
    }

    fn gate<'v>(&self, view: &'v JobView, me: &InstanceId) -> Gate<'v> {
        if !self.registered {
            Gate::Register
        } else if view.leader.is_none() && self.enabled {
            Gate::Elect
        } else if self.i_lead && !self.enabled {
            Gate::Abdicate
        } else if let Some(param) = view.triggers.get(me) {
            Gate::Trigger(param)
        } else {
            Gate::Items
        }
    }
}

impl Machine {
    /// A machine for one instance, with no jobs yet.
    pub fn new(opts: MachineOptions) -> Self {
        Self {
            opts,
            strategies: BTreeMap::new(),
            session: Session::None,
            epoch: 0,
            confirmed: None,
            in_doubt: false,
            probe: None,
            last_probe: 0,
            jobs: BTreeMap::new(),
            wakes: BTreeSet::new(),
            retries: BTreeSet::new(),
            probe_waiters: BTreeSet::new(),
            probe_ok: 0,
            starts: BTreeSet::new(),
            pending: BTreeMap::new(),
            executions: BTreeMap::new(),
            out: VecDeque::new(),
            next_request: 0,
            next_execution: 0,
            shutdown: None,
            stopped: false,
            last_sweep: 0,
            clock_offset: None,
            clock_last: None,
            changes: 0,
            clock_seen: 0,
            sweep_cursor: None,
            sweep_left: 0,
            sweep_at: None,
            disables: 0,
        }
    }

    /// Registers a custom sharding strategy under its [`ShardingStrategy::name`], for jobs that
    /// name it in `jobShardingStrategyType`. Every instance that may lead such a job must
    /// register the same strategy. The name may not be empty, a built-in one (an instance
    /// without the custom strategy would shard differently) or one registered already.
    pub fn add_strategy(
        &mut self,
        strategy: Arc<dyn ShardingStrategy>,
    ) -> Result<(), MachineError> {
        let name = strategy.name().to_owned();
        let why = if name.trim().is_empty() {
            Some("the name is empty")
        } else if name.parse::<crate::sharding::BuiltinStrategy>().is_ok() {
            Some("the name is a built-in strategy's")
        } else if self.strategies.contains_key(&name) {
            Some("a strategy of that name is registered already")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(MachineError::StrategyName { name, why });
        }
        self.opts.known_types.strategies.insert(name.clone());
        self.strategies.insert(name, strategy);
        Ok(())
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &InstanceId {
        &self.opts.instance_id
    }

    /// Whether a graceful shutdown has finished.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The names of the hosted jobs.
    pub fn job_names(&self) -> impl Iterator<Item = &str> {
        self.jobs.keys().map(String::as_str)
    }

    /// Whether this instance is the job's leader, as far as it knows.
    pub fn is_leader(&self, job: &str) -> bool {
        self.jobs.get(job).is_some_and(|j| j.was_leader)
    }

    /// The items of a job running here now.
    pub fn running_items(&self, job: &str) -> Vec<u32> {
        self.jobs
            .get(job)
            .map(|j| j.running.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The job's effective configuration: the registry's copy once it is loaded.
    pub fn config(&self, job: &str) -> Option<&JobConfig> {
        self.jobs.get(job).and_then(|j| j.config.as_deref())
    }

    /// The job's effective configuration, shared: the same `Arc` until the configuration
    /// changes, so a caller can tell a change with [`Arc::ptr_eq`].
    pub fn shared_config(&self, job: &str) -> Option<Arc<JobConfig>> {
        self.jobs.get(job).and_then(|j| j.config.clone())
    }

    /// Whether the job's leader has a re-shard pending (`leader/sharding/necessary`), as far
    /// as this instance's cache shows.
    pub fn resharding_pending(&self, job: &str) -> bool {
        self.jobs
            .get(job)
            .is_some_and(|j| j.cache.view().necessary.is_some())
    }

    /// Whether the job is registered and runs here.
    pub fn is_active(&self, job: &str) -> bool {
        self.jobs.get(job).is_some_and(|j| j.phase == Phase::Active)
    }

    /// Starts hosting a job. Its configuration is validated first.
    pub fn add_job(&mut self, spec: JobSpec, now: Now) -> Result<(), MachineError> {
        if self.shutdown.is_some() {
            return Err(MachineError::ShuttingDown);
        }
        let name = spec.config.job_name.clone();
        spec.config
            .validate_with(&self.opts.known_types)
            .map_err(|e| MachineError::InvalidConfig {
                job: name.clone(),
                error: e.to_string(),
            })?;
        match self.jobs.get(&name) {
            Some(j) if j.leaving => return Err(MachineError::JobLeaving(name)),
            Some(_) => return Err(MachineError::DuplicateJob(name)),
            None => {}
        }
        let paths = JobPaths::new(&name).map_err(|e| MachineError::InvalidConfig {
            job: name.clone(),
            error: e.to_string(),
        })?;
        let JobSpec { config, job_type } = spec;
        let job = Job {
            paths,
            local: Arc::new(config),
            job_type,
            config: None,
            config_seen: None,
            written_config: None,
            phase: Phase::Waiting,
            cache: Cache::default(),
            buffer: Vec::new(),
            busy: None,
            sync: None,
            retry_at: None,
            backoff: 0,
            unsure: false,
            owned_since: BTreeMap::new(),
            running: BTreeMap::new(),
            last_end: BTreeMap::new(),
            triggers: VecDeque::new(),
            trigger_run: None,
            reshard_wanted: None,
            reshard_idle: None,
            reshard_moved: Vec::new(),
            reshard_written: 0,
            reshard_plan: None,
            txn_items: None,
            orphan_seen: BTreeMap::new(),
            necessary_seen: None,
            was_leader: false,
            registered_in: None,
            node_gone: None,
            shut_down: false,
            leaving: false,
            leave_deadline: None,
            reported_corrupt: BTreeSet::new(),
            last_config_error: None,
            load_error: None,
            last_housekeeping: None,
            last_reload: None,
            loading: None,
            wake: None,
            wake_indexed: None,
            fires: FireMemo::default(),
            changed: 0,
        };
        self.jobs.insert(name.clone(), Box::new(job));
        if matches!(self.session, Session::Live(_)) {
            self.start_load(&name, now);
        }
        Ok(())
    }

    /// Stops hosting a job: lets its runs finish (cancelling them after the shutdown grace),
    /// records them, and leaves the job's registry nodes; then emits
    /// [`MachineEvent::JobLeft`], after which the job can be added again. While the session is
    /// suspended it waits for it to come back or to be found expired. Removing a job that is
    /// leaving already changes nothing.
    pub fn remove_job(&mut self, job: &str, now: Now) -> Result<(), MachineError> {
        let j = self
            .jobs
            .get_mut(job)
            .ok_or_else(|| MachineError::UnknownJob(job.to_owned()))?;
        // Removing a job that is leaving already changes nothing: its grace is not extended.
        if !j.leaving {
            j.leaving = true;
            j.leave_deadline = Some(now.mono.saturating_add(ms(self.opts.shutdown_grace)));
            self.noticing_clock(now, |m| m.evaluate(job, now));
        }
        Ok(())
    }

    /// Runs the job's items on this instance once now, with an optional parameter that
    /// replaces `jobParameter`; queued if they are running.
    pub fn trigger(
        &mut self,
        job: &str,
        parameter: Option<String>,
        now: Now,
    ) -> Result<(), MachineError> {
        if self.shutdown.is_some() {
            return Err(MachineError::ShuttingDown);
        }
        let j = self
            .jobs
            .get_mut(job)
            .ok_or_else(|| MachineError::UnknownJob(job.to_owned()))?;
        j.triggers.push_back(parameter.unwrap_or_default());
        self.noticing_clock(now, |m| m.evaluate(job, now));
        Ok(())
    }

    /// Starts a graceful shutdown of the whole instance.
    pub fn shutdown(&mut self, now: Now) {
        if self.shutdown.is_some() {
            return;
        }
        let deadline = now.mono.saturating_add(ms(self.opts.shutdown_grace));
        self.shutdown = Some(deadline);
        for job in self.jobs.values_mut() {
            job.leaving = true;
        }
        // Every job is decided on below: a step is acted on by that alone.
        self.observe_clock(now);
        self.evaluate_all(now);
    }

    /// The next command for the driver.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// When the driver should call [`Machine::handle_timeout`] next (monotonic ms).
    pub fn poll_timeout(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut at = |t: Option<u64>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        at(self.wakes.first().map(|(t, _)| *t));
        at(self.retries.first().map(|(t, _)| *t));
        at(self.starts.first().map(|(t, _)| *t));
        at(self.sweep_at);
        if !self.jobs.is_empty() {
            at(Some(self.clock_seen.saturating_add(CLOCK_WATCH_MS)));
        }
        if self.needs_probing() {
            if let Session::Live(info) = self.session {
                if self.probe.is_none() {
                    at(Some(self.probe_due(info)));
                }
            }
        }
        if !self.executions.is_empty() && !self.in_doubt {
            at(self.lease_deadline());
        }
        at(self.shutdown);
        next
    }

    /// The earliest time (monotonic ms) at which a run claimed ahead is due to start, if any.
    /// It is also among what [`Machine::poll_timeout`] returns; a driver that wants runs to
    /// start on the dot can wake a little before it and wait out the rest precisely, since
    /// general-purpose timers fire a millisecond or two late.
    ///
    /// One [`Machine::handle_timeout`] hands out a bounded number of starts: while this is
    /// still at or before the time just handled, carrying out the commands and calling
    /// `handle_timeout` again at once starts the rest sooner than waiting for the next tick.
    pub fn next_start(&self) -> Option<u64> {
        self.starts.first().map(|(t, _)| *t)
    }

    /// A registry event from the watch on `/`, or a session change.
    pub fn handle_registry_event(&mut self, event: RegistryEvent, now: Now) {
        self.handle_registry_events(std::iter::once(event), now);
    }

    /// Several registry events at once, in order: node changes are applied first and each
    /// affected job is evaluated once, which is much cheaper than one call per event when a
    /// transaction changed many nodes.
    pub fn handle_registry_events(
        &mut self,
        events: impl IntoIterator<Item = RegistryEvent>,
        now: Now,
    ) {
        self.noticing_clock(now, |m| m.apply_registry_events(events, now));
    }

    fn apply_registry_events(&mut self, events: impl IntoIterator<Item = RegistryEvent>, now: Now) {
        let mut touched: Vec<Touched> = Vec::new();
        for event in events {
            match event {
                RegistryEvent::Session(s) => {
                    self.evaluate_touched(std::mem::take(&mut touched), now);
                    self.handle_session(s, now);
                }
                RegistryEvent::Node(ev) => self.apply_node_event(ev, &mut touched),
            }
        }
        self.evaluate_touched(touched, now);
    }

    /// Evaluates the jobs a batch of node events changed, but not one whose only changes are
    /// other instances' run markers and records of items that bear on nothing this instance
    /// decides (see [`Machine::bears_on_me`]). With every instance watching every job, each
    /// run of an item is seen by all of them; only a few have anything to decide about it.
    fn evaluate_touched(&mut self, mut touched: Vec<Touched>, now: Now) {
        // In the order of the jobs' names, as everywhere else.
        touched.sort_unstable_by(|a, b| a.job.cmp(&b.job));
        for t in touched {
            if t.others || t.items.iter().any(|i| self.bears_on_me(&t.job, *i)) {
                self.evaluate(&t.job, now);
                if planted!(self.opts, ForgetWakes) {
                    if let Some(j) = self.jobs.get_mut(&t.job) {
                        j.wake = None;
                    }
                    self.index_wake(&t.job);
                }
            }
        }
    }

    /// Whether item `i` of job `name`, whose run marker or record changed, bears on what this
    /// instance decides. It does not when the job is active here and led by another instance,
    /// nothing of ours waits on the registry or on an orphan, and the item is neither ours
    /// (owned, run or recorded as run here) nor an orphan, nor, for the leader, beyond the count:
    /// a decision on it would be the one taken before, and the wake it set still stands.
    fn bears_on_me(&self, name: &str, i: u32) -> bool {
        let Some(j) = self.jobs.get(name) else {
            return false;
        };
        let me = &self.opts.instance_id;
        let view = j.cache.view();
        if j.phase != Phase::Active
            || j.leaving
            || j.sync
                .is_some_and(|(rev, _)| j.cache.seen.is_some_and(|s| s >= rev))
            || !j.orphan_seen.is_empty()
            || j.running.contains_key(&i)
            || self.shutdown.is_some()
            || !view.corrupt.is_empty()
            || view
                .leader
                .as_deref()
                .is_none_or(|l| l == me.as_str() && j.reshard_idle != Some(j.cache.plan_version))
        {
            return true;
        }
        // The leader removes an item beyond the count once its run ends.
        let beyond = j
            .config
            .as_ref()
            .is_some_and(|c| i >= c.sharding_total_count);
        if beyond && view.leader.as_deref() == Some(me.as_str()) {
            return true;
        }
        let Some(v) = view.items.get(&i) else {
            return false;
        };
        let run = v.record.as_ref().and_then(|(r, _)| r.run.as_ref());
        v.owner.as_ref() == Some(me)
            || v.running
                .as_ref()
                .is_some_and(|(h, _)| h.trim() == me.as_str())
            || run.is_some_and(|r| r.instance == *me)
            || (run.is_some() && v.running.is_none() && v.failover.is_none())
    }

    /// Applies a node event to its job's cache and notes the job in `touched` if it should be
    /// evaluated.
    fn apply_node_event(&mut self, ev: crate::registry::WatchEvent, touched: &mut Vec<Touched>) {
        let Some((job, node)) = JobNode::parse(&ev.path) else {
            return;
        };
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        if let (JobNode::Instance(id), Some(stat)) = (&node, &ev.stat) {
            if *id == self.opts.instance_id {
                j.note_own_node(stat);
            }
        }
        match j.phase {
            Phase::Waiting => return,
            Phase::Loading => {
                j.buffer.push(ev);
                return;
            }
            _ => {}
        }
        if view::bears_on_disabled(&node) {
            self.disables += 1;
        }
        let config = matches!(node, JobNode::Config | JobNode::Root);
        let run_item = match node {
            JobNode::ItemState(i, ItemLeaf::Running | ItemLeaf::Execution) => Some(i),
            _ => None,
        };
        let k = match touched.iter().position(|t| t.job == job) {
            Some(k) => k,
            None => {
                touched.push(Touched {
                    job: job.to_owned(),
                    others: false,
                    items: Vec::new(),
                });
                touched.len() - 1
            }
        };
        let t = &mut touched[k];
        // An item may be noted more than once (a search of the list per event would cost a
        // batch of k events k²); only whether any of them bears on this instance is asked.
        match run_item {
            Some(i) if t.items.last() != Some(&i) => t.items.push(i),
            Some(_) => {}
            None => t.others = true,
        }
        j.cache.apply_parsed(ev, Some(node), &self.opts.instance_id);
        self.changes += 1;
        j.changed = self.changes;
        if config {
            let name = touched[k].job.clone();
            self.refresh_config(&name);
        }
    }

    /// The reply to a [`Command::Registry`] request.
    pub fn handle_registry_reply(&mut self, id: RequestId, reply: RegistryReply, now: Now) {
        self.noticing_clock(now, |m| m.apply_registry_reply(id, reply, now));
    }

    fn apply_registry_reply(&mut self, id: RequestId, reply: RegistryReply, now: Now) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        let ok = !matches!(reply, RegistryReply::Failed(_));
        let doubt_before = self.in_doubt;
        if ok && p.epoch == self.epoch {
            self.confirmed = Some(self.confirmed.map_or(p.sent, |c| c.max(p.sent)));
            if self.in_doubt && self.lease_valid(now) {
                self.in_doubt = false;
            }
        }
        if self.probe == Some(id) {
            self.probe = None;
        }
        if ok && p.epoch == self.epoch && matches!(p.purpose, Purpose::Probe) {
            self.probe_ok = self.probe_ok.max(id.0);
        }
        if let Some(job) = &p.job {
            if let Some(j) = self.jobs.get_mut(job) {
                if j.busy == Some(id) {
                    j.busy = None;
                }
            }
        }
        if p.epoch != self.epoch {
            // A reply for a session that is gone. Claims and completions of that session are
            // void: its markers vanished with it.
            if let Purpose::Complete(exec) = p.purpose {
                self.complete_lost(exec);
            }
            self.evaluate_all(now);
            return;
        }
        let p_job = p.job.clone().or_else(|| match &p.purpose {
            Purpose::Complete(exec) => self.executions.get(exec).map(|e| e.job.clone()),
            _ => None,
        });
        let probe = matches!(p.purpose, Purpose::Probe);
        if let (Some(job), RegistryReply::Failed(e)) = (&p_job, &reply) {
            let write = !matches!(p.purpose, Purpose::Load | Purpose::Probe);
            if write && e.class() == ErrorClass::Transient {
                if let Some(j) = self.jobs.get_mut(job) {
                    j.unsure = true;
                }
            }
        }
        match p.purpose {
            Purpose::Load => self.on_load(id, p.job, reply, now),
            Purpose::Probe => {}
            Purpose::Complete(exec) => self.on_complete(exec, reply, now),
            Purpose::Claim(claims) => self.on_claim(p.job, claims, reply, now),
            Purpose::Adopt(groups) => {
                let name = p.job.clone().unwrap_or_default();
                match reply {
                    RegistryReply::Transacted(_) if self.lease_valid(now) => {
                        let total = self
                            .jobs
                            .get(&name)
                            .and_then(|j| j.config.as_ref())
                            .map(|c| c.sharding_total_count);
                        for ((fire, kind), items) in groups {
                            // Claimed before the count shrank under it: not started now (the
                            // item's work belongs to others by the new count), but recorded
                            // as ended, so that its marker goes and the item can be removed.
                            let (gone, items): (Vec<_>, Vec<_>) = items
                                .into_iter()
                                .partition(|(it, _)| total.is_some_and(|n| it.item >= n));
                            if !gone.is_empty() {
                                let gone = gone.into_iter().map(|(it, _)| it).collect();
                                let id = self.insert_execution(&name, fire, false, gone, true);
                                self.send_completion(id, now);
                            }
                            if !items.is_empty() {
                                let counts = kind != RunKind::Trigger;
                                self.start_execution(&name, fire, kind, counts, None, items, now);
                            }
                        }
                    }
                    RegistryReply::Failed(error) => {
                        let units = groups.iter().map(|(_, items)| items.len()).sum();
                        if !self.split_on_too_large(&name, &error, units) {
                            self.after_failure(&name, error.class(), now);
                        }
                    }
                    _ => {}
                }
            }
            purpose => self.on_txn(p.job, purpose, reply, now),
        }
        // The jobs that wait for a confirmed session, once a reply confirms it: a probe's, or
        // any other that leaves the lease valid (while other jobs' claims and completions
        // confirm the session, no probe is due at all). Only those jobs: evaluating every job
        // on each confirmation would cost O(jobs) every quarter timeout while anything runs.
        if ok && !self.probe_waiters.is_empty() && (probe || self.lease_valid(now)) {
            for name in std::mem::take(&mut self.probe_waiters) {
                self.evaluate(&name, now);
            }
        }
        if doubt_before != self.in_doubt {
            self.evaluate_all(now);
        } else if let Some(job) = &p_job {
            self.evaluate(job, now);
            self.maybe_probe(now);
            self.finish_shutdown_if_done();
        } else {
            self.finish_shutdown_if_done();
        }
    }

    /// The monotonic clock reached [`Machine::poll_timeout`].
    pub fn handle_timeout(&mut self, now: Now) {
        let stepped = self.observe_clock(now);
        self.check_lease(now);
        let queued = self.out.len();
        self.start_due(now);
        // Runs that start now go out before anything else is worked on: the sweep waits a
        // millisecond, so the driver can hand the runs their start first.
        let started = self.out.len() > queued;
        self.maybe_probe(now);
        while let Some(&(t, id)) = self.retries.first() {
            if t > now.mono {
                break;
            }
            self.retries.remove(&(t, id));
            // Entries of executions that are gone or were rescheduled are stale: skipped.
            match self.executions.get_mut(&id) {
                Some(e) if e.retry_at == Some(t) => e.retry_at = None,
                _ => continue,
            }
            self.send_completion(id, now);
        }
        if self.shutdown.is_some_and(|d| now.mono >= d) {
            self.cancel_all(CancelReason::Shutdown, now);
        }
        // Only the jobs whose time has come; every job now and then as a safety net (the
        // decisions are level-triggered, so an extra evaluation is harmless, only costly).
        // The sweep goes a tenth of the jobs at a time, so that ten thousand jobs do not stall
        // the machine at once.
        if self.shutdown.is_some() {
            self.sweep_at = None;
            self.sweep_left = 0;
            self.evaluate_all(now);
            return;
        }
        if stepped {
            self.evaluate_all(now);
            return;
        }
        let due: Vec<String> = self
            .wakes
            .iter()
            .take_while(|(t, _)| *t <= now.mono)
            .map(|(_, name)| name.clone())
            .collect();
        let mut swept: Vec<String> = Vec::new();
        if self.opts.safety_sweep && now.mono >= self.last_sweep.saturating_add(SWEEP_MS / 10) {
            self.last_sweep = now.mono;
            self.sweep_left = self.jobs.len().div_ceil(10).max(1);
            self.sweep_at = Some(now.mono);
        }
        if started && self.sweep_left > 0 {
            self.sweep_at = Some(now.mono.saturating_add(1));
        } else if self.sweep_at.is_some_and(|t| t <= now.mono) {
            let chunk = self.sweep_left.min(SWEEP_CHUNK);
            self.sweep_left -= chunk;
            self.sweep_at = (self.sweep_left > 0).then(|| now.mono.saturating_add(1));
            let after = self.sweep_cursor.take();
            let mut next: Vec<String> = match &after {
                Some(c) => self
                    .jobs
                    .range::<str, _>((
                        std::ops::Bound::Excluded(c.as_str()),
                        std::ops::Bound::Unbounded,
                    ))
                    .map(|(n, _)| n.clone())
                    .take(chunk)
                    .collect(),
                None => Vec::new(),
            };
            if next.len() < chunk {
                let more = chunk - next.len();
                next.extend(self.jobs.keys().take(more).cloned());
            }
            self.sweep_cursor = next.last().cloned();
            // A job both due and swept is evaluated once.
            next.retain(|n| !due.contains(n));
            swept = next;
        }
        for name in due {
            self.evaluate(&name, now);
        }
        for name in swept {
            self.evaluate_swept(&name, now);
        }
        self.maybe_probe(now);
        self.finish_shutdown_if_done();
    }

    /// An execution ended: every item's outcome.
    pub fn handle_execution_finished(
        &mut self,
        id: ExecutionId,
        outcomes: BTreeMap<u32, ItemOutcome>,
        now: Now,
    ) {
        let _ = outcomes; // Outcomes feed tracing and error handlers in the driver.
        self.noticing_clock(now, |m| m.execution_finished(id, now));
    }

    fn execution_finished(&mut self, id: ExecutionId, now: Now) {
        let Some(exec) = self.executions.get_mut(&id) else {
            return;
        };
        exec.finished = true;
        let job = exec.job.clone();
        if exec.epoch != self.epoch || self.session == Session::None {
            self.complete_lost(id);
        } else {
            self.send_completion(id, now);
        }
        self.evaluate(&job, now);
        self.maybe_probe(now);
        self.finish_shutdown_if_done();
    }

    // ----- session -----

    fn handle_session(&mut self, event: SessionEvent, now: Now) {
        match event {
            SessionEvent::Connected(info) => {
                self.epoch += 1;
                self.session = Session::Live(info);
                self.confirmed = Some(now.mono);
                self.in_doubt = false;
                self.last_probe = now.mono;
                let names: Vec<String> = self.jobs.keys().cloned().collect();
                for name in names {
                    self.start_load(&name, now);
                }
            }
            SessionEvent::Suspended(id) => {
                if let Session::Live(info) = self.session {
                    if info.id == id {
                        self.session = Session::Suspended(info);
                    }
                }
            }
            SessionEvent::Reconnected(id) => {
                if let Session::Suspended(info) | Session::Live(info) = self.session {
                    if info.id == id {
                        self.session = Session::Live(info);
                        // Replies of this session may have been lost; the epoch stays.
                        let names: Vec<String> = self.jobs.keys().cloned().collect();
                        for name in names {
                            self.start_load(&name, now);
                        }
                        self.probe_now(now);
                    }
                }
            }
            SessionEvent::Expired(id) => {
                let ours = match self.session {
                    Session::Live(info) | Session::Suspended(info) => info.id == id,
                    Session::None => false,
                };
                if ours {
                    self.session_lost(now);
                    if planted!(self.opts, ShutdownOnSessionLoss) {
                        self.jobs.clear();
                        self.wakes.clear();
                        self.stopped = true;
                    }
                }
            }
            SessionEvent::Closed => {
                self.session_lost(now);
                if self.shutdown.is_some() {
                    self.stopped = true;
                }
            }
        }
        self.evaluate_all(now);
    }

    fn session_lost(&mut self, now: Now) {
        self.session = Session::None;
        self.epoch += 1;
        self.confirmed = None;
        self.in_doubt = false;
        self.probe = None;
        self.out
            .push_back(Command::Event(MachineEvent::SessionLost));
        self.cancel_all(CancelReason::SessionLost, now);
        let finished: Vec<ExecutionId> = self
            .executions
            .iter()
            .filter(|(_, e)| e.finished)
            .map(|(id, _)| *id)
            .collect();
        for id in finished {
            self.complete_lost(id);
        }
        for job in self.jobs.values_mut() {
            job.phase = Phase::Waiting;
            job.busy = None;
            job.sync = None;
            job.buffer.clear();
            job.was_leader = false;
            job.reshard_wanted = None;
            job.reshard_moved.clear();
            job.reshard_written = 0;
            job.reshard_plan = None;
            // The nodes of the lost session are gone with it.
            job.unsure = false;
        }
        self.pending
            .retain(|_, p| matches!(p.purpose, Purpose::Complete(_)));
        if self.shutdown.is_some() {
            // Nothing left to leave: the session took the instance nodes with it.
            let idle: Vec<String> = self
                .jobs
                .iter()
                .filter(|(_, j)| j.running.is_empty())
                .map(|(name, _)| name.clone())
                .collect();
            for name in idle {
                self.forget_job(&name);
            }
            self.finish_shutdown_if_done();
        }
    }

    fn lease_deadline(&self) -> Option<u64> {
        let (Session::Live(info) | Session::Suspended(info)) = self.session else {
            return None;
        };
        let confirmed = self.confirmed?;
        let share = if planted!(self.opts, LeaseBeyondTimeout) {
            1.5
        } else {
            1.0 - self.opts.safety_margin
        };
        let window = (ms(info.timeout) as f64 * share).max(0.0) as u64;
        Some(confirmed.saturating_add(window))
    }

    fn lease_valid(&self, now: Now) -> bool {
        self.lease_deadline().is_some_and(|d| now.mono < d)
    }

    fn check_lease(&mut self, now: Now) {
        if planted!(self.opts, NoSelfFencing) {
            return;
        }
        if self
            .executions
            .values()
            .any(|e| !e.cancelled && !e.finished)
            && !self.lease_valid(now)
        {
            if !self.in_doubt {
                self.in_doubt = true;
                self.out
                    .push_back(Command::Event(MachineEvent::SessionInDoubt));
            }
            self.cancel_all(CancelReason::SessionInDoubt, now);
        }
    }

    /// Handles an input other than a timeout with an eye on the wall clock: a step seen here
    /// is acted on as a timeout would, once the input is applied, by deciding on every job
    /// again (their wake times were taken from the old clock). Noticed only at the next
    /// timeout, a step back and forth between two timeouts would leave the wake times that
    /// decisions took meanwhile late by the step.
    fn noticing_clock<T>(&mut self, now: Now, input: impl FnOnce(&mut Self) -> T) -> T {
        let stepped = self.observe_clock(now);
        let out = input(self);
        if stepped {
            self.evaluate_all(now);
        }
        out
    }

    /// Compares the wall clock with the monotonic one. When the wall clock has stepped (by
    /// more than [`CLOCK_STEP_MS`] since the last step), the runs claimed ahead are put at
    /// their fire by the new clock, and `true` says that every job must be evaluated again:
    /// their wake times were taken from the old one.
    fn observe_clock(&mut self, now: Now) -> bool {
        self.clock_seen = now.mono;
        let offset = wall_offset(now);
        self.clock_last = Some(offset);
        let Some(before) = self.clock_offset else {
            self.clock_offset = Some(offset);
            return false;
        };
        let by = offset.saturating_sub(before);
        if by.abs() <= CLOCK_STEP_MS || planted!(self.opts, IgnoreClockSteps) {
            return false;
        }
        self.clock_offset = Some(offset);
        for (_, id) in std::mem::take(&mut self.starts) {
            // Entries of executions given back or gone are stale: dropped.
            if let Some(e) = self.executions.get(&id).filter(|e| e.pending.is_some()) {
                self.starts.insert((now.mono_at(e.fire), id));
            }
        }
        self.out
            .push_back(Command::Event(MachineEvent::ClockStepped { by_ms: by }));
        true
    }

    fn maybe_probe(&mut self, now: Now) {
        let Session::Live(info) = self.session else {
            return;
        };
        if self.probe.is_some() || !self.needs_probing() {
            return;
        }
        if now.mono >= self.probe_due(info) {
            self.probe_now(now);
        }
    }

    /// Whether the session must be confirmed now and then: while executions run (their lease),
    /// while it is in doubt, and while jobs wait for a confirmation to act (adoption of markers
    /// whose claim's reply was lost). A waiting job has no wake of its own: if a probe's reply
    /// is lost too, the next probe is what brings it back.
    fn needs_probing(&self) -> bool {
        !self.executions.is_empty() || self.in_doubt || !self.probe_waiters.is_empty()
    }

    /// When the session should be confirmed again: a quarter timeout after the last
    /// confirmation (claims and completions confirm it too) or the last probe.
    fn probe_due(&self, info: SessionInfo) -> u64 {
        let last = self.confirmed.unwrap_or(0).max(self.last_probe);
        last.saturating_add(ms(info.timeout) / 4)
    }

    fn probe_now(&mut self, now: Now) {
        let Session::Live(info) = self.session else {
            return;
        };
        if self.probe.is_some() {
            return;
        }
        self.last_probe = now.mono;
        let op = RegistryOp::Transact(vec![TxnOp::Check(Check::Session(info.id))]);
        let id = self.request(None, Purpose::Probe, op, now);
        self.probe = Some(id);
    }

    fn cancel_all(&mut self, reason: CancelReason, now: Now) {
        let mut unstarted = Vec::new();
        for (id, exec) in self.executions.iter_mut() {
            if exec.pending.is_some() {
                unstarted.push(*id);
            } else if !exec.cancelled && !exec.finished {
                exec.cancelled = true;
                self.out.push_back(Command::Cancel { id: *id, reason });
            }
        }
        for id in unstarted {
            self.release(id, now);
        }
    }

    // ----- requests -----

    fn request(
        &mut self,
        job: Option<&str>,
        purpose: Purpose,
        op: RegistryOp,
        now: Now,
    ) -> RequestId {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        self.pending.insert(
            id,
            Pending {
                epoch: self.epoch,
                sent: now.mono,
                job: job.map(str::to_owned),
                purpose,
            },
        );
        self.out.push_back(Command::Registry { id, op });
        id
    }

    fn session_id(&self) -> Option<crate::registry::SessionId> {
        match self.session {
            Session::Live(info) => Some(info.id),
            _ => None,
        }
    }

    fn start_load(&mut self, name: &str, now: Now) {
        let Some(job) = self.jobs.get_mut(name) else {
            return;
        };
        job.phase = Phase::Loading;
        job.buffer.clear();
        job.sync = None;
        let root = job.paths.root().clone();
        let id = self.request(Some(name), Purpose::Load, RegistryOp::GetTree(root), now);
        if let Some(job) = self.jobs.get_mut(name) {
            job.busy = Some(id);
            job.loading = Some(id);
        }
    }

    fn on_load(&mut self, id: RequestId, job: Option<String>, reply: RegistryReply, now: Now) {
        let Some(name) = job else { return };
        let Some(j) = self.jobs.get_mut(&name) else {
            return;
        };
        if let RegistryReply::Tree(nodes) = &reply {
            // Whether stale or not, it shows whether this instance's node was there.
            let me = &self.opts.instance_id;
            let own = j.paths.instance(me);
            if let Some(node) = nodes.iter().find(|n| n.path == own) {
                j.note_own_node(&node.stat);
            }
        }
        if j.loading != Some(id) {
            // A later load replaced this one: its snapshot and the events buffered since do
            // not fit together.
            return;
        }
        j.loading = None;
        match reply {
            RegistryReply::Tree(nodes) => {
                let me = &self.opts.instance_id;
                self.disables += 1;
                j.cache.load(nodes, me);
                for ev in std::mem::take(&mut j.buffer) {
                    j.cache.apply(ev, me);
                }
                j.phase = Phase::Loaded;
                j.backoff = 0;
                j.unsure = false;
                j.load_error = None;
                j.last_reload = Some(now.mono);
                self.refresh_config(&name);
            }
            RegistryReply::Failed(error) => {
                j.load_error = Some(error.to_string());
                self.failed(Some(&name), "load", error.clone());
                let backoff = self.backoff_of(&name, now);
                if let Some(j) = self.jobs.get_mut(&name) {
                    j.phase = Phase::Waiting;
                    j.retry_at = Some(backoff);
                }
            }
            _ => {}
        }
    }

    fn backoff_of(&mut self, name: &str, now: Now) -> u64 {
        let base = ms(self.opts.retry_backoff).max(1);
        let Some(j) = self.jobs.get_mut(name) else {
            return now.mono + base;
        };
        let delay = base << j.backoff.min(4);
        j.backoff = j.backoff.saturating_add(1);
        now.mono.saturating_add(delay)
    }

    fn failed(&mut self, job: Option<&str>, purpose: &'static str, error: RegistryError) {
        self.out
            .push_back(Command::Event(MachineEvent::RegistryFailed {
                job: job.map(str::to_owned),
                purpose,
                error,
            }));
    }

    /// Reads the registry's configuration of a job into `config` (or reports it unusable).
    fn refresh_config(&mut self, name: &str) {
        let Some(j) = self.jobs.get_mut(name) else {
            return;
        };
        if matches!(j.phase, Phase::Waiting | Phase::Loading) {
            return;
        }
        let Some(data) = j.cache.config() else {
            return;
        };
        // Parsing YAML is costly: only when the text changed since the last parse.
        let changes = j.cache.config_changes();
        if j.config_seen == Some(changes) {
            return;
        }
        j.config_seen = Some(changes);
        // The text this machine wrote from its local configuration reads back as that
        // configuration (`to_yaml` and `from_yaml` round-trip): no parse.
        let written = j
            .written_config
            .take()
            .is_some_and(|w| w.as_bytes() == data);
        let parsed = if written {
            Ok(Arc::clone(&j.local))
        } else {
            std::str::from_utf8(data)
                .map_err(|_| "the config node is not UTF-8 text".to_owned())
                .and_then(|text| {
                    if text.trim().is_empty() {
                        return Err("the config node is empty".to_owned());
                    }
                    JobConfig::from_yaml_with(text, Strictness::Lenient, &self.opts.known_types)
                        .map_err(|e| e.to_string())
                })
                .and_then(|c| {
                    if c.job_name == name {
                        Ok(c)
                    } else {
                        Err(format!("the config node names job {:?}", c.job_name))
                    }
                })
                // One copy per distinct configuration: the local one while the registry's
                // says the same, and the one in force while it does not change.
                .map(|config| match &j.config {
                    _ if *j.local == config => Arc::clone(&j.local),
                    Some(current) if **current == config => Arc::clone(current),
                    _ => Arc::new(config),
                })
        };
        match parsed {
            Ok(config) => {
                j.config = Some(config);
                j.last_config_error = None;
                if j.phase == Phase::Blocked {
                    j.phase = Phase::Loaded;
                }
            }
            Err(error) => {
                if j.last_config_error.as_deref() != Some(&error) {
                    j.last_config_error = Some(error.clone());
                    self.out
                        .push_back(Command::Event(MachineEvent::ConfigInvalid {
                            job: name.to_owned(),
                            error,
                        }));
                }
            }
        }
    }

    // ----- evaluation -----

    fn evaluate_all(&mut self, now: Now) {
        let names: Vec<String> = self.jobs.keys().cloned().collect();
        for name in names {
            self.evaluate(&name, now);
        }
        self.maybe_probe(now);
        self.finish_shutdown_if_done();
    }

    fn evaluate(&mut self, name: &str, now: Now) {
        self.evaluate_job(name, now);
        self.index_wake(name);
        self.note_change(name);
    }

    /// An evaluation by the safety sweep of a job that is not due: its decision should be
    /// the one taken before, and counts as a change (see [`Machine::late_wakes`]) only if it
    /// is not.
    fn evaluate_swept(&mut self, name: &str, now: Now) {
        let state = |m: &Self| m.jobs.get(name).map(|j| (j.wake, j.busy, j.loading));
        let before = state(self);
        self.evaluate_job(name, now);
        self.index_wake(name);
        if state(self) != before {
            self.note_change(name);
        }
    }

    /// Counts a change to the job's view or decision (see [`Machine::changes`]).
    fn note_change(&mut self, name: &str) {
        self.changes += 1;
        if let Some(j) = self.jobs.get_mut(name) {
            j.changed = self.changes;
        }
    }

    /// Enters the job's `wake` in the ordered index (and drops a job that is gone).
    fn index_wake(&mut self, name: &str) {
        let Some(j) = self.jobs.get_mut(name) else {
            return;
        };
        if j.wake != j.wake_indexed {
            if let Some(t) = j.wake_indexed {
                self.wakes.remove(&(t, name.to_owned()));
            }
            if let Some(t) = j.wake {
                self.wakes.insert((t, name.to_owned()));
            }
            j.wake_indexed = j.wake;
        }
    }

    /// Stops hosting a job: drops it and its entry in the wake index.
    fn forget_job(&mut self, name: &str) {
        if let Some(j) = self.jobs.remove(name) {
            if let Some(t) = j.wake_indexed {
                self.wakes.remove(&(t, name.to_owned()));
            }
        }
    }

    fn evaluate_job(&mut self, name: &str, now: Now) {
        let Some(j) = self.jobs.get_mut(name) else {
            return;
        };
        j.wake = None;
        if j.leaving && matches!(j.phase, Phase::Waiting | Phase::Loading) {
            // A job never loaded has written nothing; past the shutdown's grace, the session's
            // close takes this instance's nodes with it. Either way the leave does not wait
            // for a load that may never succeed (an ACL that denies reads, a name the
            // registry refuses).
            let grace_over = self.shutdown.is_some_and(|d| now.mono >= d);
            if j.last_reload.is_none() || grace_over {
                self.leave_unloaded(name, now);
                return;
            }
        }
        if j.phase == Phase::Waiting {
            if matches!(self.session, Session::Live(_)) && j.retry_at.is_none_or(|t| now.mono >= t)
            {
                j.retry_at = None;
                self.start_load(name, now);
            } else {
                // Without a session the connection brings every job back; a retry time
                // already past would only wake the job again and again meanwhile.
                j.wake = j.retry_at.filter(|t| *t > now.mono);
            }
            return;
        }
        if j.busy.is_some() || j.phase == Phase::Loading {
            return;
        }
        if let Some(t) = j.retry_at {
            if now.mono < t {
                j.wake = Some(t);
                return;
            }
            j.retry_at = None;
        }
        if let Some((rev, deadline)) = j.sync {
            if j.cache.seen.is_some_and(|s| s >= rev) {
                j.sync = None;
            } else if now.mono >= deadline {
                j.sync = None;
                self.start_load(name, now);
                return;
            } else {
                j.wake = Some(deadline);
                return;
            }
        }
        let action = self.decide(name, now);
        if let Action::Txn(purpose, ops) = action {
            let id = self.request(Some(name), purpose, RegistryOp::Transact(ops), now);
            if let Some(j) = self.jobs.get_mut(name) {
                j.busy = Some(id);
            }
        }
    }

    /// Leaves a job whose subtree is not loaded, without a transaction: once its local runs
    /// have ended (a shutdown cancels them at its grace deadline), it is dropped, and
    /// [`MachineEvent::LeftUnloaded`] says why before [`MachineEvent::JobLeft`].
    fn leave_unloaded(&mut self, name: &str, now: Now) {
        let Some(j) = self.jobs.get_mut(name) else {
            return;
        };
        if !j.running.is_empty() {
            j.wake = j.leave_deadline.or(self.shutdown).filter(|d| *d > now.mono);
            return;
        }
        let reason = match (&j.load_error, j.last_reload) {
            (Some(e), None) => format!("its registry subtree could never be loaded: {e}"),
            (None, None) => "its registry subtree was not loaded yet".to_owned(),
            (Some(e), Some(_)) => format!(
                "its registry subtree could not be loaded again before the shutdown's grace ended: {e}"
            ),
            (None, Some(_)) => {
                "its registry subtree was not loaded again before the shutdown's grace ended"
                    .to_owned()
            }
        };
        let name = name.to_owned();
        self.forget_job(&name);
        self.out
            .push_back(Command::Event(MachineEvent::LeftUnloaded {
                job: name.clone(),
                reason,
            }));
        self.out
            .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
    }

    /// An operator shut the job down here (see [`MachineEvent::OperatorShutdown`]): leave it
    /// at once, cancelling its running items so that they move without waiting for a grace.
    fn operator_shutdown(&mut self, name: &str, now: Now) -> Action {
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };
        j.leaving = true;
        j.shut_down = true;
        j.leave_deadline = Some(now.mono);
        j.triggers.clear();
        j.trigger_run = None;
        self.out
            .push_back(Command::Event(MachineEvent::OperatorShutdown {
                job: name.to_owned(),
            }));
        self.decide(name, now)
    }

    fn decide(&mut self, name: &str, now: Now) -> Action {
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };
        // The view is kept in step with the cache; it is lent to the decision.
        let view = Arc::clone(j.cache.view());
        self.decide_with(name, &view, now)
    }

    fn decide_with(&mut self, name: &str, view: &JobView, now: Now) -> Action {
        let me = self.opts.instance_id.clone();
        let session = self.session_id();
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };
        for (path, error) in &view.corrupt {
            // Reported on every evaluation would flood; report once per distinct problem.
            let msg = format!("{path}: {error}");
            if j.reported_corrupt.insert(msg) {
                self.out
                    .push_back(Command::Event(MachineEvent::CorruptNode {
                        path: path.to_string(),
                        error: error.clone(),
                    }));
            }
        }
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };

        // Leaving: wait for local runs (the grace deadline cancels them), then leave.
        if j.leaving {
            let deadline = j.leave_deadline.or(self.shutdown);
            let grace_over = deadline.is_some_and(|d| now.mono >= d);
            let local: Vec<ExecutionId> = j.running.values().copied().collect();
            // Claimed ahead and not started: given back at once, nothing to wait for.
            let unstarted: Vec<ExecutionId> = local
                .iter()
                .copied()
                .filter(|id| self.executions.get(id).is_some_and(|e| e.pending.is_some()))
                .collect();
            if !unstarted.is_empty() {
                for id in unstarted {
                    self.release(id, now);
                }
                return Action::Nothing;
            }
            let Some(j) = self.jobs.get_mut(name) else {
                return Action::Nothing;
            };
            if !local.is_empty() && !planted!(self.opts, LeaveWhileRunning) {
                if !grace_over {
                    j.wake = deadline;
                } else {
                    for id in local {
                        if let Some(e) = self.executions.get_mut(&id) {
                            if !e.cancelled && !e.finished {
                                e.cancelled = true;
                                let reason = if self.shutdown.is_some() {
                                    CancelReason::Shutdown
                                } else if j.shut_down {
                                    CancelReason::OperatorShutdown
                                } else {
                                    CancelReason::JobRemoved
                                };
                                self.out.push_back(Command::Cancel { id, reason });
                            }
                        }
                    }
                }
                return Action::Nothing;
            }
            // A removed job waits for a suspended session: it comes back (and the job's nodes
            // are deleted) or is found expired (and they are gone with it). Left now, they
            // would stay as long as the session, holding the job's items. A shutdown does not
            // wait: it ends the session.
            if matches!(self.session, Session::Suspended(_)) && self.shutdown.is_none() {
                return Action::Nothing;
            }
            // The view may miss nodes a write of unknown outcome created (a registration whose
            // reply was lost, say): read the tree again first, or they would outlive the leave.
            if j.unsure && session.is_some() && self.shutdown.is_none() {
                self.start_load(name, now);
                return Action::Nothing;
            }
            let limit = j.txn_limit(&self.opts);
            let ops = session
                .map(|sid| leave_ops(j, view, &me, sid, limit))
                .unwrap_or_default();
            if ops.len() <= 1 {
                let name = name.to_owned();
                self.forget_job(&name);
                self.out
                    .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
                return Action::Nothing;
            }
            return Action::Txn(Purpose::Leave, ops);
        }

        let Some(sid) = session else {
            return Action::Nothing;
        };

        if view.instances.contains(&me) {
            j.node_gone = None;
        } else if j.registered_in == Some(sid) && !planted!(self.opts, IgnoreOperatorShutdown) {
            // Our node, seen in this very session, is gone: an operator deleted it (a remote
            // shutdown), or the session ended and took it. A probe sent after the deletion was
            // seen tells them apart: if it succeeds, the session outlived the deletion. If the
            // session ended, its expiry comes instead and the instance registers again in the
            // next session. Nothing is decided meanwhile (no registration, no claim).
            let marker = *j.node_gone.get_or_insert(self.next_request);
            if self.probe_ok > marker || planted!(self.opts, ShutdownWithoutProbe) {
                return self.operator_shutdown(name, now);
            }
            self.probe_waiters.insert(name.to_owned());
            self.probe_now(now);
            return Action::Nothing;
        }

        if j.phase == Phase::Loaded || j.phase == Phase::Blocked {
            return match setup_ops(j, view, &me, sid, now.wall_ms()) {
                Ok(ops) if ops.len() <= 1 => {
                    j.phase = Phase::Active;
                    let job = name.to_owned();
                    self.out
                        .push_back(Command::Event(MachineEvent::JobActive { job }));
                    self.decide_with(name, view, now)
                }
                Ok(ops) => Action::Txn(Purpose::Setup, ops),
                Err(event) => {
                    if j.phase != Phase::Blocked {
                        j.phase = Phase::Blocked;
                        self.out.push_back(Command::Event(event));
                    }
                    Action::Nothing
                }
            };
        }

        // Active.
        let Some(config) = j.config.clone() else {
            return Action::Nothing;
        };
        let standing = Standing::of(j, view, &me, sid);
        let gate = standing.gate(view, &me);
        if let Gate::Register = gate {
            // Our instance node is not there yet (a registration not visible yet, a new
            // session): register.
            j.phase = Phase::Loaded;
            return match setup_ops(j, view, &me, sid, now.wall_ms()) {
                Ok(ops) => Action::Txn(Purpose::Setup, ops),
                Err(_) => Action::Nothing,
            };
        }
        let Standing {
            enabled, i_lead, ..
        } = standing;
        if i_lead && !j.was_leader {
            self.out
                .push_back(Command::Event(MachineEvent::BecameLeader {
                    job: name.to_owned(),
                }));
        }
        j.was_leader = i_lead;

        match gate {
            Gate::Register | Gate::Items => {}
            Gate::Elect => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::create_ephemeral(j.paths.leader_instance(), me.as_str()),
                ];
                return Action::Txn(Purpose::Elect, ops);
            }
            Gate::Abdicate => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::Check(Check::Value(j.paths.leader_instance(), me.as_str().into())),
                    TxnOp::delete(j.paths.leader_instance()),
                ];
                return Action::Txn(Purpose::Abdicate, ops);
            }
            Gate::Trigger(param) => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::delete(j.paths.trigger(&me)),
                ];
                return Action::Txn(
                    Purpose::ConsumeTrigger {
                        parameter: param.to_owned(),
                    },
                    ops,
                );
            }
        }

        let mut wake: Vec<u64> = Vec::new();

        // Reconcile: reload the subtree every interval, so a change whose event was lost
        // cannot leave this instance acting on a stale view for long.
        let interval = u64::from(config.reconcile_interval_minutes).saturating_mul(60_000);
        if interval > 0 {
            if let Some(last) = j.last_reload {
                let due = last.saturating_add(interval);
                if now.mono >= due {
                    self.start_load(name, now);
                    return Action::Nothing;
                }
                wake.push(due);
            }
        }

        // Leader duties.
        if i_lead {
            let strategy = self
                .strategies
                .get(&config.job_sharding_strategy_type)
                .cloned();
            let Some(j) = self.jobs.get_mut(name) else {
                return Action::Nothing;
            };
            match reshard(
                j, view, &config, strategy, &me, sid, &self.opts, now, &mut wake,
            ) {
                Ok(Some(action)) => return action,
                Ok(None) => {}
                Err(problem) => self
                    .out
                    .push_back(Command::Event(MachineEvent::PlanRefused {
                        job: name.to_owned(),
                        strategy: config.job_sharding_strategy_type.clone(),
                        problem,
                    })),
            }
            let limit = j.txn_limit(&self.opts);
            if let Some(action) = housekeeping(j, view, &config, &me, sid, limit, now, &mut wake) {
                return action;
            }
        } else if let Some(j) = self.jobs.get_mut(name) {
            j.reshard_wanted = None;
            j.reshard_moved.clear();
            j.reshard_written = 0;
            j.reshard_plan = None;
        }

        // Markers of this session that no local execution holds: a claim whose reply was lost
        // (a timeout with unknown outcome) did apply. Adopt them: start what was claimed.
        if self.lease_valid(now) {
            if let Some(action) = self.adopt(name, view, &me, sid) {
                return action;
            }
        } else if self
            .jobs
            .get(name)
            .is_some_and(|j| adoptable(view, &me, sid, &j.running))
        {
            // Confirm the session first; the probe's reply evaluates the job again.
            self.probe_waiters.insert(name.to_owned());
            self.probe_now(now);
        }

        // Claims: own due items, triggers, failover.
        let can_claim = matches!(self.session, Session::Live(_)) && self.shutdown.is_none();
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };
        let held = j.held_for_reshard(view.necessary.is_some(), &self.opts, now, &mut wake);
        if can_claim && enabled {
            let decided = claims(j, view, &config, &me, sid, held, &self.opts, now, &mut wake);
            if let Some(action) = decided {
                return action;
            }
        }
        j.wake = wake.into_iter().min();
        Action::Nothing
    }

    /// A self-check of the machine's wake times, for the simulator and for tests: the jobs that
    /// would claim an item now, or want waking for one, earlier than their wake comes, while
    /// nothing else under way evaluates them again (a request, a load, a clock step not yet
    /// noticed). Such a job runs its items late, or never, unless the safety sweep or a change
    /// in the registry comes by. Empty unless the machine has a bug.
    ///
    /// It takes the claim decision of each job whose wake is not within a second, without
    /// acting on it, but only of the jobs whose view changed or that were decided on since
    /// the audit that left `mark`, or that it passed over while something was under way for
    /// them (all of them when the wall clock moved meanwhile): a decision on a job that did
    /// not change would be the one taken before. Call it now and then with the same mark, not
    /// on every event.
    pub fn late_wakes(&mut self, now: Now, mark: &mut AuditMark) -> Vec<LateWake> {
        let mut late = Vec::new();
        // A step since the last input is for the machine to notice at its next one.
        let stepped = self
            .clock_last
            .is_none_or(|before| wall_offset(now).saturating_sub(before).abs() > CLOCK_STEP_MS);
        let Some(sid) = self.session_id() else {
            return late;
        };
        if stepped || self.shutdown.is_some() || !matches!(self.session, Session::Live(_)) {
            return late;
        }
        let since = if mark.clock == self.clock_last {
            mark.changes
        } else {
            0
        };
        let recheck = std::mem::take(&mut mark.recheck);
        mark.changes = self.changes;
        mark.clock = self.clock_last;
        // A wake may come up to this much after the decision's time, as the wall clock drifts
        // (under a step) against the monotonic one between the decision and this check.
        let slack = CLOCK_STEP_MS.unsigned_abs() + 500;
        let me = self.opts.instance_id.clone();
        for (name, j) in &mut self.jobs {
            if j.changed <= since && !recheck.contains(name) {
                continue;
            }
            // Something under way decides on the job again soon: looked at again next time,
            // in case it does not.
            if j.wake.is_some_and(|w| w <= now.mono.saturating_add(slack))
                || j.busy.is_some()
                || j.loading.is_some()
                || j.sync.is_some()
                || j.retry_at.is_some()
                || self.probe_waiters.contains(name)
            {
                mark.recheck.insert(name.clone());
                continue;
            }
            if j.phase != Phase::Active || j.leaving {
                continue;
            }
            let Some(config) = j.config.clone() else {
                continue;
            };
            let view = Arc::clone(j.cache.view());
            // Only where the decision would come to the items, and claim from this server.
            let standing = Standing::of(j, &view, &me, sid);
            if !standing.enabled || !matches!(standing.gate(&view, &me), Gate::Items) {
                continue;
            }
            // The decision's own state, put back afterwards: this only looks.
            let kept = (
                j.owned_since.clone(),
                j.triggers.clone(),
                j.trigger_run.clone(),
                j.orphan_seen.clone(),
                j.necessary_seen,
                j.fires.clone(),
            );
            let mut wake = Vec::new();
            let held = j.held_for_reshard(view.necessary.is_some(), &self.opts, now, &mut wake);
            let claims_now = claims(
                j, &view, &config, &me, sid, held, &self.opts, now, &mut wake,
            );
            (
                j.owned_since,
                j.triggers,
                j.trigger_run,
                j.orphan_seen,
                j.necessary_seen,
                j.fires,
            ) = kept;
            let wanted = if claims_now.is_some() {
                Some(now.mono)
            } else {
                wake.into_iter().min()
            };
            if let Some(wanted) = wanted {
                if j.wake
                    .is_none_or(|w| w > wanted.max(now.mono).saturating_add(slack))
                {
                    late.push(LateWake {
                        job: name.clone(),
                        wake: j.wake,
                        wanted,
                    });
                }
            }
        }
        late
    }

    /// Starts executions for running markers this session created but holds no execution
    /// for (their claim's reply was lost).
    fn adopt(
        &mut self,
        name: &str,
        view: &JobView,
        me: &InstanceId,
        sid: crate::registry::SessionId,
    ) -> Option<Action> {
        let j = self.jobs.get(name)?;
        let mut groups: BTreeMap<RunKey, Vec<(ExecItem, Revision)>> = BTreeMap::new();
        let mut ops = vec![TxnOp::Check(Check::Session(sid))];
        ops.push(TxnOp::Check(Check::Exists(j.paths.instance(me))));
        // Within the transaction limit; the next evaluation adopts the rest.
        let limit = j.txn_limit(&self.opts).unwrap_or(usize::MAX);
        let mut taken = 0usize;
        for (item, v) in &view.items {
            if taken >= limit {
                break;
            }
            if j.running.contains_key(item) {
                continue;
            }
            let Some(stat) = session_marker(v, me, sid) else {
                continue;
            };
            // Not while an operator has it disabled: it stays claimed, and starts once the
            // item is enabled again.
            if v.disabled && !planted!(self.opts, RunDisabledItems) {
                continue;
            }
            let Some((record, version)) = &v.record else {
                continue;
            };
            let Some(run) = &record.run else { continue };
            if run.instance != *me {
                continue;
            }
            let failover = match (run.kind, &v.failover) {
                (RunKind::Failover, Some(f)) => Some(f.version),
                _ => None,
            };
            // The cache may be behind: start only what the registry confirms is still ours.
            ops.push(TxnOp::Check(Check::Version(
                j.paths.item_running(*item),
                stat.version,
            )));
            ops.push(TxnOp::Check(Check::Value(
                j.paths.item_running(*item),
                me.as_str().into(),
            )));
            ops.push(TxnOp::Check(Check::Version(
                j.paths.item_execution(*item),
                *version,
            )));
            ops.push(TxnOp::Check(Check::Absent(j.paths.item_disabled(*item))));
            taken += 1;
            groups.entry((run.fire, run.kind)).or_default().push((
                ExecItem {
                    item: *item,
                    running_version: stat.version,
                    record_version: *version,
                    record: record.clone(),
                    failover,
                },
                stat.created,
            ));
        }
        if groups.is_empty() {
            return None;
        }
        Some(Action::Txn(
            Purpose::Adopt(groups.into_iter().collect()),
            ops,
        ))
    }

    /// Records an execution and marks its items running here. `finished` is for one that is
    /// not started at all (its end is recorded at once).
    fn insert_execution(
        &mut self,
        name: &str,
        fire: i64,
        counts_as_fire: bool,
        items: Vec<ExecItem>,
        finished: bool,
    ) -> ExecutionId {
        self.next_execution += 1;
        let id = ExecutionId(self.next_execution);
        if let Some(j) = self.jobs.get_mut(name) {
            for it in &items {
                j.running.insert(it.item, id);
            }
        }
        let exec = Exec {
            job: name.to_owned(),
            epoch: self.epoch,
            fire,
            counts_as_fire,
            items,
            cancelled: finished,
            finished,
            completing: false,
            sending: 0,
            retry_at: None,
            backoff: 0,
            pending: None,
            started: false,
            enabled_at: None,
        };
        self.executions.insert(id, exec);
        id
    }

    /// Records a new execution and asks the driver to start it.
    #[allow(clippy::too_many_arguments)]
    fn start_execution(
        &mut self,
        name: &str,
        fire: i64,
        kind: RunKind,
        counts_as_fire: bool,
        parameter: Option<String>,
        items: Vec<(ExecItem, Revision)>,
        now: Now,
    ) -> Option<ExecutionId> {
        let config = self.jobs.get(name)?.config.clone()?;
        let runs: Vec<ItemRun> = items
            .iter()
            .map(|(it, token)| ItemRun {
                item: it.item,
                parameter: config.item_parameter(it.item).map(str::to_owned),
                fencing_token: *token,
            })
            .collect();
        let item_list: Vec<String> = runs.iter().map(|r| r.item.to_string()).collect();
        let exec_items = items.into_iter().map(|(it, _)| it).collect();
        let id = self.insert_execution(name, fire, counts_as_fire, exec_items, false);
        let job_parameter = match (&kind, &parameter) {
            (RunKind::Trigger, Some(p)) if !p.is_empty() => p.clone(),
            _ => config.job_parameter.clone(),
        };
        let task_id = format!(
            "{name}{DELIMITER}{}{DELIMITER}READY{DELIMITER}{}",
            item_list.join(","),
            self.opts.instance_id
        );
        let execution = Execution {
            id,
            job_name: name.to_owned(),
            task_id,
            sharding_total_count: config.sharding_total_count,
            job_parameter,
            fire_time: DateTime::<Utc>::from_timestamp_millis(fire).unwrap_or_default(),
            kind,
            items: runs,
        };
        if fire > now.wall_ms() && kind != RunKind::Trigger {
            // Claimed ahead: started when the fire comes.
            let at = now.mono_at(fire);
            if let Some(e) = self.executions.get_mut(&id) {
                e.pending = Some(if self.opts.prepare_ahead {
                    self.out.push_back(Command::Prepare(execution));
                    Ahead::Prepared
                } else {
                    Ahead::Held(execution)
                });
                self.starts.insert((at, id));
            }
            let enabled = !self.disabled_since_claim(id);
            let disables = self.disables;
            if let Some(e) = self.executions.get_mut(&id) {
                e.enabled_at = enabled.then_some(disables);
            }
        } else {
            if let Some(e) = self.executions.get_mut(&id) {
                e.started = true;
            }
            self.out.push_back(Command::Start(execution));
        }
        Some(id)
    }

    /// Hands the driver the executions claimed ahead whose fire has come, if the session is
    /// sure; releases them otherwise.
    fn start_due(&mut self, now: Now) {
        let mut handled = 0;
        // The view must be recent too: after a pause or a cut longer than the claim's lead,
        // an operator's disable may not have reached it. Then the claim is given back, and
        // claimed again with the registry's own checks.
        let fresh = matches!(self.session, Session::Live(_))
            && self.confirmed.is_some_and(|c| {
                now.mono.saturating_sub(c)
                    <= ms(self.opts.claim_ahead).saturating_add(FRESH_VIEW_MS)
            });
        let lease_ok = self.lease_valid(now) && fresh;
        while let Some(&(t, id)) = self.starts.first() {
            if t > now.mono || handled == START_CHUNK {
                break;
            }
            handled += 1;
            self.starts.remove(&(t, id));
            // Entries of executions given back or gone meanwhile are stale.
            let Some(e) = self.executions.get(&id) else {
                continue;
            };
            if e.pending.is_none() {
                continue;
            }
            // Nothing disabled at the claim, and no disable seen since: no need to look.
            let go = lease_ok
                && e.epoch == self.epoch
                && !e.cancelled
                && (e.enabled_at == Some(self.disables) || !self.disabled_since_claim(id));
            let Some(e) = self.executions.get_mut(&id) else {
                continue;
            };
            if go {
                match e.pending.take() {
                    Some(Ahead::Held(execution)) => self.out.push_back(Command::Start(execution)),
                    Some(Ahead::Prepared) => self.out.push_back(Command::StartPrepared(id)),
                    None => continue,
                }
                e.started = true;
            } else {
                self.release(id, now);
            }
        }
    }

    /// Whether an operator disabled one of the execution's items, or this server, after the
    /// claim: a run claimed ahead then does not start.
    fn disabled_since_claim(&self, id: ExecutionId) -> bool {
        let Some(e) = self.executions.get(&id) else {
            return false;
        };
        let Some(j) = self.jobs.get(&e.job) else {
            return false;
        };
        let view = j.cache.view();
        !view.server_enabled(self.opts.instance_id.server_ip())
            || e.items
                .iter()
                .any(|it| view.items.get(&it.item).is_some_and(|v| v.disabled))
    }

    /// Gives up an execution claimed ahead that never started: its markers go and its records
    /// return to what they were, so the fire is run later (here or elsewhere), not lost.
    fn release(&mut self, id: ExecutionId, now: Now) {
        let Some(e) = self.executions.get_mut(&id) else {
            return;
        };
        if matches!(e.pending.take(), Some(Ahead::Prepared)) {
            self.out.push_back(Command::Discard(id));
        }
        e.counts_as_fire = false;
        e.cancelled = true;
        e.finished = true;
        if e.epoch == self.epoch && self.session != Session::None {
            self.send_completion(id, now);
        } else {
            self.complete_lost(id);
        }
    }

    // ----- replies -----

    fn on_txn(&mut self, job: Option<String>, purpose: Purpose, reply: RegistryReply, now: Now) {
        let Some(name) = job else { return };
        let what = match &purpose {
            Purpose::Setup => "setup",
            Purpose::Elect => "election",
            Purpose::Abdicate => "abdication",
            Purpose::Reshard { .. } => "re-sharding",
            Purpose::Housekeeping { .. } => "housekeeping",
            Purpose::Flag => "re-sharding flag",
            Purpose::ConsumeTrigger { .. } => "trigger",
            Purpose::Leave => "leave",
            _ => "request",
        };
        match reply {
            RegistryReply::Transacted(results) => {
                let timeout = ms(self.opts.sync_timeout);
                let Some(j) = self.jobs.get_mut(&name) else {
                    return;
                };
                j.backoff = 0;
                j.await_own_writes(&results, now, timeout);
                match purpose {
                    Purpose::Setup => {
                        j.phase = Phase::Active;
                        self.out
                            .push_back(Command::Event(MachineEvent::JobActive { job: name }));
                    }
                    Purpose::Reshard {
                        owners,
                        moved_running,
                        last,
                        items,
                        remaining,
                        ..
                    } => {
                        j.reshard_moved.extend(moved_running);
                        let before = j.reshard_written;
                        j.reshard_written = before.saturating_add(items);
                        if !last
                            && j.reshard_written / RESHARD_PROGRESS_STEP
                                > before / RESHARD_PROGRESS_STEP
                        {
                            let written = j.reshard_written;
                            self.out
                                .push_back(Command::Event(MachineEvent::ReshardProgress {
                                    job: name.clone(),
                                    written,
                                    total: written.saturating_add(remaining),
                                }));
                        }
                        if last {
                            // The whole plan is written: the next difference is a new re-shard.
                            j.reshard_wanted = None;
                            j.reshard_written = 0;
                            j.reshard_plan = None;
                            let mut moved_running = std::mem::take(&mut j.reshard_moved);
                            moved_running.sort_unstable();
                            moved_running.dedup();
                            self.out.push_back(Command::Event(MachineEvent::Resharded {
                                job: name,
                                owners,
                                moved_running,
                            }));
                        }
                    }
                    // A part of the clean-up (not `last`): the next evaluation removes the rest.
                    Purpose::Housekeeping { last: true, .. } => {
                        j.last_housekeeping = Some(now.mono);
                    }
                    Purpose::ConsumeTrigger { parameter } => j.triggers.push_back(parameter),
                    Purpose::Leave => {
                        self.forget_job(&name);
                        self.out
                            .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
                        self.finish_shutdown_if_done();
                    }
                    _ => {}
                }
            }
            RegistryReply::Failed(error) => {
                let units = match &purpose {
                    Purpose::Reshard { units, .. } | Purpose::Housekeeping { units, .. } => *units,
                    _ => 0,
                };
                if self.split_on_too_large(&name, &error, units) {
                    return;
                }
                let class = error.class();
                // A conflict in an election or a trigger race is normal: someone else won.
                let quiet = class == ErrorClass::Conflict
                    && matches!(purpose, Purpose::Elect | Purpose::ConsumeTrigger { .. });
                if !quiet {
                    self.failed(Some(&name), what, error.clone());
                }
                if let Purpose::Housekeeping { .. } = purpose {
                    if let Some(j) = self.jobs.get_mut(&name) {
                        j.last_housekeeping = Some(now.mono);
                    }
                }
                // The registry is not as the plan expected: work it out again.
                if let Purpose::Reshard { .. } = purpose {
                    if let Some(j) = self.jobs.get_mut(&name) {
                        j.reshard_plan = None;
                    }
                }
                self.after_failure(&name, class, now);
            }
            _ => {}
        }
    }

    /// If the registry refused a transaction of `units` items as too large, lowers the job's
    /// limit to half of them and lets the next evaluation (right after this reply) try again
    /// with smaller transactions. Returns whether it did; a one-item transaction cannot be
    /// split and fails as usual.
    fn split_on_too_large(&mut self, name: &str, error: &RegistryError, units: usize) -> bool {
        if !matches!(error.root_cause(), RegistryError::TooLarge(_)) || units <= 1 {
            return false;
        }
        let Some(j) = self.jobs.get_mut(name) else {
            return false;
        };
        let half = units / 2;
        let items = j.txn_items.map_or(half, |k| k.min(half)).max(1);
        j.txn_items = Some(items);
        self.out.push_back(Command::Event(MachineEvent::TxnSplit {
            job: name.to_owned(),
            items,
        }));
        true
    }

    fn after_failure(&mut self, name: &str, class: ErrorClass, now: Now) {
        match class {
            ErrorClass::Conflict => {
                // The cache was stale or someone raced us: wait for the watch to catch up,
                // and reload if it does not within a backoff.
                let t = self.backoff_of(name, now);
                if let Some(j) = self.jobs.get_mut(name) {
                    j.retry_at = Some(t);
                    if j.backoff > 3 {
                        j.backoff = 0;
                        self.start_load(name, now);
                    }
                }
            }
            ErrorClass::Transient | ErrorClass::Fatal => {
                let t = self.backoff_of(name, now);
                if let Some(j) = self.jobs.get_mut(name) {
                    j.retry_at = Some(t);
                }
            }
            ErrorClass::LostSession => {}
        }
    }

    fn on_claim(
        &mut self,
        job: Option<String>,
        claims: Vec<Claim>,
        reply: RegistryReply,
        now: Now,
    ) {
        let Some(name) = job else { return };
        let results = match reply {
            RegistryReply::Transacted(results) => results,
            RegistryReply::Failed(error) => {
                let class = error.class();
                let units = claims.iter().map(|c| c.items.len()).sum();
                if self.split_on_too_large(&name, &error, units) {
                    // Nothing was claimed; the next evaluation claims fewer items at a time.
                } else {
                    if class != ErrorClass::Conflict {
                        self.failed(Some(&name), "claim", error);
                    }
                    self.after_failure(&name, class, now);
                }
                if planted!(self.opts, IgnoreFailedClaim) {
                    for claim in claims {
                        let items = claim
                            .items
                            .iter()
                            .map(|c| {
                                let it = ExecItem {
                                    item: c.item,
                                    running_version: Version(0),
                                    record_version: Version(0),
                                    record: c.record.clone(),
                                    failover: None,
                                };
                                (it, Revision(0))
                            })
                            .collect();
                        let (fire, kind, counts) = (claim.fire, claim.kind, claim.counts_as_fire);
                        let param = claim.parameter;
                        self.start_execution(&name, fire, kind, counts, param, items, now);
                    }
                }
                return;
            }
            _ => return,
        };
        let lease_ok = self.lease_valid(now);
        let epoch = self.epoch;
        let session = self.session_id();
        let timeout = ms(self.opts.sync_timeout);
        let Some(j) = self.jobs.get_mut(&name) else {
            return;
        };
        j.backoff = 0;
        j.await_own_writes(&results, now, timeout);
        if let Some(run) = &mut j.trigger_run {
            for claim in claims.iter().filter(|c| c.kind == RunKind::Trigger) {
                for c in &claim.items {
                    run.items.remove(&c.item);
                }
            }
            if run.items.is_empty() {
                j.trigger_run = None;
            }
        }
        for claim in claims {
            let mut items = Vec::new();
            for c in &claim.items {
                let (Some(running), Some(record)) = (
                    created_stat(&results, c.running_op),
                    written_version(&results, c.record_op),
                ) else {
                    continue;
                };
                let failover = c
                    .failover_op
                    .and_then(|i| created_stat(&results, i))
                    .map(|s| s.version);
                items.push((
                    ExecItem {
                        item: c.item,
                        running_version: running.version,
                        record_version: record,
                        record: c.record.clone(),
                        failover,
                    },
                    running.created,
                ));
            }
            if !lease_ok || session.is_none() || epoch != self.epoch {
                // The claim succeeded, but too late to be sure of the session for long
                // enough: do not start; record the end at once so the markers go.
                let exec_items = items.into_iter().map(|(i, _)| i).collect();
                let id = self.insert_execution(&name, claim.fire, false, exec_items, true);
                self.send_completion(id, now);
                continue;
            }
            self.start_execution(
                &name,
                claim.fire,
                claim.kind,
                claim.counts_as_fire,
                claim.parameter,
                items,
                now,
            );
        }
    }

    fn send_completion(&mut self, id: ExecutionId, now: Now) {
        let Some(sid) = self.session_id() else {
            // Suspended: retry when reconnected (or lose it on expiry).
            if let Some(e) = self.executions.get_mut(&id) {
                let t = now.mono.saturating_add(ms(self.opts.retry_backoff));
                e.retry_at = Some(t);
                self.retries.insert((t, id));
            }
            return;
        };
        let Some(exec) = self.executions.get_mut(&id) else {
            return;
        };
        if exec.completing {
            return;
        }
        exec.completing = true;
        let Some(job) = self.jobs.get(&exec.job) else {
            self.executions.remove(&id);
            return;
        };
        // With a transaction limit the end is recorded in parts, the first items first: each
        // part removes only its own items' markers and records only their fire.
        let take = job
            .txn_limit(&self.opts)
            .map_or(exec.items.len(), |k| k.min(exec.items.len()));
        exec.sending = take;
        let part = &exec.items[..take];
        let mut ops = vec![TxnOp::Check(Check::Session(sid))];
        for it in part {
            ops.push(TxnOp::Delete {
                path: job.paths.item_running(it.item),
                expected: Some(it.running_version),
            });
            if let Some(v) = it.failover {
                ops.push(TxnOp::Delete {
                    path: job.paths.item_failover(it.item),
                    expected: Some(v),
                });
            }
        }
        for it in part {
            let done = if exec.counts_as_fire && !planted!(self.opts, ForgetCompletion) {
                Some(it.record.done.map_or(exec.fire, |d| d.max(exec.fire)))
            } else {
                it.record.done
            };
            let record = ItemRecord { done, run: None };
            ops.push(TxnOp::Set {
                path: job.paths.item_execution(it.item),
                data: record.to_bytes(),
                expected: Some(it.record_version),
            });
        }
        let name = exec.job.clone();
        self.request(
            Some(&name),
            Purpose::Complete(id),
            RegistryOp::Transact(ops),
            now,
        );
    }

    fn on_complete(&mut self, id: ExecutionId, reply: RegistryReply, now: Now) {
        match reply {
            RegistryReply::Transacted(results) => {
                let Some(exec) = self.executions.get_mut(&id) else {
                    return;
                };
                let take = exec.sending.min(exec.items.len());
                let recorded: Vec<ExecItem> = exec.items.drain(..take).collect();
                let (job, started) = (exec.job.clone(), exec.started);
                let rest = !exec.items.is_empty();
                if rest {
                    exec.completing = false;
                    exec.backoff = 0;
                } else {
                    self.executions.remove(&id);
                }
                if started {
                    self.out
                        .push_back(Command::Event(MachineEvent::RunRecorded {
                            job: job.clone(),
                            items: recorded.iter().map(|i| i.item).collect(),
                        }));
                }
                if let Some(j) = self.jobs.get_mut(&job) {
                    for it in &recorded {
                        if j.running.get(&it.item) == Some(&id) {
                            j.running.remove(&it.item);
                        }
                        j.last_end.insert(it.item, now.wall_ms());
                    }
                    j.await_own_writes(&results, now, ms(self.opts.sync_timeout));
                }
                if rest {
                    // The next part at once.
                    self.send_completion(id, now);
                }
            }
            RegistryReply::Failed(error) => {
                let class = error.class();
                let sent = self.executions.get(&id).map(|e| (e.job.clone(), e.sending));
                if let Some((job, units)) = sent {
                    if self.split_on_too_large(&job, &error, units) {
                        if let Some(e) = self.executions.get_mut(&id) {
                            e.completing = false;
                        }
                        self.send_completion(id, now);
                        return;
                    }
                }
                match class {
                    ErrorClass::Transient => {
                        if let Some(e) = self.executions.get_mut(&id) {
                            e.completing = false;
                            let delay = ms(self.opts.retry_backoff) << e.backoff.min(4);
                            e.backoff += 1;
                            let t = now.mono.saturating_add(delay);
                            e.retry_at = Some(t);
                            self.retries.insert((t, id));
                        }
                    }
                    _ => {
                        let job = self.executions.get(&id).map(|e| e.job.clone());
                        self.failed(job.as_deref(), "completion", error);
                        self.complete_lost(id);
                    }
                }
            }
            _ => {}
        }
    }

    /// Forgets an execution whose end cannot be recorded.
    fn complete_lost(&mut self, id: ExecutionId) {
        let Some(exec) = self.executions.remove(&id) else {
            return;
        };
        if matches!(exec.pending, Some(Ahead::Prepared)) {
            self.out.push_back(Command::Discard(id));
        }
        if let Some(j) = self.jobs.get_mut(&exec.job) {
            for it in &exec.items {
                if j.running.get(&it.item) == Some(&id) {
                    j.running.remove(&it.item);
                }
            }
        }
        if exec.started {
            self.out
                .push_back(Command::Event(MachineEvent::CompletionLost {
                    job: exec.job,
                    items: exec.items.iter().map(|i| i.item).collect(),
                }));
        }
    }

    fn finish_shutdown_if_done(&mut self) {
        if self.shutdown.is_none() || self.stopped {
            return;
        }
        if !self.jobs.is_empty() {
            return;
        }
        let busy = self
            .pending
            .values()
            .any(|p| matches!(p.purpose, Purpose::Complete(_) | Purpose::Leave));
        if !busy {
            self.out.push_back(Command::CloseSession);
            self.stopped = true;
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn created_stat(results: &[TxnOpResult], index: usize) -> Option<crate::registry::Stat> {
    match results.get(index) {
        Some(TxnOpResult::Created(stat)) => Some(*stat),
        _ => None,
    }
}

fn written_version(results: &[TxnOpResult], index: usize) -> Option<Version> {
    match results.get(index) {
        Some(TxnOpResult::Created(stat) | TxnOpResult::Set(stat)) => Some(stat.version),
        _ => None,
    }
}

fn last_revision(results: &[TxnOpResult]) -> Option<Revision> {
    results
        .iter()
        .filter_map(|r| match r {
            TxnOpResult::Created(s) | TxnOpResult::Set(s) => Some(s.modified),
            _ => None,
        })
        .max()
}

/// The skeleton, configuration and registration of a job, in one transaction.
fn setup_ops(
    j: &mut Job,
    view: &JobView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    now_ms: i64,
) -> Result<Vec<TxnOp>, MachineEvent> {
    let name = j.name().to_owned();
    let root = j.paths.root().clone();
    let stored_type = j
        .cache
        .root()
        .and_then(|data| std::str::from_utf8(data).ok())
        .map(str::trim)
        .unwrap_or("");
    if !stored_type.is_empty() && stored_type != j.job_type {
        return Err(MachineEvent::JobTypeConflict {
            job: name,
            registry: stored_type.to_owned(),
            local: j.job_type.clone(),
        });
    }
    let mut ops = vec![TxnOp::Check(Check::Session(sid))];
    if j.cache.root().is_none() {
        ops.push(TxnOp::create(root.clone(), j.job_type.as_str()));
    } else if stored_type.is_empty() {
        ops.push(TxnOp::set(root.clone(), j.job_type.as_str()));
    }
    let config_path = j.paths.config();
    let has_config = j.cache.config().is_some();
    if !has_config || j.local.overwrite {
        let yaml = j.local.to_yaml();
        if has_config {
            ops.push(TxnOp::set(config_path, yaml.clone()));
        } else {
            ops.push(TxnOp::create(config_path, yaml.clone()));
        }
        j.config = Some(Arc::clone(&j.local));
        j.config_seen = None;
        j.written_config = Some(yaml);
    } else if j.config.is_none() {
        return Err(MachineEvent::ConfigInvalid {
            job: name,
            error: j
                .last_config_error
                .clone()
                .unwrap_or_else(|| "the registry holds no usable configuration".to_owned()),
        });
    }
    let p = &j.paths;
    // Whether this registration starts the job's cluster: the `instances` node exists and no
    // instance node does, not even one of ours from an earlier session. Proved in the
    // transaction (see "Start-up after downtime" in the module documentation): a start
    // writes the `instances` node after creating its instance node, checking the version it
    // saw, and every registration into a non-empty directory checks that one node it saw
    // there still exists.
    let registers = j
        .cache
        .own_instance()
        .is_none_or(|stat| stat.ephemeral_owner.is_some_and(|o| o != sid));
    let other = view.instances.iter().find(|id| *id != me);
    let starts = registers
        && other.is_none()
        && j.cache.own_instance().is_none()
        && j.cache.has_dir(Dir::Instances);
    for (dir, path) in Dir::all(p) {
        if !j.cache.has_dir(dir) {
            ops.push(TxnOp::create(path, Vec::<u8>::new()));
        }
    }
    if let (true, Some(other)) = (registers, other) {
        ops.push(TxnOp::Check(Check::Exists(p.instance(other))));
    }
    if !view.servers.contains_key(me.server_ip()) {
        let server = p.server_of(me);
        let disabled = j.config.as_ref().is_some_and(|c| c.disabled);
        ops.push(TxnOp::create(
            server,
            if disabled { "DISABLED" } else { "ENABLED" },
        ));
    }
    let instance = p.instance(me);
    let value = format!("jobInstanceId: {me}\nserverIp: {}\n", me.server_ip());
    match j.cache.own_instance() {
        Some(stat) if stat.ephemeral_owner.is_none_or(|o| o == sid) => {}
        Some(stat) => {
            // A node of ours from an earlier session (a restarted registry can show it for
            // one more timeout): replace it.
            ops.push(TxnOp::Delete {
                path: instance.clone(),
                expected: Some(stat.version),
            });
            ops.push(TxnOp::create_ephemeral(instance, value));
        }
        None => ops.push(TxnOp::create_ephemeral(instance, value)),
    }
    if starts {
        // After the instance node: a watcher that has seen only a part of this transaction
        // sees either the old version (its own start fails the check) or this instance.
        let start = StartRecord {
            started: Some(now_ms),
        };
        ops.push(TxnOp::Set {
            path: p.instances(),
            data: start.to_bytes(),
            expected: j.cache.instances_version(),
        });
    }
    Ok(ops)
}

fn leave_ops(
    j: &Job,
    view: &JobView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    limit: Option<usize>,
) -> Vec<TxnOp> {
    let p = &j.paths;
    let mut ops = vec![TxnOp::Check(Check::Session(sid))];
    // Run markers and failover nodes of this session: by now no local run holds any, so they
    // are claims whose reply was lost. Left, they would keep their items "running", or their
    // failover taken, for the session's life; deleted, the fire is one whose attempt died.
    // Within the transaction limit (in items); the next round deletes the rest.
    let orphans = view
        .items
        .iter()
        .filter(|(item, _)| !j.running.contains_key(item))
        .filter_map(|(item, v)| {
            let marker = session_marker(v, me, sid);
            let failover = v.failover.filter(|stat| stat.ephemeral_owner == Some(sid));
            let deletes: Vec<TxnOp> = marker
                .map(|stat| (p.item_running(*item), stat.version))
                .into_iter()
                .chain(failover.map(|stat| (p.item_failover(*item), stat.version)))
                .map(|(path, version)| TxnOp::Delete {
                    path,
                    expected: Some(version),
                })
                .collect();
            (!deletes.is_empty()).then_some(deletes)
        });
    ops.extend(orphans.take(limit.unwrap_or(usize::MAX)).flatten());
    if view.instances.contains(me) {
        ops.push(TxnOp::delete(p.instance(me)));
    }
    if view.leader.as_deref() == Some(me.as_str()) {
        ops.push(TxnOp::Check(Check::Value(
            p.leader_instance(),
            me.as_str().into(),
        )));
        ops.push(TxnOp::delete(p.leader_instance()));
    }
    if view.triggers.contains_key(me) {
        ops.push(TxnOp::delete(p.trigger(me)));
    }
    // The server node goes with its last instance, unless an operator disabled it.
    let ip = me.server_ip();
    let others_on_ip = view
        .instances
        .iter()
        .any(|i| i != me && i.server_ip() == ip);
    if !others_on_ip && view.servers.get(ip).is_some_and(|v| v.trim() == "ENABLED") {
        ops.push(TxnOp::Check(Check::Value(
            p.server_of(me),
            b"ENABLED".to_vec(),
        )));
        ops.push(TxnOp::delete(p.server_of(me)));
    }
    ops
}

/// The leader's re-sharding decision: the transaction to send, if any, or what is wrong with
/// the assignment the strategy gave (the plan then stays as it is).
#[allow(clippy::too_many_arguments)]
fn reshard(
    j: &mut Job,
    view: &JobView,
    config: &JobConfig,
    custom: Option<Arc<dyn ShardingStrategy>>,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    opts: &MachineOptions,
    now: Now,
    wake: &mut Vec<u64>,
) -> Result<Option<Action>, String> {
    let n = config.sharding_total_count;
    // Fires change only the items' run markers and records: the plan needs nothing then, and
    // working out the target assignment again would cost every evaluation of the leader. The
    // one exception: an item beyond the count whose run has ended can now be removed.
    let removable = view
        .items
        .range(n..)
        .any(|(_, v)| v.exists && v.running.is_none());
    if j.reshard_idle == Some(j.cache.plan_version) && !removable {
        return Ok(None);
    }
    let candidates = registry_order(view.eligible());
    if candidates.is_empty() {
        return Ok(None);
    }
    let key = PlanKey {
        candidates,
        total: n,
        strategy: config.job_sharding_strategy_type.clone(),
        static_sharding: config.static_sharding,
    };
    if let Some(action) = next_part(j, view, &key, me, sid, opts, now) {
        return Ok(Some(action));
    }
    let candidates = key.candidates.clone();
    let live: BTreeSet<&InstanceId> = candidates.iter().collect();
    let target: Assignment = match custom {
        Some(s) => s.shard(&candidates, j.name(), n),
        None => config
            .job_sharding_strategy_type
            .parse::<BuiltinStrategy>()
            .unwrap_or_default()
            .shard(&candidates, j.name(), n),
    };
    if let Some(problem) = assignment_problem(&target, &live, n) {
        // A custom strategy broke its contract. Keep the plan; work the assignment out again
        // only when what it depends on changes.
        j.reshard_idle = Some(j.cache.plan_version);
        return Err(problem);
    }
    // Each item's target owner, in one pass (a search per item would cost the whole
    // assignment per item: n² for a job of n items).
    let target_owners = target.owners(n);
    let mut owners: BTreeMap<u32, InstanceId> = BTreeMap::new();
    let mut moving: Vec<u32> = Vec::new();
    for item in 0..n {
        let current = view.items.get(&item).and_then(|v| v.owner.clone());
        let valid = current.as_ref().is_some_and(|c| live.contains(c));
        let want = if config.static_sharding && valid {
            current.clone()
        } else {
            target_owners.get(item as usize).copied().flatten().cloned()
        };
        let Some(want) = want else { continue };
        if current.as_ref() != Some(&want) {
            moving.push(item);
        }
        owners.insert(item, want);
    }
    let is_running = |i: &u32| view.items.get(i).is_some_and(|v| v.running.is_some());
    // Items beyond the count are removed, but not while they still run: their `running` marker
    // is what keeps a later run of the same number (the count grown back meanwhile) from
    // overlapping the old one. Nothing else waits for them, as no one claims an item beyond
    // the count; they are removed once their run ends, which the leader watches for (see
    // [`Machine::bears_on_me`]).
    let removed: Vec<u32> = view
        .items
        .range(n..)
        .filter(|(i, v)| v.exists && !is_running(i))
        .map(|(i, _)| *i)
        .collect();
    if moving.is_empty() && removed.is_empty() && view.necessary.is_none() {
        j.reshard_wanted = None;
        j.reshard_moved.clear();
        j.reshard_written = 0;
        j.reshard_plan = None;
        j.reshard_idle = Some(j.cache.plan_version);
        return Ok(None);
    }
    if waiting(&mut j.reshard_wanted, ms(opts.reshard_debounce), now, wake) {
        return Ok(None);
    }
    // Items that run under a live owner wait for their run to end, up to a deadline. The
    // `running` marker keeps the new owner from starting them while the old run lasts, so
    // after the deadline they move anyway: waiting longer could starve a job whose runs
    // overlap forever. Items of owners that are gone, or that run a failover, move at once.
    let owner_live = |i: &u32| {
        view.items
            .get(i)
            .and_then(|v| v.owner.as_ref())
            .is_some_and(|o| live.contains(o))
    };
    let blocked: Vec<u32> = moving
        .iter()
        .copied()
        .filter(|i| is_running(i) && owner_live(i))
        .collect();
    // The debounce above started `reshard_wanted`: the wait for running items counts from it.
    let wanted = j.reshard_wanted.unwrap_or(now.mono);
    let wait_end = wanted.saturating_add(ms(opts.reshard_wait));
    let p = &j.paths;
    let mut ops = vec![
        TxnOp::Check(Check::Session(sid)),
        TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
    ];
    if !blocked.is_empty() && now.mono < wait_end {
        wake.push(wait_end);
        if view.necessary.is_none() {
            ops.push(TxnOp::create(p.sharding_necessary(), Vec::<u8>::new()));
            return Ok(Some(Action::Txn(Purpose::Flag, ops)));
        }
        return Ok(None);
    }
    // Within the transaction limit: moves and new items first (one unit each), then removals
    // (two units: an item and its state). Each item's change stands on its own: an item whose
    // owner is written can no longer be claimed by the old owner (claims check the owner in
    // the registry), one not written yet stays with its old owner until the next part. The
    // flag goes with the last part, so a leader that dies meanwhile leaves it for the next.
    let limit = j.txn_limit(opts).unwrap_or(usize::MAX);
    let mut units = 0usize;
    let mut last = true;
    let mut part_moving: Vec<u32> = Vec::new();
    for item in &moving {
        if units >= limit {
            last = false;
            break;
        }
        units += 1;
        part_moving.push(*item);
    }
    let mut part_removed: Vec<u32> = Vec::new();
    for item in &removed {
        if units > 0 && units.saturating_add(2) > limit {
            last = false;
            break;
        }
        units += 2;
        part_removed.push(*item);
    }
    let remaining =
        (moving.len() + removed.len()).saturating_sub(part_moving.len() + part_removed.len());
    // A re-shard of more parts to come, with nothing that holds it (runs, items to remove, the
    // flag): the parts after this one are taken from the plan as worked out now (see
    // [`next_part`]), not by working the whole plan out again for each.
    j.reshard_plan = (!last && removed.is_empty() && view.running == 0 && view.necessary.is_none())
        .then(|| {
            Box::new(ReshardPlan {
                key,
                owners: owners.clone(),
                todo: moving.clone(),
                // This part writes the first items of `moving`.
                cursor: part_moving.len(),
            })
        });
    let (moving, removed) = (part_moving, part_removed);
    let moved_running: Vec<u32> = moving.iter().copied().filter(is_running).collect();
    if let (Some(v), true) = (view.necessary, last) {
        ops.push(TxnOp::Delete {
            path: p.sharding_necessary(),
            expected: Some(v),
        });
    }
    for item in &removed {
        for path in j.cache.item_descendants_deepest_first(p, view, *item) {
            ops.push(TxnOp::delete(path));
        }
        ops.push(TxnOp::delete(p.item(*item)));
    }
    // The latest fire done by any item, those removed now included, is kept in the `sharding`
    // node's data (ElasticJob leaves it empty), so that it outlives the items.
    let latest_done = latest_done(view);
    let removed_done = removed
        .iter()
        .filter_map(|i| view.items.get(i))
        .filter_map(|v| v.record.as_ref().and_then(|(r, _)| r.done))
        .max();
    if removed_done.is_some_and(|d| view.sharding_done.is_none_or(|s| d > s)) {
        let mark = ItemRecord {
            done: removed_done,
            run: None,
        };
        ops.push(TxnOp::set(p.sharding(), mark.to_bytes()));
    }
    // A new item starts with a record: fires before its creation are not due, whoever owns it
    // and whatever that owner remembers from an earlier item of that number. Its start is the
    // later of this clock and the latest fire the job has done, so a leader whose clock is
    // behind does not make a new item run a fire the job already ran.
    let start = latest_done.map_or(now.wall_ms(), |d| d.max(now.wall_ms()));
    for item in &moving {
        let Some(owner) = owners.get(item) else {
            continue;
        };
        // `moved_running` is ascending, as `moving` is.
        let running = moved_running.binary_search(item).is_ok();
        move_ops(p, view, *item, owner, start, running, &mut ops);
    }
    if ops.len() == 2 {
        return Ok(None);
    }
    Ok(Some(Action::Txn(
        Purpose::Reshard {
            items: moving.len() + removed.len(),
            remaining,
            owners,
            moved_running,
            last,
            units,
        },
        ops,
    )))
}

/// The latest fire done by any item, those removed included (the `sharding` node's record).
fn latest_done(view: &JobView) -> Option<i64> {
    view.dones
        .max()
        .copied()
        .into_iter()
        .chain(view.sharding_done)
        .max()
}

/// The operations that give `item` to `owner`: creating it first (with a record whose last
/// fire done is `start`) if it does not exist, and checking that it does not run unless it
/// moves `running`.
fn move_ops(
    p: &JobPaths,
    view: &JobView,
    item: u32,
    owner: &InstanceId,
    start: i64,
    running: bool,
    ops: &mut Vec<TxnOp>,
) {
    let v = view.items.get(&item);
    if !v.is_some_and(|v| v.exists) {
        ops.push(TxnOp::create(p.item(item), Vec::<u8>::new()));
        let baseline = ItemRecord {
            done: Some(start),
            run: None,
        };
        ops.push(TxnOp::create(p.item_execution(item), baseline.to_bytes()));
    }
    if !running {
        ops.push(TxnOp::Check(Check::Absent(p.item_running(item))));
    }
    if v.is_some_and(|v| v.owner_stat.is_some()) {
        ops.push(TxnOp::set(p.item_instance(item), owner.as_str()));
    } else {
        ops.push(TxnOp::create(p.item_instance(item), owner.as_str()));
    }
}

/// What a re-shard is worked out from: the same inputs give the same plan.
#[derive(Debug, PartialEq, Eq)]
struct PlanKey {
    /// The candidates, in registry order.
    candidates: Vec<InstanceId>,
    /// The item count.
    total: u32,
    /// The sharding strategy's type.
    strategy: String,
    /// Whether items keep a live owner.
    static_sharding: bool,
}

/// A re-shard too large for one transaction, as worked out for its first part: the parts
/// after it are taken from it, so that each costs the items it writes rather than the whole
/// job (a job of n items written k items at a time would cost n²/k).
#[derive(Debug)]
struct ReshardPlan {
    key: PlanKey,
    /// Each item's owner in the plan.
    owners: BTreeMap<u32, InstanceId>,
    /// The items whose owner the plan changes, ascending.
    todo: Vec<u32>,
    /// The items of `todo` before this one are written.
    cursor: usize,
}

/// The next part of the re-shard in progress, taken from its plan, if there is one for `key`
/// and the part is one the whole plan worked out again would make too: past the debounce,
/// with no item running, no item beyond the count, the flag not set, and more than one
/// part's worth of items left (the last part is worked out in full, which also finds what
/// changed meanwhile behind the plan's back).
fn next_part(
    j: &mut Job,
    view: &JobView,
    key: &PlanKey,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    opts: &MachineOptions,
    now: Now,
) -> Option<Action> {
    let debounced = j
        .reshard_wanted
        .is_some_and(|w| now.mono >= w.saturating_add(ms(opts.reshard_debounce)));
    let plain = debounced
        && view.running == 0
        && view.necessary.is_none()
        && view.items.range(key.total..).next().is_none();
    if !plain || j.reshard_plan.as_ref().is_none_or(|plan| plan.key != *key) {
        j.reshard_plan = None;
        return None;
    }
    let limit = j.txn_limit(opts).unwrap_or(usize::MAX);
    let plan = j.reshard_plan.as_mut()?;
    // The first `limit` items the plan still changes; one more shows there is another part.
    // Those before the cursor are written (the parts that wrote them succeeded), even if the
    // view does not show it yet: ZooKeeper's watch can report the nodes of one transaction in
    // several bursts, and a part checked against such a view would write them again.
    let mut part: Vec<u32> = Vec::new();
    let mut k = plan.cursor;
    let mut end = k;
    while k < plan.todo.len() && part.len() <= limit {
        let item = plan.todo[k];
        let current = view.items.get(&item).and_then(|v| v.owner.as_ref());
        if current != plan.owners.get(&item) {
            if part.len() < limit {
                end = k + 1;
            }
            part.push(item);
        }
        k += 1;
    }
    if part.len() <= limit {
        j.reshard_plan = None;
        return None;
    }
    part.truncate(limit);
    plan.cursor = end;
    // `k` is one past the item that showed another part: the items after the part.
    let remaining = plan.todo.len() - (k - 1);
    let new_items = part
        .iter()
        .any(|i| !view.items.get(i).is_some_and(|v| v.exists));
    let latest = if new_items { latest_done(view) } else { None };
    let start = latest.map_or(now.wall_ms(), |d| d.max(now.wall_ms()));
    let p = &j.paths;
    let mut ops = vec![
        TxnOp::Check(Check::Session(sid)),
        TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
    ];
    for item in &part {
        let owner = plan.owners.get(item)?;
        move_ops(p, view, *item, owner, start, false, &mut ops);
    }
    Some(Action::Txn(
        Purpose::Reshard {
            owners: BTreeMap::new(),
            moved_running: Vec::new(),
            last: false,
            units: part.len(),
            items: part.len(),
            remaining,
        },
        ops,
    ))
}

/// What is wrong with a strategy's assignment of the items `0..total` to the candidates
/// `live`, if anything: each item must go to exactly one of them.
fn assignment_problem(
    target: &Assignment,
    live: &BTreeSet<&InstanceId>,
    total: u32,
) -> Option<String> {
    if let Some((who, _)) = target
        .iter()
        .find(|(who, items)| !items.is_empty() && !live.contains(who))
    {
        return Some(format!("it gives items to {who}, which is not a candidate"));
    }
    if !target.covers_exactly(total) {
        let given = target.total_items();
        return Some(format!(
            "it does not give each item of 0..{total} to exactly one instance ({given} given)"
        ));
    }
    None
}

/// The leader's periodic clean-up: server nodes left ENABLED by instances that are gone, at
/// most `limit` of them per transaction.
#[allow(clippy::too_many_arguments)]
fn housekeeping(
    j: &mut Job,
    view: &JobView,
    config: &JobConfig,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    limit: Option<usize>,
    now: Now,
    wake: &mut Vec<u64>,
) -> Option<Action> {
    let interval = u64::from(config.reconcile_interval_minutes).saturating_mul(60_000);
    if interval == 0 {
        return None;
    }
    let last = *j.last_housekeeping.get_or_insert(now.mono);
    if now.mono < last.saturating_add(interval) {
        wake.push(last.saturating_add(interval));
        return None;
    }
    let live_ips: BTreeSet<&str> = view.instances.iter().map(InstanceId::server_ip).collect();
    let p = &j.paths;
    let mut ops = vec![
        TxnOp::Check(Check::Session(sid)),
        TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
    ];
    let limit = limit.unwrap_or(usize::MAX);
    let mut units = 0usize;
    let mut last = true;
    for (ip, value) in &view.servers {
        if value.trim() == "ENABLED" && !live_ips.contains(ip.as_str()) {
            if units >= limit {
                last = false;
                break;
            }
            if let Ok(path) = p.server(ip) {
                units += 1;
                ops.push(TxnOp::Check(Check::Value(
                    path.clone(),
                    b"ENABLED".to_vec(),
                )));
                ops.push(TxnOp::delete(path));
            }
        }
    }
    if ops.len() == 2 {
        j.last_housekeeping = Some(now.mono);
        return None;
    }
    Some(Action::Txn(Purpose::Housekeeping { last, units }, ops))
}

/// How far the wall clock (epoch ms) is ahead of the monotonic one.
fn wall_offset(now: Now) -> i64 {
    now.wall_ms()
        .saturating_sub(i64::try_from(now.mono).unwrap_or(i64::MAX))
}

/// Whether a wait of `wait` ms that started at `since` (now, if it has not started yet) is
/// still on; if so, `wake` gets its end.
fn waiting(since: &mut Option<u64>, wait: u64, now: Now, wake: &mut Vec<u64>) -> bool {
    let end = since.get_or_insert(now.mono).saturating_add(wait);
    if now.mono < end {
        wake.push(end);
        return true;
    }
    false
}

/// The claim decision: own due items (cron, misfire, triggers) and failover orphans. While
/// `held` (see [`Job::held_for_reshard`]) only failover is claimed: an orphan's owner is gone,
/// so its item never blocks a move; missed fires run after the move as misfires.
#[allow(clippy::too_many_arguments)]
fn claims(
    j: &mut Job,
    view: &JobView,
    config: &Arc<JobConfig>,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    held: bool,
    opts: &MachineOptions,
    now: Now,
    wake: &mut Vec<u64>,
) -> Option<Action> {
    let n = config.sharding_total_count;
    let now_ms = now.wall_ms();
    let tolerance = i64::try_from(opts.misfire_tolerance.as_millis()).unwrap_or(i64::MAX);
    let ahead = i64::try_from(opts.claim_ahead.as_millis()).unwrap_or(0);
    // (fire, kind, counts_as_fire, parameter) → items with their current record.
    let mut groups: ClaimGroups = BTreeMap::new();
    let mut trigger_param: Option<String> = None;

    let mine: Vec<u32> = (0..n)
        .filter(|i| {
            planted!(opts, SkipOwnerCheck)
                || view.items.get(i).and_then(|v| v.owner.as_ref()) == Some(me)
        })
        .collect();
    // `mine` is ascending: membership by binary search (jobs can have many items).
    let is_mine = |i: &u32| mine.binary_search(i).is_ok();
    j.owned_since.retain(|i, _| is_mine(i));
    for &i in &mine {
        j.owned_since.entry(i).or_insert(now_ms);
    }

    // Manual triggers: all my enabled items, once none of them runs. Before the job has a
    // plan at all the trigger waits for one, rather than running nothing. A trigger whose
    // items take several transactions (a transaction limit) is remembered until all of them
    // are claimed, with one fire time; scheduled fires wait for it meanwhile.
    let planned = (0..n).any(|i| view.items.get(&i).is_some_and(|v| v.owner.is_some()));
    let skip_disabled = |i: &u32| {
        view.items.get(i).is_some_and(|v| v.disabled) && !planted!(opts, RunDisabledItems)
    };
    // Items of the trigger being run that moved away or were disabled meanwhile are left out;
    // a trigger left with nothing to run is over. Done first, so that a trigger ended here
    // neither blocks the next one nor the scheduled fires below (which set the wake).
    if let Some(run) = &mut j.trigger_run {
        run.items.retain(|i| is_mine(i) && !skip_disabled(i));
        if run.items.is_empty() {
            j.trigger_run = None;
        }
    }
    if !j.triggers.is_empty() && planned && j.trigger_run.is_none() && !held {
        let busy = mine.iter().any(|i| {
            j.running.contains_key(i) || view.items.get(i).is_some_and(|v| v.running.is_some())
        });
        if !busy {
            let items: BTreeSet<u32> = mine.iter().copied().filter(|i| !skip_disabled(i)).collect();
            if items.is_empty() {
                // Nothing to run here: every trigger queued is consumed all the same (they
                // would each find the same nothing).
                j.triggers.clear();
            } else if let Some(parameter) = j.triggers.pop_front() {
                j.trigger_run = Some(TriggerRun {
                    parameter,
                    fire: now_ms,
                    items,
                });
            }
        }
    }
    if let Some(run) = &mut j.trigger_run {
        trigger_param = Some(run.parameter.clone());
        for &i in &run.items {
            if held
                || j.running.contains_key(&i)
                || view.items.get(&i).is_some_and(|v| v.running.is_some())
            {
                continue; // held, or running (another kind of run, or not recorded yet): waits
            }
            let rec = view.items.get(&i).and_then(|v| v.record.clone());
            groups
                .entry((run.fire, RunKind::Trigger))
                .or_default()
                .push((i, rec));
        }
    }

    // Scheduled fires and misfires of my items. Fires before the cluster's last start (a
    // registration into an empty `instances/`) were missed while no instance was registered:
    // only those within the catch-up bound are due (see "Start-up after downtime").
    let catchup_ms = if planted!(opts, IgnoreCatchUpBound) {
        0
    } else {
        config.misfire_catchup_ms()
    };
    let started = view
        .started
        .filter(|_| !planted!(opts, CatchUpAfterDowntime));
    if trigger_param.is_none() && !held {
        if let Some(cron) = &config.cron {
            for &i in &mine {
                if j.running.contains_key(&i) {
                    continue;
                }
                let Some(v) = view.items.get(&i) else {
                    continue;
                };
                if (v.disabled && !planted!(opts, RunDisabledItems)) || v.running.is_some() {
                    continue;
                }
                let rec = v.record.clone();
                let mut done = rec.as_ref().and_then(|(r, _)| r.done);
                if let Some((r, _)) = &rec {
                    if let Some(run) = &r.run {
                        if config.failover {
                            continue; // an orphan: failover below
                        }
                        if run.kind != RunKind::Trigger {
                            done = Some(done.map_or(run.fire, |d| d.max(run.fire)));
                        }
                    }
                }
                let mut baseline =
                    done.unwrap_or_else(|| j.owned_since.get(&i).copied().unwrap_or(now_ms));
                if let Some(s) = started {
                    // Fires earlier than `s - catchup_ms` are given up.
                    baseline = baseline.max(s.saturating_sub(catchup_ms).saturating_sub(1));
                }
                let Some(first_ms) = j.fires.next_after(config, baseline) else {
                    continue;
                };
                // Claimed up to `claim_ahead` before the fire, started at the fire.
                if first_ms > now_ms.saturating_add(ahead) {
                    wake.push(now.mono_at(first_ms.saturating_sub(ahead)));
                    continue;
                }
                // Latest fire at or before now: several missed fires collapse into one.
                // Through the memo: the items of a job mostly share their last fire.
                let mut last = first_ms;
                for _ in 0..MAX_CATCH_UP_STEPS {
                    match j.fires.next_after(config, last) {
                        Some(t) if t <= now_ms => last = t,
                        _ => break,
                    }
                }
                let late = now_ms - last;
                // A fire that came while the item ran here is a misfire, however recent.
                let overlapped = j.last_end.get(&i).is_some_and(|end| last <= *end);
                let on_time = late <= tolerance && !overlapped;
                // A fire from before the cluster's start, within the catch-up bound: it runs
                // once, as a misfire, whatever `misfire` says (catching up is its own opt-in).
                let caught_up = started.is_some_and(|s| last <= s);
                let kind = if caught_up {
                    RunKind::Misfire
                } else if last == first_ms && on_time {
                    RunKind::Scheduled
                } else if config.misfire && !planted!(opts, DropMisfires) {
                    RunKind::Misfire
                } else if on_time {
                    RunKind::Scheduled
                } else {
                    // Missed with misfire off: wait for the next fire.
                    if let Some(next) = cron.next_after(now.wall, &config.time_zone) {
                        wake.push(now.mono_at(next.timestamp_millis()));
                    }
                    continue;
                };
                groups.entry((last, kind)).or_default().push((i, rec));
            }
        }
    }

    // Failover: recorded runs whose marker vanished with their session.
    let mut failover_items: Vec<(u32, RunRecord, CurrentRecord)> = Vec::new();
    if config.failover && config.monitor_execution {
        let mut orphans: Vec<u32> = Vec::new();
        for (i, v) in &view.items {
            if *i >= n || v.running.is_some() || j.running.contains_key(i) {
                continue;
            }
            // A disabled item is not failed over either; its orphaned fire runs once it is
            // enabled again.
            if v.disabled && !planted!(opts, RunDisabledItems) {
                continue;
            }
            if let Some((r, _)) = &v.record {
                let orphan = r.run.is_some() && v.failover.is_none();
                // Planted bug: a finished item of a dead owner counts as an orphan too.
                let finished_of_dead = planted!(opts, FailoverFinished)
                    && r.done.is_some()
                    && v.owner
                        .as_ref()
                        .is_some_and(|o| !view.instances.contains(o));
                if orphan || finished_of_dead {
                    orphans.push(*i);
                }
            }
        }
        j.orphan_seen.retain(|i, _| orphans.contains(i));
        if !orphans.is_empty() {
            let candidates = registry_order(view.eligible());
            let share: BTreeSet<u32> = if candidates.is_empty() {
                BTreeSet::new()
            } else {
                let split = BuiltinStrategy::AverageAllocation.shard(
                    &candidates,
                    j.paths.job_name(),
                    u32::try_from(orphans.len()).unwrap_or(u32::MAX),
                );
                split
                    .items_of(me)
                    .iter()
                    .filter_map(|k| orphans.get(*k as usize).copied())
                    .collect()
            };
            for i in orphans {
                let seen = *j.orphan_seen.entry(i).or_insert(now.mono);
                let takeover = seen.saturating_add(ms(opts.failover_takeover_delay));
                if !share.contains(&i) && now.mono < takeover {
                    wake.push(takeover);
                    continue;
                }
                let Some(v) = view.items.get(&i) else {
                    continue;
                };
                let Some((r, ver)) = v.record.clone() else {
                    continue;
                };
                let run = match (r.run.clone(), r.done, v.owner.clone()) {
                    (Some(run), _, _) => run,
                    (None, Some(done), Some(owner)) if planted!(opts, FailoverFinished) => {
                        RunRecord {
                            fire: done,
                            kind: RunKind::Scheduled,
                            instance: owner,
                        }
                    }
                    _ => continue,
                };
                // Our own items of this job may also be due; they are claimed separately.
                groups.retain(|_, items| {
                    items.retain(|(it, _)| *it != i);
                    !items.is_empty()
                });
                failover_items.push((i, run, Some((r, ver))));
            }
        }
    }

    // Within the transaction limit: the items whose last finished fire is oldest first (so
    // that no item starves when the parts of a fire take longer than its interval), failover
    // before own items of the same age. The rest stays due and is claimed by the next
    // evaluation, once the watch shows this claim.
    if let Some(limit) = j.txn_limit(opts) {
        let total = groups.values().map(Vec::len).sum::<usize>() + failover_items.len();
        if total > limit {
            let age = |rec: &CurrentRecord| rec.as_ref().and_then(|(r, _)| r.done);
            let mut order: Vec<(Option<i64>, bool, u32)> = failover_items
                .iter()
                .map(|(i, _, rec)| (age(rec), false, *i))
                .chain(
                    groups
                        .values()
                        .flatten()
                        .map(|(i, rec)| (age(rec), true, *i)),
                )
                .collect();
            order.sort_unstable();
            order.truncate(limit);
            let own: BTreeSet<u32> = order.iter().filter(|o| o.1).map(|o| o.2).collect();
            let failover: BTreeSet<u32> = order.iter().filter(|o| !o.1).map(|o| o.2).collect();
            groups.retain(|_, items| {
                items.retain(|(i, _)| own.contains(i));
                !items.is_empty()
            });
            failover_items.retain(|(i, _, _)| failover.contains(i));
        }
    }

    if groups.is_empty() && failover_items.is_empty() {
        return None;
    }

    let p = &j.paths;
    let mut ops = vec![TxnOp::Check(Check::Session(sid))];
    // Still registered: an operator's shutdown (the instance node deleted) stops new
    // claims at once, before this instance has seen it.
    ops.push(TxnOp::Check(Check::Exists(j.paths.instance(me))));
    let mut claims_out: Vec<Claim> = Vec::new();
    for ((fire, kind), items) in groups {
        let mut claimed = Vec::new();
        for (i, rec) in items {
            if !planted!(opts, SkipOwnerCheck) {
                ops.push(TxnOp::Check(Check::Value(
                    p.item_instance(i),
                    me.as_str().into(),
                )));
            }
            if !planted!(opts, RunDisabledItems) {
                // The cache may not show an operator's disable yet: the registry checks it.
                ops.push(TxnOp::Check(Check::Absent(p.item_disabled(i))));
            }
            let running_op = ops.len();
            ops.push(running_marker(p.item_running(i), me, opts));
            let prior = rec.as_ref().map(|(r, _)| r.clone()).unwrap_or_default();
            let done = match &prior.run {
                Some(run) if run.kind != RunKind::Trigger && !config.failover => {
                    Some(prior.done.map_or(run.fire, |d| d.max(run.fire)))
                }
                _ => prior.done,
            };
            let record = ItemRecord {
                done,
                run: Some(RunRecord {
                    fire,
                    kind,
                    instance: me.clone(),
                }),
            };
            let record_op = ops.len();
            let version = rec.as_ref().map(|(_, v)| *v);
            if planted!(opts, SkipOwnerCheck) && version.is_some() {
                ops.push(TxnOp::set(p.item_execution(i), record.to_bytes()));
            } else {
                ops.push(record_write(p.item_execution(i), &record, version));
            }
            claimed.push(ClaimedItem {
                item: i,
                running_op,
                record_op,
                failover_op: None,
                record,
            });
        }
        let counts_as_fire = kind != RunKind::Trigger;
        claims_out.push(Claim {
            fire,
            kind,
            counts_as_fire,
            parameter: if kind == RunKind::Trigger {
                trigger_param.clone()
            } else {
                None
            },
            items: claimed,
        });
    }
    // Failover items, grouped by the fire they re-run.
    let mut by_fire: BTreeMap<(i64, bool), Vec<ClaimedItem>> = BTreeMap::new();
    for (i, run, rec) in failover_items {
        if !planted!(opts, RunDisabledItems) {
            // The cache may not show an operator's disable yet: the registry checks it.
            ops.push(TxnOp::Check(Check::Absent(p.item_disabled(i))));
        }
        let running_op = ops.len();
        ops.push(running_marker(p.item_running(i), me, opts));
        let failover_op = ops.len();
        ops.push(TxnOp::create_ephemeral(p.item_failover(i), me.as_str()));
        let prior = rec.as_ref().map(|(r, _)| r.clone()).unwrap_or_default();
        // A manual trigger's run stays one when it moves: its time is not a scheduled fire,
        // and must never count as one, even if this run dies too and moves again.
        let kind = if run.kind == RunKind::Trigger {
            RunKind::Trigger
        } else {
            RunKind::Failover
        };
        let record = ItemRecord {
            done: prior.done,
            run: Some(RunRecord {
                fire: run.fire,
                kind,
                instance: me.clone(),
            }),
        };
        let record_op = ops.len();
        ops.push(record_write(
            p.item_execution(i),
            &record,
            rec.as_ref().map(|(_, v)| *v),
        ));
        let counts = run.kind != RunKind::Trigger;
        by_fire
            .entry((run.fire, counts))
            .or_default()
            .push(ClaimedItem {
                item: i,
                running_op,
                record_op,
                failover_op: Some(failover_op),
                record,
            });
    }
    for ((fire, counts_as_fire), items) in by_fire {
        claims_out.push(Claim {
            fire,
            kind: if counts_as_fire {
                RunKind::Failover
            } else {
                RunKind::Trigger
            },
            counts_as_fire,
            parameter: None,
            items,
        });
    }
    Some(Action::Txn(Purpose::Claim(claims_out), ops))
}

/// Whether the view shows `running` markers of this session that no local execution holds.
fn adoptable(
    view: &JobView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    running: &BTreeMap<u32, ExecutionId>,
) -> bool {
    view.items
        .iter()
        .any(|(item, v)| !running.contains_key(item) && session_marker(v, me, sid).is_some())
}

/// The item's `running` marker, if this instance holds it under this session.
fn session_marker<'a>(
    v: &'a view::ItemView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
) -> Option<&'a crate::registry::Stat> {
    let (holder, stat) = v.running.as_ref()?;
    (holder.trim() == me.as_str() && stat.ephemeral_owner == Some(sid)).then_some(stat)
}

/// An item's execution record as cached, with its version, if it has one.
type CurrentRecord = Option<(ItemRecord, Version)>;

/// Due items by (fire, kind), each with its current record.
type ClaimGroups = BTreeMap<(i64, RunKind), Vec<(u32, CurrentRecord)>>;

/// The creation of an item's `running` marker, bound to the session.
fn running_marker(path: NodePath, me: &InstanceId, opts: &MachineOptions) -> TxnOp {
    let _ = opts;
    if planted!(opts, PersistentRunningMarkers) {
        return TxnOp::create(path, me.as_str());
    }
    TxnOp::create_ephemeral(path, me.as_str())
}

fn record_write(path: NodePath, record: &ItemRecord, version: Option<Version>) -> TxnOp {
    match version {
        Some(v) => TxnOp::Set {
            path,
            data: record.to_bytes(),
            expected: Some(v),
        },
        None => TxnOp::Create {
            path,
            data: record.to_bytes(),
            mode: CreateMode::Persistent,
        },
    }
}
