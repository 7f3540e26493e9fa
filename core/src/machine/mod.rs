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
//!   execution per part; a completion part records only its own items, and one the registry
//!   refuses (say an earlier attempt applied, its reply lost) is given up alone: the later
//!   parts' markers are still the session's and are removed as usual, never adopted as a
//!   claim whose reply was lost (that would start the fire again, under the same fencing
//!   token); a re-shard part moves items independently (an item whose new owner is written
//!   can no longer be claimed by the old one, whose claims check the owner) and only the last
//!   part clears
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

// After `planted!`, which they use.
mod claiming;
mod decide;
mod evaluate;
mod events;
mod executions;
mod registration;
mod replies;
mod resharding;
#[cfg(feature = "self-check")]
mod selfcheck;
mod session;

use claiming::*;
use registration::*;
use resharding::*;

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
        let guards = if planted!(self.opts, LeaseTimerAfterEnd) {
            !self.executions.is_empty()
        } else {
            self.lease_guards_runs()
        };
        if !self.in_doubt && guards {
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
            if planted!(self.opts, EndlessSweep) {
                self.sweep_left /= chunk.max(1);
            } else {
                self.sweep_left -= chunk;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Stat;

    /// A claim's run record counts as written, at its new version, whether the claim created
    /// it or replaced it; a check, a deletion or a missing result is no write.
    #[test]
    fn written_version_reads_creates_and_sets_only() {
        let stat = |v: i64| Stat {
            version: Version(v),
            created: Revision(1),
            modified: Revision(v as u64),
            ephemeral_owner: None,
        };
        let results = [
            TxnOpResult::Checked,
            TxnOpResult::Created(stat(0)),
            TxnOpResult::Set(stat(4)),
            TxnOpResult::Deleted,
        ];
        assert_eq!(written_version(&results, 0), None);
        assert_eq!(written_version(&results, 1), Some(Version(0)));
        assert_eq!(written_version(&results, 2), Some(Version(4)));
        assert_eq!(written_version(&results, 3), None);
        assert_eq!(written_version(&results, 4), None);
        assert_eq!(last_revision(&results), Some(Revision(4)));
    }
}
