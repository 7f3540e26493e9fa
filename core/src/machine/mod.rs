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
//! # Map
//!
//! Every input goes the same way: a `handle_*` call of [`Machine`] (in `mod.rs`, `watch.rs`,
//! `replies.rs`, `session.rs`, `timer.rs`, `execution/`) updates state, then `evaluate.rs`
//! decides on the jobs it bears on: `decide.rs` reads the job's view and picks one action
//! (setup, load, election, the leader's re-shard or housekeeping, claims, adoption, leave),
//! whose transaction `requests.rs` sends; the reply comes back through `replies.rs`. Finally
//! the job's wake is indexed in the timer table and its plan reported. The parts, each the
//! owner of its state:
//!
//! | File | Owns or decides |
//! |---|---|
//! | `mod.rs` | [`Machine`], its public API, the jobs' table (`job.rs`: `JobId`s, never reused) |
//! | `io.rs`, `event.rs`, `error.rs`, `options.rs` | what crosses the boundary: commands, events, errors, tunables |
//! | `time.rs` | [`Now`] and [`Mono`]: the driver's clocks, never read here |
//! | `session.rs` | the session, the lease running items rely on, the probes that confirm it |
//! | `clock.rs` | the watch on a wall clock that steps |
//! | `timer.rs` | the timer table (`Timer`: sweep, clock, probe, lease, shutdown, wakes, retries, starts) |
//! | `requests.rs` | requests in flight, and what their results say |
//! | `watch.rs`, `cache.rs`, `job_view.rs`, `collections.rs` | watch events into each job's cache; the view decisions read |
//! | `load.rs`, `setup.rs` | loading a job's subtree; its skeleton, configuration and registration |
//! | `evaluate.rs`, `decide.rs` | when a job is decided on; what its view asks of this instance |
//! | `leader/` | leader-only state (`LeaderState`, dropped with the lead): `reshard.rs` the plan, `housekeeping.rs` server nodes, `stale.rs` `running` markers and instance nodes no session holds, `leftovers.rs` what ElasticJob left once it no longer shares the job (`failovering`, queued failovers) |
//! | `claim/` | pure planners: `triggers.rs`, `fires.rs` (scheduled fires, misfires), `failover.rs`, `limit.rs` (the transaction limit), `owner.rs` (how the claim checks ownership: by version or by value); `mod.rs` joins them into one claim |
//! | `execution/` | an execution's life (`Life`): `start.rs` (at once or at the fire), `complete.rs` (its record), `adopt.rs` (markers whose claim reply was lost) |
//! | `mixed.rs` | a job shared with ElasticJob instances: the markers' mode, the markers an earlier session left, orphans settled instead of failed over, server nodes kept |
//! | `leave.rs` | leaving a job: removed, shut down by an operator, or the instance's shutdown |
//! | `record.rs` | the per-item execution record's format |
//! | `selfcheck.rs`, `audit.rs`, `plant.rs` | invariants after every input; the wake audit (feature `audit`); planted bugs (feature `plant-bugs`) |
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
//!   transaction: its session, ownership of every item (by the owner node's version where a
//!   version names one owner, so that ZooKeeper need not read the nodes first: `claim::owner`),
//!   and the creation of session-bound `running` markers; the markers' creation revision is the items' fencing token. The end
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

mod cache;
mod collections;
mod error;
mod event;
mod io;
mod job_view;
mod options;
mod time;

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::config::{JobConfig, Strictness};
use crate::instance::{DELIMITER, InstanceId};
use crate::layout::{ItemLeaf, JobNode, JobPaths};
use crate::registry::{
    Check, CreateMode, ErrorClass, NodePath, RegistryError, RegistryEvent, RegistryOp,
    RegistryReply, RequestId, Revision, SessionEvent, SessionInfo, TxnOp, TxnOpResult, Version,
};
use crate::sharding::{Assignment, BuiltinStrategy, ShardingStrategy, registry_order};

use cache::{Cache, Dir};
pub use error::MachineError;
pub use event::{MachineEvent, StaleSettle};
pub use io::{CancelReason, Command, Execution, ExecutionId, ItemOutcome, ItemRun, JobSpec};
use job_view::JobView;
pub use options::MachineOptions;
use record::{ItemRecord, RunKind, RunRecord, StartRecord};
pub use time::{Mono, Now};
use time::{ms, waiting, wall_offset};

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
#[cfg(feature = "audit")]
mod audit;
mod claim;
mod clock;
mod decide;
mod evaluate;
mod execution;
mod job;
mod leader;
mod leave;
mod load;
mod mixed;
mod replies;
mod requests;
mod selfcheck;
mod session;
mod setup;
#[cfg(test)]
mod test_support;
mod timer;
mod watch;

#[cfg(feature = "audit")]
pub use audit::{AuditMark, LateWake};
use claim::*;
use clock::*;
use decide::*;
use execution::adopt::*;
use execution::*;
use job::*;
use leader::LeaderState;
use leader::housekeeping::*;
use leader::reshard::*;
use leader::stale::foreign_nodes;
use requests::*;
use session::*;
use setup::*;
use timer::*;

