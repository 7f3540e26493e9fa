//! ElasticJob-Lite 3.0.4 instances in the simulator: a model of what a Java instance does
//! (`docs/migration-design.md`, section 1), driven by the cluster's virtual time, through the
//! same registry store, latencies, races and faults as the shardjob nodes, so that worlds can
//! mix both kinds on one job.
//!
//! # The model
//!
//! One [`JavaNode`] is one JVM: one registry session and one recursive watch, hosting some
//! jobs, each with ElasticJob's threads as tasks of a deterministic executor ([`jvm`]):
//!
//! - **Start-up** ([`listeners`]): the job root's type checked (a different one refuses the
//!   job), the registry's `config` read (written from the local one if absent), the Curator
//!   cache loaded, the listeners registered, the leader elected, `servers/{ip}` and the
//!   ephemeral `instances/{id}` written, offline blank servers removed, the Quartz trigger
//!   scheduled.
//! - **Election** ([`election`]): `leader/election/latch` (a mutex of ephemeral nodes, ordered by
//!   the revision that created them) then `leader/election/instance` if absent; passive
//!   election on its deletion, active on this server's node written, the blocking
//!   `isLeaderUntilBlock` loop (100 ms, no limit), abdication on DISABLED.
//! - **Re-sharding flag and lazy sharding** ([`sharding`]): only the leader sets `necessary`
//!   (instance added or deleted, any server event, item count changed, reconcile); the fire
//!   shards: a non-leader waits while `necessary` or `processing` is there, the leader waits
//!   for every `running` node to go, then `processing`, the items reset, and one transaction of
//!   the owners (AVG_ALLOCATION and the other built-in strategies, bit-exact).
//! - **A fire** ([`fire`]): the failover items of this instance, else its items after
//!   sharding (from the cache, with ElasticJob's direct-read fallback), less those failed over
//!   elsewhere, disabled or running; `misfireIfRunning`; `running` nodes persistent iff
//!   `failover`, ephemeral otherwise; the items run together, the worker waits for all;
//!   completion removes `running`, `failover`, `failovering`; the misfire loop; the failover
//!   enquiry.
//! - **Misfire** ([`misfire`]): one Quartz worker per job: a fire passed while it was busy or
//!   the scheduler paused collapses with the others, and flags the instance's current items
//!   (if the trigger fired before).
//! - **Failover** ([`failover`]): on an instance's DELETED event, its `failovering` items or
//!   its running items (by their `running` node: only persistent ones are still there) queue
//!   in `leader/failover/items` (their `running` deleted); an idle instance claims one per
//!   turn of `leader/failover/latch`, writes `failover` (ephemeral) and `failovering`,
//!   triggers its job. The legacy listener when this instance is the only one available.
//! - **Connection** ([`listeners`]): `SUSPENDED`/`LOST` pause the scheduler (a run goes on);
//!   `RECONNECTED` writes the server node (DISABLED if it vanished) and the instance node,
//!   deletes the `running` nodes of this instance's items (even while they run) and resumes.
//!   After a session expiry the cache reloads and hands the listeners what changed.
//! - **Shutdowns**: a graceful stop waits for each job's fire in progress, removes the leader
//!   node (if leading) and the instance node, and closes the session; `kill -9` is a crash
//!   (the session expires later, persistent nodes stay); this instance's node deleted by
//!   someone else while the job runs unpaused shuts the job down for good.
//!
//! Registry calls follow ElasticJob's registry center: one request per `checkExists`, `get`,
//! `create`, `setData` and `delete`, a lost connection retried three times after 1, 2 and 3 s
//! (Curator's backoff, at the bottom of its random draw), then swallowed. Compound reads (a
//! `getChildren` and the reads of each child) are one atomic tree read.
//!
//! # Its runs, for the checkers
//!
//! Its runs go into [`crate::cluster::Cluster::runs`] with [`crate::cluster::RunRecord::java`]
//! set and `node` its index in [`crate::cluster::Cluster::java`]. ElasticJob calls a run
//! `NORMAL_TRIGGER` or `MISFIRE` and does not know which fire a failover or a misfire replays;
//! the world does, and records:
//!
//! - a cron fire's run: `Scheduled`, its fire;
//! - a failover run (the context held this instance's `failover` items): `Failover`, the fire
//!   the item's dead runner (its `running` node when the item was queued for failover) stood
//!   for: the fire a shardjob runner's execution record names (it may have claimed ahead and
//!   died before the start), else the runner's latest run of the item (the item's latest run
//!   if the runner has none); a `Trigger` at its start for a runner that is no instance of the
//!   world (a foreign marker: the failover replays no fire);
//! - a misfire-loop run: `Misfire`, the latest fire an ElasticJob instance missed for the item
//!   (a Quartz collapse, or a fire whose item was running) since its last misfire run; an item
//!   of the context with no missed fire recorded gets the fire of the run before it (so a
//!   second run of that fire is seen);
//! - a one-off trigger's run that found no failover item of this instance (a second
//!   `triggerJob` of one idle instance's claims, an operator's trigger): `Trigger`, at the
//!   trigger's time (no fire).
//!
//! **Fencing token.** ElasticJob has none. A run's token is the registry revision of the
//! write of its `running` node, or, when it wrote none (`monitorExecution` off, the write
//! lost), the registry's revision when it started. Tokens so grow with registry time, like a
//! shardjob claim's: the `once` checker's "a retry carries a larger token" holds for an
//! ElasticJob run started after the attempt it retries, and two runs never share one unless
//! they share a write. The token fences nothing: an ElasticJob run never stops because
//! another started, so any overlap of its runs with another run of the item is a violation
//! (unless the job ignores cancellation). A run's end is committed when the deletion of its
//! `running` node at completion applies; a run that wrote none has its end committed when it
//! ends.
//!
//! # What is simplified
//!
//! - ElasticJob's sequential reads of one decision are one atomic read (its view cannot be
//!   torn); its writes are one request each, in its order.
//! - The latch orders its nodes by creation revision (the registry has no sequence numbers).
//! - An exception (a `JobInstance` that does not read, a missing own instance node) ends the
//!   fire or the listener call; other errors are swallowed as `RegExceptionHandler` does.
//! - No clock-skew check (`maxTimeDiffSeconds`), no tracing, no job listeners, no
//!   distribute-once listeners, no dataflow streaming. A remote shutdown lets the run in
//!   progress end normally. Items run in parallel whatever the pool's size.

pub(crate) mod cluster;
mod election;
mod failover;
mod fire;
pub(crate) mod jvm;
mod listeners;
mod misfire;
mod sharding;
mod storage;
pub(crate) mod view;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use shardjob_backend_mem::WatchId;
use shardjob_core::registry::{RegistryEvent, SessionId};
use shardjob_core::{InstanceId, JobConfig};

use crate::node::{Link, Process, Reply, Wire};
use jvm::{JobState, Jvm, Tasks};

/// A job as an ElasticJob instance hosts it.
#[derive(Debug, Clone)]
pub struct JavaJob {
    /// Its local configuration: written to the registry only if there is none there (or with
    /// `overwrite`), as ElasticJob does; otherwise the registry's is used.
    pub config: JobConfig,
    /// The job type it writes into the job root (`SCRIPT`, `HTTP`, or a Java class name); a
    /// root holding another one makes the instance refuse the job.
    pub type_name: String,
}

impl JavaJob {
    /// A job of ElasticJob's `SCRIPT` type.
    pub fn script(config: JobConfig) -> Self {
        Self {
            config,
            type_name: "SCRIPT".to_owned(),
        }
    }
}

/// What made a fire run: the cron trigger (its fire time) or a one-off trigger (when it was
/// added), epoch ms by the instance's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A cron fire.
    Cron(i64),
    /// A one-off trigger (`triggerJob`).
    Trigger(i64),
}

impl Source {
    /// The time the source stands for.
    pub(crate) fn at(self) -> i64 {
        match self {
            Source::Cron(t) | Source::Trigger(t) => t,
        }
    }
}

/// A run of an ElasticJob node in progress: its items, when each ends, their records.
#[derive(Debug)]
pub(crate) struct JavaRun {
    /// Its items.
    pub(crate) items: Vec<JavaItem>,
    /// Whether it wrote `running` nodes (else its end is committed when it ends).
    pub(crate) marked: bool,
}

/// One item of a run in progress.
#[derive(Debug)]
pub(crate) struct JavaItem {
    /// When it ends (virtual ms).
    pub(crate) ends: u64,
    /// Its record in the run log.
    pub(crate) record: usize,
    /// Whether it has ended.
    pub(crate) ended: bool,
}