/// A re-shard written in parts reports its progress ([`MachineEvent::ReshardProgress`]) each
/// time this many more of its items are written: a job of the documented maximum of 100,000
/// items on a registry that limits transactions takes thousands of parts.
pub const RESHARD_PROGRESS_STEP: usize = 10_000;

/// The state machine of one shardjob instance. See the [module documentation](self).
#[derive(Debug)]
pub struct Machine {
    pub(crate) opts: MachineOptions,
    /// This instance's id (as in `opts`), shared with decisions without a copy.
    pub(crate) me: Arc<InstanceId>,
    pub(crate) strategies: BTreeMap<String, Arc<dyn ShardingStrategy>>,
    /// The registry session and the lease running items rely on.
    pub(crate) sess: SessionState,
    /// The wall clock against the monotonic one.
    pub(crate) clock: ClockWatch,
    /// The hosted jobs.
    pub(crate) jobs: Jobs,
    /// When the machine wants to be woken, and for what.
    pub(crate) timers: Timers,
    /// The registry requests in flight.
    pub(crate) requests: Requests,
    pub(crate) executions: BTreeMap<ExecutionId, Exec>,
    pub(crate) next_execution: u64,
    pub(crate) out: VecDeque<Command>,
    /// A graceful shutdown under way: its grace deadline (monotonic ms).
    pub(crate) shutdown: Option<Mono>,
    /// The shutdown's grace has ended and its end was handled (what was still running was
    /// told to stop): its timer is not armed again, whatever a run that ignores cancellation
    /// does meanwhile.
    pub(crate) grace_ended: bool,
    pub(crate) stopped: bool,
    /// Counts the changes to jobs' views and the decisions on them; [`Job::changed`] holds
    /// the count at each job's last one (so that an audit can skip the jobs it saw as they are).
    pub(crate) changes: u64,
    /// Grows whenever a job's view of its disabled items or servers may have changed: on
    /// every applied event that [`cache::bears_on_disabled`], and on every load from scratch.
    /// A start skips the disabled check when this has not moved since its claim.
    pub(crate) disables: u64,
    /// Inputs handled so far (debug builds check the invariants every so many).
    #[cfg(debug_assertions)]
    pub(crate) inputs: u64,
}

impl Machine {
    /// A machine for one instance, with no jobs yet.
    pub fn new(opts: MachineOptions) -> Self {
        Self {
            me: Arc::new(opts.instance_id.clone()),
            opts,
            strategies: BTreeMap::new(),
            sess: SessionState::default(),
            clock: ClockWatch::default(),
            jobs: Jobs::default(),
            timers: Timers::default(),
            requests: Requests::default(),
            executions: BTreeMap::new(),
            next_execution: 0,
            out: VecDeque::new(),
            shutdown: None,
            grace_ended: false,
            stopped: false,
            changes: 0,
            disables: 0,
            #[cfg(debug_assertions)]
            inputs: 0,
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
        self.jobs.names()
    }

    /// Whether this instance is the job's leader, as far as it knows.
    pub fn is_leader(&self, job: &str) -> bool {
        self.jobs.named(job).is_some_and(|j| j.leader.is_some())
    }

    /// The items of a job running here now.
    pub fn running_items(&self, job: &str) -> Vec<u32> {
        self.jobs
            .named(job)
            .map(|j| j.running.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The job's effective configuration: the registry's copy once it is loaded.
    pub fn config(&self, job: &str) -> Option<&JobConfig> {
        self.jobs.named(job).and_then(|j| j.config.as_deref())
    }

    /// The job's effective configuration, shared: the same `Arc` until the configuration
    /// changes, so a caller can tell a change with [`Arc::ptr_eq`].
    pub fn shared_config(&self, job: &str) -> Option<Arc<JobConfig>> {
        self.jobs.named(job).and_then(|j| j.config.clone())
    }

    /// Whether the job's leader has a re-shard pending (`leader/sharding/necessary`), as far
    /// as this instance's cache shows.
    pub fn resharding_pending(&self, job: &str) -> bool {
        self.jobs
            .named(job)
            .is_some_and(|j| j.cache.view().necessary.is_some())
    }

    /// Whether the job is registered and runs here.
    pub fn is_active(&self, job: &str) -> bool {
        self.jobs
            .named(job)
            .is_some_and(|j| j.phase == Phase::Active)
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
        // Refused, not ignored: the check needs the registry's clock, which this backend
        // does not give (`MachineOptions::registry_clock`).
        if let Some(error) = spec
            .config
            .unhonoured_time_diff()
            .filter(|_| !self.opts.registry_clock)
        {
            return Err(MachineError::InvalidConfig { job: name, error });
        }
        match self.jobs.named(&name) {
            Some(j) if j.leaving.is_some() => return Err(MachineError::JobLeaving(name)),
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
            wait: Wait::Idle,
            backoff: 0,
            unsure: false,
            owned_since: BTreeMap::new(),
            running: BTreeMap::new(),
            last_end: BTreeMap::new(),
            triggers: VecDeque::new(),
            trigger_run: None,
            leader: None,
            txn_items: None,
            orphan_seen: BTreeMap::new(),
            gone_owners_since: None,
            markers_seen: BTreeMap::new(),
            java_ran: BTreeMap::new(),
            java_touched: BTreeMap::new(),
            java_seen: None,
            fresh_wanted: None,
            java_gate: None,
            held_fire: None,
            markers_left: BTreeMap::new(),
            necessary_seen: None,
            stall_reported: false,
            registered_in: None,
            node_gone: None,
            leaving: None,
            owned_reported: None,
            necessary_reported: false,
            reported_corrupt: BTreeSet::new(),
            last_config_error: None,
            load_error: None,
            last_reload: None,
            wake: None,
            wake_indexed: None,
            fires: FireMemo::default(),
            changed: 0,
        };
        let id = self.jobs.insert(job);
        if matches!(self.sess.state, Session::Live(_)) {
            self.start_load(id, now);
        }
        self.debug_check();
        Ok(())
    }

    /// Stops hosting a job: lets its runs finish (cancelling them after the shutdown grace),
    /// records them, and leaves the job's registry nodes; then emits
    /// [`MachineEvent::JobLeft`], after which the job can be added again. While the session is
    /// suspended it waits for it to come back or to be found expired. Removing a job that is
    /// leaving already changes nothing.
    pub fn remove_job(&mut self, job: &str, now: Now) -> Result<(), MachineError> {
        let (id, j) = self
            .jobs
            .named_mut(job)
            .ok_or_else(|| MachineError::UnknownJob(job.to_owned()))?;
        // Removing a job that is leaving already changes nothing: its grace is not extended.
        if j.leaving.is_none() {
            j.leaving = Some(Leaving {
                cause: LeaveCause::Removed,
                deadline: Some(now.mono.after(ms(self.opts.shutdown_grace))),
            });
            self.noticing_clock(now, |m| m.evaluate(id, now));
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
        let (id, j) = self
            .jobs
            .named_mut(job)
            .ok_or_else(|| MachineError::UnknownJob(job.to_owned()))?;
        j.triggers.push_back(parameter.unwrap_or_default());
        self.noticing_clock(now, |m| m.evaluate(id, now));
        Ok(())
    }

    /// Starts a graceful shutdown of the whole instance.
    pub fn shutdown(&mut self, now: Now) {
        if self.shutdown.is_some() {
            return;
        }
        let deadline = now.mono.after(ms(self.opts.shutdown_grace));
        self.shutdown = Some(deadline);
        for job in self.jobs.values_mut() {
            job.leaving.get_or_insert(Leaving {
                cause: LeaveCause::Shutdown,
                deadline: None,
            });
        }
        // Every job is decided on below: a step is acted on by that alone.
        self.observe_clock(now);
        self.evaluate_all(now);
        self.debug_check();
    }

    /// The next command for the driver.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop_front()
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

    // ----- session -----
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A custom strategy that gives every item to the first candidate.
    #[derive(Debug)]
    struct Named(&'static str);

    impl ShardingStrategy for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn shard(&self, candidates: &[InstanceId], job_name: &str, total: u32) -> Assignment {
            BuiltinStrategy::AverageAllocation.shard(&candidates[..1], job_name, total)
        }
    }

    fn now() -> Now {
        Now {
            mono: Mono(0),
            wall: DateTime::<Utc>::from_timestamp_millis(1_800_000_000_000).unwrap_or_default(),
        }
    }

    fn spec(strategy: &str) -> JobSpec {
        let mut config = JobConfig::new("j", 2);
        config.job_sharding_strategy_type = strategy.to_owned();
        JobSpec {
            config,
            job_type: "SCRIPT".to_owned(),
        }
    }

    /// A custom strategy is refused under an empty name, a built-in one's or one taken; once
    /// registered, a job may name it, which it may not before.
    #[test]
    fn custom_strategies_by_name() {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut m = Machine::new(MachineOptions::new(me));
        assert!(
            matches!(
                m.add_job(spec("mine"), now()),
                Err(MachineError::InvalidConfig { .. })
            ),
            "a job may not name a strategy not registered"
        );
        #[rustfmt::skip]
        let cases: [(&str, &'static str, Option<&str>); 5] = [
            ("an empty name", "", Some("the name is empty")),
            ("a blank name", "  ", Some("the name is empty")),
            ("a built-in name", BuiltinStrategy::default().as_str(), Some("the name is a built-in strategy's")),
            ("a new name", "mine", None),
            ("a name taken", "mine", Some("a strategy of that name is registered already")),
        ];
        for (what, name, refused) in cases {
            let got = m.add_strategy(Arc::new(Named(name)));
            match refused {
                None => assert_eq!(got, Ok(()), "{what}"),
                Some(why) => assert_eq!(
                    got,
                    Err(MachineError::StrategyName {
                        name: name.to_owned(),
                        why
                    }),
                    "{what}"
                ),
            }
        }
        assert_eq!(
            m.add_job(spec("mine"), now()),
            Ok(()),
            "registered: the job is valid"
        );
        assert_eq!(m.job_names().collect::<Vec<_>>(), ["j"]);
    }
}