/// One ElasticJob JVM of the cluster.
#[derive(Debug)]
pub struct JavaNode {
    /// The instance id (`ip@-@pid`).
    pub id: InstanceId,
    /// The jobs it hosts.
    pub jobs: BTreeSet<String>,
    /// Its live session, if any.
    pub session: Option<SessionId>,
    pub(crate) watch: Option<WatchId>,
    process: Process,
    link: Link,
    /// Milliseconds its wall clock is ahead of true time (negative: behind).
    pub skew: i64,
    /// Whether a graceful stop was asked for.
    pub stop_requested: bool,
    pub(crate) replies: Vec<Reply>,
    pub(crate) inbox: VecDeque<(u64, Vec<RegistryEvent>)>,
    pub(crate) wire: Wire,
    /// Runs in progress, by run id.
    pub(crate) runs: BTreeMap<u64, JavaRun>,
    /// The run log's records of its runs, by (run id, item).
    pub(crate) records: BTreeMap<(u64, u32), usize>,
    pub(crate) jvm: Jvm,
    pub(crate) tasks: Tasks,
    /// When its tasks want to be polled next (a sleep ends), late by the drawn timer lag.
    pub(crate) wake: Option<u64>,
    /// Whether it has had a session before (a later `Connected` is a new session after an
    /// expiry).
    pub(crate) connected_once: bool,
}

impl JavaNode {
    pub(crate) fn new(id: InstanceId, jobs: &[JavaJob]) -> Self {
        let jvm = Jvm::new(id.clone());
        {
            let mut s = jvm.state();
            for job in jobs {
                s.jobs
                    .insert(job.config.job_name.clone(), JobState::new(job.clone()));
            }
        }
        Self {
            id,
            jobs: jobs.iter().map(|j| j.config.job_name.clone()).collect(),
            session: None,
            watch: None,
            process: Process::Up,
            link: Link::Connected,
            skew: 0,
            stop_requested: false,
            replies: Vec::new(),
            inbox: VecDeque::new(),
            wire: Wire::default(),
            runs: BTreeMap::new(),
            records: BTreeMap::new(),
            jvm,
            tasks: Tasks::default(),
            wake: None,
            connected_once: false,
        }
    }

    /// What its process is doing.
    pub fn process(&self) -> Process {
        self.process
    }

    /// How its link to the registry is.
    pub fn link(&self) -> Link {
        self.link
    }

    /// Whether the process runs or is paused (not crashed, not stopped).
    pub fn up(&self) -> bool {
        matches!(self.process, Process::Up | Process::Paused { .. })
    }

    /// Whether it runs and is not paused.
    pub fn active(&self) -> bool {
        self.process == Process::Up
    }

    /// Since when the process is paused, if it is.
    pub fn paused(&self) -> Option<u64> {
        match self.process {
            Process::Paused { since } => Some(since),
            _ => None,
        }
    }

    /// Whether it is cut off from the registry both ways.
    pub fn partitioned(&self) -> bool {
        matches!(self.link, Link::Partitioned { .. })
    }

    /// Whether its requests reach the registry but nothing comes back.
    pub fn deaf(&self) -> bool {
        matches!(self.link, Link::Deaf | Link::Partitioned { deaf: true })
    }

    /// Whether `job` runs here now (ElasticJob's `JobRegistry.isJobRunning`).
    pub fn job_running(&self, job: &str) -> bool {
        self.jvm.job(job, |j| j.running).unwrap_or(false)
    }

    /// Whether `job` is shut down here (never started, refused, or shut down for good).
    pub fn job_shut_down(&self, job: &str) -> bool {
        self.jvm.job(job, |j| j.shutdown).unwrap_or(true)
    }

    pub(crate) fn set_process(&mut self, process: Process) {
        self.process = process;
    }

    pub(crate) fn set_link(&mut self, link: Link) {
        self.link = link;
    }

    /// The earliest end of an item of its runs in progress that has not ended.
    pub(crate) fn first_end(&self) -> Option<u64> {
        self.runs
            .values()
            .flat_map(|r| r.items.iter())
            .filter(|i| !i.ended)
            .map(|i| i.ends)
            .min()
    }
}
