//! The driver: one tokio task that owns the [`Machine`] and carries out its commands.
//!
//! It follows the call order of the machine's documentation: open one recursive watch on `/`,
//! report the live session as `Connected` (a client that is already connected does not emit
//! it), then loop: drain every command the machine has, wait for the first of an operator
//! command, a watch event, a registry reply, a finished execution or the machine's timer, and
//! hand it to the machine with the current [`Now`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use shardjob_core::config::ExecutorType;
use shardjob_core::layout::{ItemLeaf, JobNode, JobPaths};
use shardjob_core::machine::{
    CancelReason, Command, Execution, ExecutionId, ItemOutcome, JobSpec, Machine, MachineError,
    MachineEvent, Mono, Now,
};
use shardjob_core::registry::{
    self, ErrorClass, EventStream, NodePath, Registry, RegistryEvent, RegistryOp, RegistryReply,
    RequestId, SessionEvent, WatchEventKind,
};
use shardjob_core::{InstanceId, JobConfig};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::exec::{self, ExecutionTask};
use super::mirror::Mirror;
use super::outage::{self, Outage, Report};
use super::{Op, RunEvent, RuntimeError, SchedulerState};
use crate::jobs::{CancelSender, CancelSignal, Job, ReshardingFlag};
use crate::listeners::{self, Guarantee, GuaranteeShared, JobListener, ListenerFactory};
use crate::metrics::{self, DriverProbe};
use crate::notify::{NotifierSlot, NotifierTasks};

/// The most watch events or replies handled in one go before the driver looks at its other
/// inputs (timers, finished runs, operations).
const MAX_BATCH: usize = 256;

/// The driver's clock: a monotonic origin for the machine's `mono` milliseconds, and the
/// wall clock for cron.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose millisecond ticks fall on the wall clock's: the origin is put back by
    /// the wall clock's fraction of a millisecond, so that a fire time converted with
    /// [`Now::mono_at`] is reached on the wall clock's millisecond, not up to one off.
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        let fraction = Utc::now().timestamp_subsec_nanos() % 1_000_000;
        Self {
            origin: now
                .checked_sub(Duration::from_nanos(u64::from(fraction)))
                .unwrap_or(now),
        }
    }

    pub(crate) fn now(&self) -> Now {
        Now {
            mono: Mono(u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)),
            wall: Utc::now(),
        }
    }

    /// The instant at which `mono` will read `at`.
    fn instant_at(&self, at: Mono) -> Instant {
        self.origin + Duration::from_millis(at.ms())
    }
}

/// A job to host: its local configuration, its body and its listeners in calling order.
pub(crate) type HostedJob = (JobConfig, Arc<dyn Job>, Vec<Arc<dyn JobListener>>);

/// What [`super::SchedulerBuilder::build`] hands over.
pub(crate) struct Parts {
    pub machine: Machine,
    pub registry: Arc<dyn Registry>,
    pub clock: Clock,
    pub instance: InstanceId,
    pub jobs: Vec<HostedJob>,
    /// Listener types by name, for jobs added at run time.
    pub factories: Arc<BTreeMap<String, ListenerFactory>>,
    pub stream: Box<dyn EventStream>,
    pub ops: mpsc::UnboundedReceiver<Op>,
    pub state: watch::Sender<SchedulerState>,
    pub events: super::events::EventOut,
    /// The jobs' notifier tasks (error handlers that send).
    pub notifiers: NotifierTasks,
    pub cancel_timeout: Duration,
    /// The machine's shutdown grace, for the log.
    pub shutdown_grace: Duration,
    /// How the registry is named in the log.
    pub registry_name: Option<String>,
    /// The copy of the jobs' nodes the dump port shows, when it is on.
    pub mirror: Option<Mirror>,
    /// What the driver records for the metrics, when they are on.
    pub metrics: Option<DriverProbe>,
}

/// A hosted job as the driver knows it.
pub(crate) struct JobEntry {
    pub job: Arc<dyn Job>,
    /// The configuration in force: the registry's copy once seen, else the local one.
    pub effective: Arc<JobConfig>,
    /// The local configuration (this instance's file or code).
    local: Arc<JobConfig>,
    limiter: Option<(ExecutorType, Arc<Semaphore>)>,
    pub resharding: ReshardingFlag,
    pub warned_handler: bool,
    /// The job's notifier, made for the configuration in force.
    pub notifier: NotifierSlot,
    /// How many items this instance owns, as the machine last reported
    /// ([`MachineEvent::ItemsOwned`]).
    owned: usize,
    /// The job's listeners, in calling order.
    listeners: Arc<[Arc<dyn JobListener>]>,
    /// What distribute-once listeners of the job follow: changes under `guarantee`, and
    /// disabled items; `None` when the job has no listeners (nobody follows them).
    guarantee: Option<Arc<GuaranteeShared>>,
    /// The registry access every run of the job hands its listeners for distribute-once
    /// rounds; `None` when the job has no listeners.
    run_guarantee: Option<Arc<Guarantee>>,
}

impl JobEntry {
    fn new(
        config: JobConfig,
        job: Arc<dyn Job>,
        listeners: Vec<Arc<dyn JobListener>>,
        registry: &Arc<dyn Registry>,
        instance: &InstanceId,
        notifiers: &NotifierTasks,
    ) -> Self {
        let guarantee = (!listeners.is_empty()).then(GuaranteeShared::new);
        // The machine accepted the job, so its name is a valid path segment.
        let run_guarantee = guarantee.as_ref().and_then(|shared| {
            JobPaths::new(&config.job_name).ok().map(|paths| {
                Arc::new(Guarantee::new(
                    Arc::clone(registry),
                    paths,
                    instance.clone(),
                    Arc::clone(shared),
                ))
            })
        });
        let local = Arc::new(config);
        Self {
            job,
            effective: Arc::clone(&local),
            local,
            limiter: None,
            resharding: ReshardingFlag::default(),
            warned_handler: false,
            notifier: NotifierSlot::new(notifiers.clone()),
            owned: 0,
            listeners: listeners.into(),
            guarantee,
            run_guarantee,
        }
    }

    /// The job's item limiter for its current executor strategy (re-made when it changes).
    fn limiter(&mut self) -> Arc<Semaphore> {
        let kind = self.effective.job_executor_thread_pool_size_provider_type;
        match &self.limiter {
            Some((k, sem)) if *k == kind => Arc::clone(sem),
            _ => {
                let sem = Arc::new(Semaphore::new(executor_size(kind)));
                self.limiter = Some((kind, Arc::clone(&sem)));
                sem
            }
        }
    }
}

/// How many items of one job run at once: `CPU` = available cores × 2, `SINGLE_THREAD` = 1.
pub fn executor_size(kind: ExecutorType) -> usize {
    match kind {
        ExecutorType::Cpu => {
            // Read once: the answer takes system calls (cgroup files), and ten thousand jobs
            // each ask on their first run.
            static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
            CORES
                .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                .saturating_mul(2)
        }
        ExecutorType::SingleThread => 1,
    }
}

struct Running {
    cancel: CancelSender,
    task: JoinHandle<()>,
}

pub(crate) struct Driver {
    machine: Machine,
    registry: Arc<dyn Registry>,
    clock: Clock,
    instance: InstanceId,
    jobs: BTreeMap<String, JobEntry>,
    factories: Arc<BTreeMap<String, ListenerFactory>>,
    running: HashMap<ExecutionId, Running>,
    /// Runs announced ahead of their fire ([`Command::Prepare`]), until they start or are
    /// discarded; those set up, waiting for their start signal, are in `running` too.
    prepared: HashMap<ExecutionId, Prepared>,
    /// The runs told to start that have not had a thread yet.
    starting: exec::Starting,
    /// Outstanding `GetTree` requests, by the job whose subtree they load.
    trees: HashMap<RequestId, String>,
    stream: Option<Box<dyn EventStream>>,
    watch_rx: mpsc::UnboundedReceiver<RegistryEvent>,
    watch_tx: mpsc::UnboundedSender<RegistryEvent>,
    replies_tx: mpsc::UnboundedSender<(RequestId, RegistryReply)>,
    replies_rx: mpsc::UnboundedReceiver<(RequestId, RegistryReply)>,
    finished_tx: mpsc::UnboundedSender<Box<exec::Finished>>,
    finished_rx: mpsc::UnboundedReceiver<Box<exec::Finished>>,
    ops: mpsc::UnboundedReceiver<Op>,
    ops_open: bool,
    state: watch::Sender<SchedulerState>,
    events: super::events::EventOut,
    cancel_timeout: Duration,
    shutdown_grace: Duration,
    registry_name: String,
    /// The registry connection, for the log.
    outage: Outage,
    /// Set by [`Op::ShutdownNow`]: the loop ends at once.
    abandon: bool,
    /// During a graceful shutdown: when it began, and when to say again what it waits for.
    leaving: Option<(Instant, Instant)>,
    /// The `mono` of the last `handle_timeout`, so a timer that stays due cannot spin.
    last_timeout: Option<Mono>,
    closed: bool,
    /// Jobs whose leader node changed since the metrics last looked (the leader gauge).
    leader_touched: BTreeSet<String>,
    /// Callers of `remove_job`, answered when the instance has left the job.
    removing: BTreeMap<String, Vec<oneshot::Sender<Result<(), RuntimeError>>>>,
    /// The copy of the jobs' nodes the dump port shows, when it is on.
    mirror: Option<Mirror>,
    /// The jobs' notifier tasks.
    notifiers: NotifierTasks,
    /// What the driver records for the metrics, when they are on.
    metrics: Option<DriverProbe>,
}

impl Driver {
    pub(crate) fn new(p: Parts) -> Self {
        let (watch_tx, watch_rx) = mpsc::unbounded_channel();
        let (replies_tx, replies_rx) = mpsc::unbounded_channel();
        let (finished_tx, finished_rx) = mpsc::unbounded_channel();
        let jobs = p
            .jobs
            .into_iter()
            .map(|(config, job, listeners)| {
                (
                    config.job_name.clone(),
                    JobEntry::new(
                        config,
                        job,
                        listeners,
                        &p.registry,
                        &p.instance,
                        &p.notifiers,
                    ),
                )
            })
            .collect();
        Self {
            machine: p.machine,
            registry: p.registry,
            clock: p.clock,
            instance: p.instance,
            jobs,
            factories: p.factories,
            running: HashMap::new(),
            prepared: HashMap::new(),
            starting: exec::Starting::default(),
            trees: HashMap::new(),
            stream: Some(p.stream),
            watch_rx,
            watch_tx,
            replies_tx,
            replies_rx,
            finished_tx,
            finished_rx,
            ops: p.ops,
            ops_open: true,
            state: p.state,
            events: p.events,
            cancel_timeout: p.cancel_timeout,
            shutdown_grace: p.shutdown_grace,
            registry_name: p.registry_name.unwrap_or_else(|| "the registry".to_owned()),
            outage: Outage::new(),
            abandon: false,
            leaving: None,
            last_timeout: None,
            closed: false,
            leader_touched: BTreeSet::new(),
            removing: BTreeMap::new(),
            mirror: p.mirror,
            notifiers: p.notifiers,
            metrics: p.metrics,
        }
    }

    pub(crate) async fn run(mut self) {
        // The watch is read by a task of its own, so that no event is lost to a `select!`
        // that drops a half-done `next()` (not every backend's stream is cancel-safe).
        if let Some(mut stream) = self.stream.take() {
            let tx = self.watch_tx.clone();
            tokio::spawn(async move {
                while let Some(ev) = stream.next().await {
                    if tx.send(ev).is_err() {
                        return;
                    }
                }
            });
        }
        // Only the forwarding task may keep the channel open: its end is the stream's end.
        let (dead_tx, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.watch_tx, dead_tx));

        tracing::info!(instance = %self.instance, jobs = self.jobs.len(), "scheduler started");
        if let Some(info) = self.registry.session() {
            let now = self.clock.now();
            let event = SessionEvent::Connected(info);
            if let Some(metrics) = &mut self.metrics {
                metrics.session(&event);
            }
            self.machine
                .handle_registry_event(RegistryEvent::Session(event), now);
        }
        // Since when the driver has stepped aside for runs told to start.
        let mut aside: Option<std::time::Instant> = None;
        let end = loop {
            self.pump().await;
            // Runs told to start go before the bookkeeping of the others (their ends, the
            // registry's replies and events): while any has not had a thread yet, the
            // driver yields its own. Without this, each run that ends wakes the driver ahead
            // of the runs still waiting (tokio runs a woken task next), and a thousand runs
            // fired together start over tens of milliseconds. Bounded, should a run's task
            // be starved, and never past a start that is due.
            if self.starting.pending() {
                let since = *aside.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= MAX_ASIDE {
                    // Runs that ended meanwhile report now, whatever is still starting.
                    self.starting.release();
                } else if !self.start_due() {
                    tokio::task::yield_now().await;
                    continue;
                }
            } else {
                aside = None;
            }
            if self.machine.is_stopped() {
                break SchedulerState::Stopped;
            }
            if self.abandon {
                self.cancel_and_wait().await;
                break SchedulerState::Stopped;
            }
            let deadline = self.timer_deadline();
            tokio::select! {
                op = self.ops.recv(), if self.ops_open => match op {
                    Some(op) => self.on_op(op),
                    None => {
                        // Every handle is gone: leave gracefully, as on SIGTERM.
                        self.ops_open = false;
                        tracing::info!(instance = %self.instance, "every handle dropped: shutting down");
                        let now = self.clock.now();
                        self.machine.shutdown(now);
                    }
                },
                ev = self.watch_rx.recv() => match ev {
                    Some(ev) => {
                        // Whatever else has arrived goes in the same batch: the machine then
                        // decides once per job, not once per event.
                        let mut batch = vec![ev];
                        while batch.len() < MAX_BATCH {
                            match self.watch_rx.try_recv() {
                                Ok(ev) => batch.push(ev),
                                Err(_) => break,
                            }
                        }
                        self.on_watch(batch);
                    }
                    None => break SchedulerState::Failed(
                        "the registry watch ended: the registry client was closed or killed".to_owned(),
                    ),
                },
                Some((id, reply)) = self.replies_rx.recv() => {
                    self.on_reply(id, reply);
                    for _ in 1..MAX_BATCH {
                        match self.replies_rx.try_recv() {
                            Ok((id, reply)) => self.on_reply(id, reply),
                            Err(_) => break,
                        }
                    }
                }
                Some(done) = self.finished_rx.recv() => {
                    let now = self.clock.now();
                    self.on_finished(*done, now);
                    // Runs that fired together end together: take the others in one go.
                    for _ in 1..MAX_BATCH {
                        match self.finished_rx.try_recv() {
                            Ok(done) => self.on_finished(*done, now),
                            Err(_) => break,
                        }
                    }
                }
                () = sleep_until(self.leaving.map(|l| l.1)), if self.leaving.is_some() => {
                    self.log_still_waiting();
                }
                () = sleep_until(self.outage.next_report()), if self.outage.next_report().is_some() => {
                    if let Some(report) = self.outage.on_tick(Instant::now()) {
                        self.log_outage(report);
                    }
                }
                () = sleep_until(deadline.map(|d| d.early)), if deadline.is_some() => {
                    if let Some(d) = deadline {
                        wait_out(d);
                    }
                    // The machine hands out starts in chunks: each chunk is carried out
                    // before the next is asked for, so the first runs start at once.
                    let mut now = self.clock.now();
                    loop {
                        self.last_timeout = Some(now.mono);
                        self.machine.handle_timeout(now);
                        if self.machine.next_start().is_none_or(|t| t > now.mono) {
                            break;
                        }
                        self.pump().await;
                        now = self.clock.now();
                    }
                }
            }
        };
        self.finish(end).await;
    }

    /// Whether the machine has a start to hand out now.
    fn start_due(&self) -> bool {
        self.machine
            .next_start()
            .is_some_and(|t| t <= self.clock.now().mono)
    }

    /// When to call `handle_timeout` next: the machine's time, but never again at a `mono`
    /// already handled (a deadline that stays due is retried a millisecond later).
    fn timer_deadline(&self) -> Option<Deadline> {
        let t = self.machine.poll_timeout()?;
        let t = match self.last_timeout {
            Some(last) if t <= last => last.after(1),
            _ => t,
        };
        let at = self.clock.instant_at(t);
        // Runs claimed ahead start on the dot: the timer is set a little early and the rest
        // is waited out precisely (see `wait_out`).
        let early = if self.machine.next_start() == Some(t) {
            at.checked_sub(START_LEAD).unwrap_or(at)
        } else {
            at
        };
        Some(Deadline { at, early })
    }

    async fn finish(mut self, end: SchedulerState) {
        if let SchedulerState::Failed(why) = &end {
            tracing::error!(instance = %self.instance, "scheduler stopped: {why}");
        }
        for (_, r) in self.running.drain() {
            r.cancel.cancel(CancelReason::SessionLost);
            r.task.abort();
        }
        if !self.closed {
            self.closed = true;
            match tokio::time::timeout(CLOSE_TIMEOUT, self.registry.close()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(instance = %self.instance, "closing the registry client: {e}")
                }
                Err(_) => tracing::warn!(
                    instance = %self.instance,
                    "closing the registry session took more than {}s: given up (the registry ends it at its timeout)",
                    CLOSE_TIMEOUT.as_secs()
                ),
            }
        }
        if end == SchedulerState::Stopped {
            tracing::info!(instance = %self.instance, "scheduler stopped");
            // A graceful stop left every job, those being removed included.
            for (_, replies) in std::mem::take(&mut self.removing) {
                for reply in replies {
                    let _ = reply.send(Ok(()));
                }
            }
        }
        self.state.send_replace(end);
    }

    /// Carries out every command the machine has queued.
    async fn pump(&mut self) {
        // Whether the runs started in this batch have anyone to tell of their items: looked
        // up once, at the first start (the channel's lock is shared with every run).
        let mut watched = None;
        while let Some(cmd) = self.machine.poll_command() {
            match cmd {
                Command::Registry { id, op } => {
                    if let RegistryOp::GetTree(path) = &op {
                        if let Some(job) = path.segments().next() {
                            self.trees.insert(id, job.to_owned());
                            // A load is a read of the job's whole subtree.
                            if let (Some(mirror), 1) = (&self.mirror, path.segments().count()) {
                                mirror.load_started(job, id);
                            }
                        }
                    }
                    let registry = Arc::clone(&self.registry);
                    let tx = self.replies_tx.clone();
                    let metrics = self
                        .metrics
                        .as_ref()
                        .map(|m| (m.requests(), metrics::op_index(&op)));
                    tokio::spawn(async move {
                        let began = std::time::Instant::now();
                        let reply = registry::execute(&*registry, op).await;
                        if let Some((requests, op)) = metrics {
                            requests.record(op, &reply, began.elapsed());
                        }
                        // The driver may have stopped meanwhile; then nobody needs the reply.
                        let _ = tx.send((id, reply));
                    });
                }
                Command::Start(execution) => self.start(execution, None),
                Command::StartPrepared(id) => match self.prepared.remove(&id) {
                    // Set up at the claim: only the signal is left to give. A run gone
                    // meanwhile hands its pass back, which drops it.
                    Some(Prepared::Waiting(go)) => {
                        let watched = *watched.get_or_insert_with(|| self.events.heard());
                        let _ = go.send(self.starting.pass(watched));
                    }
                    Some(Prepared::NoBody(execution)) => self.start(execution, None),
                    None => {}
                },
                Command::Prepare(execution) => {
                    let id = execution.id;
                    if self.jobs.contains_key(&execution.job_name) {
                        let (go, wait) = oneshot::channel();
                        self.prepared.insert(id, Prepared::Waiting(go));
                        self.start(execution, Some(wait));
                    } else {
                        // A job without a body here is not set up: its start reports the
                        // failure, which must not come before the run was told to start.
                        self.prepared.insert(id, Prepared::NoBody(execution));
                    }
                }
                Command::Discard(id) => {
                    self.prepared.remove(&id);
                    if let Some(r) = self.running.remove(&id) {
                        r.task.abort();
                    }
                }
                Command::Cancel { id, reason } => {
                    if let Some(r) = self.running.get(&id) {
                        tracing::warn!(instance = %self.instance, execution = id.0, ?reason, "cancelling running items");
                        r.cancel.cancel(reason);
                    }
                }
                Command::CloseSession => {
                    self.closed = true;
                    match tokio::time::timeout(CLOSE_TIMEOUT, self.registry.close()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(instance = %self.instance, "closing the registry session: {e}")
                        }
                        Err(_) => tracing::warn!(
                            instance = %self.instance,
                            "closing the registry session took more than {}s: given up (the registry ends it at its timeout)",
                            CLOSE_TIMEOUT.as_secs()
                        ),
                    }
                }
                Command::Event(event) => self.on_event(event),
            }
        }
    }

    /// Spawns an execution's task; with `go`, the task sets the run up and waits for the
    /// signal before it runs anything (a run prepared ahead of its fire).
    fn start(&mut self, execution: Execution, go: Option<oneshot::Receiver<exec::StartPass>>) {
        let id = execution.id;
        let (cancel_tx, cancel) = CancelSignal::new();
        let Some(entry) = self.jobs.get_mut(&execution.job_name) else {
            // The machine only starts hosted jobs; answer rather than leave it waiting.
            let outcomes = execution
                .items
                .iter()
                .map(|i| {
                    let why = "no job body is registered".to_owned();
                    (i.item, ItemOutcome::Failed(why))
                })
                .collect();
            let _ = self.finished_tx.send(Box::new(exec::Finished {
                id,
                outcomes,
                leftovers: None,
            }));
            return;
        };
        let limiter = entry.limiter();
        let task = ExecutionTask {
            execution,
            job: Arc::clone(&entry.job),
            config: Arc::clone(&entry.effective),
            limiter,
            resharding: entry.resharding.clone(),
            cancel,
            cancel_timeout: self.cancel_timeout,
            instance: self.instance.clone(),
            events: self.events.clone(),
            finished: self.finished_tx.clone(),
            warn_handler: !std::mem::replace(&mut entry.warned_handler, true),
            notifier: entry.notifier.for_config(&entry.effective),
            listeners: Arc::clone(&entry.listeners),
            guarantee: entry.run_guarantee.clone(),
            pass: go
                .is_none()
                .then(|| self.starting.pass(self.events.heard())),
            go,
            starting: self.starting.clone(),
        };
        let handle = tokio::spawn(task.run());
        self.running.insert(
            id,
            Running {
                cancel: cancel_tx,
                task: handle,
            },
        );
    }

    fn on_finished(&mut self, done: exec::Finished, now: Now) {
        let exec::Finished {
            id,
            outcomes,
            leftovers,
        } = done;
        self.running.remove(&id);
        self.machine.handle_execution_finished(id, outcomes, now);
        // Freed here rather than in the run's task (see `Leftovers`).
        drop(leftovers);
    }

    fn on_op(&mut self, op: Op) {
        let now = self.clock.now();
        match op {
            Op::Trigger {
                job,
                parameter,
                reply,
            } => {
                // The machine holds the trigger until the job is active and its plan gives
                // every item an owner.
                let result = if self.jobs.contains_key(&job) {
                    self.machine
                        .trigger(&job, parameter, now)
                        .map_err(RuntimeError::Machine)
                } else {
                    Err(RuntimeError::Machine(MachineError::UnknownJob(job)))
                };
                let _ = reply.send(result);
            }
            Op::AddJob {
                config,
                job,
                listeners,
                reply,
            } => {
                let listeners = match listeners::resolve(&config, listeners, &self.factories) {
                    Ok(listeners) => listeners,
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                        return;
                    }
                };
                let spec = JobSpec {
                    config: (*config).clone(),
                    job_type: job.job_type(),
                };
                let result = self.machine.add_job(spec, now);
                if result.is_ok() {
                    tracing::info!(instance = %self.instance, job = %config.job_name, "job added");
                    let name = config.job_name.clone();
                    let entry = JobEntry::new(
                        *config,
                        job,
                        listeners,
                        &self.registry,
                        &self.instance,
                        &self.notifiers,
                    );
                    self.jobs.insert(name, entry);
                }
                let _ = reply.send(result.map_err(RuntimeError::from));
            }
            Op::RemoveJob { job, reply } => match self.machine.remove_job(&job, now) {
                // Answered when the machine says the instance has left the job.
                Ok(()) => self.removing.entry(job).or_default().push(reply),
                Err(e) => {
                    let _ = reply.send(Err(RuntimeError::from(e)));
                }
            },
            Op::Shutdown => {
                self.log_shutdown();
                if self.leaving.is_none() {
                    let at = Instant::now();
                    self.leaving = Some((at, at + STILL_WAITING_EVERY));
                }
                self.machine.shutdown(now);
            }
            Op::ShutdownNow => {
                let running: usize = self.running.len();
                tracing::warn!(
                    instance = %self.instance, running_executions = running,
                    "leaving at once: cancelling running items, their end is not recorded (failover runs them again)"
                );
                self.abandon = true;
            }
        }
    }

    /// Says what a graceful shutdown waits for: each job's running items, and until when
    /// before they are cancelled; and the jobs still waiting for their registry subtree.
    fn log_shutdown(&self) {
        let grace = self.shutdown_grace.as_secs_f64();
        let deadline = chrono::Utc::now()
            + chrono::Duration::from_std(self.shutdown_grace).unwrap_or(chrono::Duration::zero());
        let deadline = deadline.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut waiting = 0;
        for job in self.machine.job_names() {
            let items = self.machine.running_items(job);
            if !items.is_empty() {
                waiting += items.len();
                tracing::info!(
                    instance = %self.instance, %job, items = %join(&items),
                    "shutting down: waiting for running items to finish (cancelled at {deadline}, after {grace}s)"
                );
            } else if !self.machine.is_active(job) {
                tracing::info!(
                    instance = %self.instance, %job,
                    "shutting down: the job is not active here (its registry subtree is not loaded): left without waiting for it"
                );
            }
        }
        if waiting == 0 {
            tracing::info!(instance = %self.instance, "shutting down: no item runs here, leaving now");
        } else {
            tracing::info!(
                instance = %self.instance, items = waiting,
                "shutting down: waiting at most {grace}s for {waiting} running item(s); a second SIGTERM or Ctrl-C cancels them and leaves at once"
            );
        }
    }

    /// During a graceful shutdown, says again what it still waits for (every
    /// [`STILL_WAITING_EVERY`]), until nothing runs.
    fn log_still_waiting(&mut self) {
        let Some((since, _)) = self.leaving else {
            return;
        };
        let waited = since.elapsed();
        let left = self
            .shutdown_grace
            .saturating_sub(waited)
            .as_secs_f64()
            .round() as u64;
        let mut any = false;
        for job in self.machine.job_names() {
            let items = self.machine.running_items(job);
            if items.is_empty() {
                continue;
            }
            any = true;
            let when = if left > 0 {
                format!("{left}s left before they are cancelled")
            } else {
                "cancelled: waiting for them to stop".to_owned()
            };
            tracing::info!(
                instance = %self.instance, %job, items = %join(&items),
                "shutting down: still waiting for running items after {}s ({when})",
                waited.as_secs()
            );
        }
        self.leaving = any.then(|| (since, Instant::now() + STILL_WAITING_EVERY));
    }

    /// Cancels every running execution and waits for their tasks to end, at most the cancel
    /// timeout (a script is killed with its process group at once).
    async fn cancel_and_wait(&mut self) {
        let mut tasks = Vec::new();
        for (_, r) in self.running.drain() {
            r.cancel.cancel(CancelReason::Shutdown);
            tasks.push(r.task);
        }
        if tasks.is_empty() {
            return;
        }
        let bound = self.cancel_timeout.min(Duration::from_secs(5));
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        if tokio::time::timeout(bound, futures_util::future::join_all(tasks))
            .await
            .is_err()
        {
            tracing::warn!(instance = %self.instance, "cancelled items did not stop within {}s: dropped", bound.as_secs());
            for a in aborts {
                a.abort();
            }
        }
    }

    fn on_reply(&mut self, id: RequestId, reply: RegistryReply) {
        let tree = self.trees.remove(&id);
        if let Some(job) = &tree {
            self.observe_tree(job, &reply);
            if let Some(mirror) = &self.mirror {
                mirror.load_done(job, id, &reply);
            }
        }
        let now = self.clock.now();
        self.machine.handle_registry_reply(id, reply, now);
        if let Some(job) = &tree {
            self.refresh_config(job);
        }
        self.log_leaders();
    }

    fn on_watch(&mut self, events: Vec<RegistryEvent>) {
        let mut configs = Vec::new();
        for event in &events {
            match event {
                RegistryEvent::Node(ev) => {
                    if let Some(mirror) = &self.mirror {
                        mirror.event(ev);
                    }
                    let exists = ev.kind != WatchEventKind::Deleted;
                    if let Some(job) = self.observe_node(&ev.path, exists) {
                        configs.push(job);
                    }
                }
                // Events may have been missed: distribute-once waiters read the registry again.
                RegistryEvent::Session(session) => {
                    if let Some(metrics) = &mut self.metrics {
                        metrics.session(session);
                    }
                    for guarantee in self.jobs.values().filter_map(|e| e.guarantee.as_ref()) {
                        guarantee.changed();
                    }
                    if let Some(report) = self.outage.on_event(session, Instant::now()) {
                        self.log_outage(report);
                    }
                }
            }
        }
        let now = self.clock.now();
        self.machine.handle_registry_events(events, now);
        for job in configs {
            self.refresh_config(&job);
        }
        self.log_leaders();
    }

    /// Says a registry outage plainly: when it starts, while it lasts, when it ends.
    fn log_outage(&self, report: Report) {
        let me = &self.instance;
        let registry = &self.registry_name;
        let jobs = self.jobs.len();
        match report {
            Report::Lost => tracing::warn!(
                instance = %me, %registry, jobs,
                "registry unreachable: lost the connection to {registry}; {jobs} job(s) paused (no item starts) until it is back; the session survives if it comes back within the session timeout"
            ),
            Report::Expired { began: true } => tracing::warn!(
                instance = %me, %registry, jobs,
                "registry session ended (its nodes are gone): {jobs} job(s) paused until {registry} answers and this instance registers again"
            ),
            Report::Expired { began: false } => tracing::warn!(
                instance = %me, %registry, jobs,
                "registry still unreachable and the session has ended (its nodes are gone): this instance registers again once {registry} answers"
            ),
            Report::Lasts(d) => {
                let d = outage::human(d);
                tracing::warn!(
                    instance = %me, %registry, jobs, down_for = %d,
                    "registry unreachable for {d}: {jobs} job(s) paused"
                )
            }
            Report::Reconnected(d) => {
                let d = outage::human(d);
                tracing::warn!(
                    instance = %me, %registry, down_for = %d,
                    "registry reachable again after {d}: the session survived, jobs resume"
                )
            }
            Report::NewSession(d) => {
                let d = outage::human(d);
                tracing::warn!(
                    instance = %me, %registry, down_for = %d,
                    "registry reachable again after {d} with a new session: this instance registers again, jobs resume"
                )
            }
        }
    }

    /// With metrics on, sets the leader gauge of the jobs whose leader node changed (the
    /// items-owned gauge follows [`MachineEvent::ItemsOwned`]).
    fn log_leaders(&mut self) {
        for job in std::mem::take(&mut self.leader_touched) {
            let Some(entry) = self.jobs.get(&job) else {
                continue;
            };
            if let Some(metrics) = &mut self.metrics {
                metrics.job(&job, entry.owned, self.machine.is_leader(&job));
            }
        }
    }

    /// Takes the job's configuration in force from the machine (which parsed the registry's
    /// copy and keeps the last good one when a copy is unusable).
    fn refresh_config(&mut self, job: &str) {
        let Some(config) = self.machine.shared_config(job) else {
            return;
        };
        if let Some(entry) = self.jobs.get_mut(job) {
            let changed = !Arc::ptr_eq(&entry.effective, &config) && *entry.effective != *config;
            // ElasticJob's rule: without `overwrite`, the registry's copy wins over the local
            // one. Said when they differ, so that an edited file that "does nothing" is seen.
            if changed && !entry.local.overwrite && *config != *entry.local {
                let keys = differing_keys(&entry.local, &config).join(", ");
                tracing::warn!(
                    instance = %self.instance, %job, keys = %keys,
                    "the registry's configuration of the job differs from this instance's in {keys}: the registry's copy is in force (overwrite is false; set overwrite: true to make the local one win)"
                );
            }
            entry.effective = config;
        }
    }

    /// Follows the nodes the driver needs besides the machine: the distribute-once listeners'
    /// rounds and disabled items, and the leader (for the metrics). Returns the job when its
    /// configuration node changed (to be taken from the machine once it has seen the change).
    fn observe_node(&mut self, path: &NodePath, exists: bool) -> Option<String> {
        let (job, node) = JobNode::parse(path)?;
        let entry = self.jobs.get_mut(job)?;
        match node {
            JobNode::Guarantee => {
                if let Some(guarantee) = &entry.guarantee {
                    guarantee.changed();
                }
            }
            JobNode::Config if exists => return Some(job.to_owned()),
            // The metrics' leader gauge is looked at again once the machine has seen it.
            JobNode::LeaderInstance
                if self.metrics.is_some() && !self.leader_touched.contains(job) =>
            {
                self.leader_touched.insert(job.to_owned());
            }
            JobNode::ItemState(item, ItemLeaf::Disabled) => {
                if let Some(guarantee) = &entry.guarantee {
                    guarantee.set_disabled(item, exists);
                }
            }
            _ => {}
        }
        None
    }

    fn observe_tree(&mut self, job: &str, reply: &RegistryReply) {
        let RegistryReply::Tree(tree) = reply else {
            return;
        };
        if let Some(entry) = self.jobs.get_mut(job) {
            self.leader_touched.insert(job.to_owned());
            if let Some(guarantee) = &entry.guarantee {
                guarantee.clear_disabled();
                guarantee.changed();
            }
        }
        for node in &tree.nodes {
            // The configuration is taken from the machine once it has handled the reply.
            let _ = self.observe_node(&node.path, true);
        }
    }

    fn on_event(&mut self, event: MachineEvent) {
        if let Some(metrics) = &mut self.metrics {
            metrics.machine_event(&event);
        }
        let me = &self.instance;
        match &event {
            MachineEvent::JobActive { job } => tracing::info!(instance = %me, %job, "job active"),
            MachineEvent::ItemsOwned { job, items } => {
                if let Some(entry) = self.jobs.get_mut(job) {
                    entry.owned = items.len();
                    if let Some(metrics) = &mut self.metrics {
                        metrics.job(job, items.len(), self.machine.is_leader(job));
                    }
                }
                let set: BTreeSet<u32> = items.iter().copied().collect();
                if items.is_empty() {
                    tracing::info!(instance = %me, %job, "this instance owns no item of the job");
                } else {
                    let noun = if items.len() == 1 { "item" } else { "items" };
                    let list = ranges(&set);
                    tracing::info!(
                        instance = %me, %job, items = %list, count = items.len(),
                        "this instance owns {noun} {list} of the job"
                    );
                }
            }
            MachineEvent::ReshardingPending { job, pending } => {
                if let Some(entry) = self.jobs.get(job) {
                    entry.resharding.set(*pending);
                }
            }
            MachineEvent::ConfigInvalid { job, error } => {
                if self.machine.config(job).is_some() {
                    tracing::error!(instance = %me, %job, "kept the last good configuration because the registry's copy cannot be used: {error}")
                } else {
                    tracing::error!(instance = %me, %job, "the job does not run here until its configuration in the registry is fixed, because it cannot be used: {error}")
                }
            }
            MachineEvent::RegistryClockOff {
                job,
                off_ms,
                limit_ms,
            } => tracing::error!(
                instance = %me, %job, off_ms, limit_ms,
                "this host's clock is {off_ms:+} ms off the registry's, more than the job allows \
                 ({limit_ms} ms: maxTimeDiffSeconds, or a second while ElasticJob instances share \
                 the job): its runs are held here until the clock is right (check NTP); the \
                 fires missed meanwhile run as misfires"
            ),
            MachineEvent::RegistryClockBack { job } => tracing::info!(
                instance = %me, %job,
                "this host's clock is within the job's limit of the registry's again: runs go on"
            ),
            MachineEvent::UnhonouredTimeDiff { job, seconds } => tracing::warn!(
                instance = %me, %job, seconds,
                "the registry's configuration sets maxTimeDiffSeconds {seconds}, ElasticJob's \
                 check of the clock against the registry's before each run: shardjob does not \
                 make it, and runs the job without it (keep the hosts' clocks in step)"
            ),
            MachineEvent::JobTypeConflict {
                job,
                registry,
                local,
            } => tracing::error!(
                instance = %me, %job,
                "the registry holds job type {registry:?}, this instance has {local:?}: the job does not run here"
            ),
            MachineEvent::BecameLeader { job } => {
                tracing::info!(instance = %me, %job, "became leader")
            }
            MachineEvent::Resharded { job, owners, .. } => {
                tracing::info!(instance = %me, %job, plan = %plan(owners), "re-sharded")
            }
            MachineEvent::ReshardProgress {
                job,
                written,
                total,
            } => {
                tracing::info!(instance = %me, %job, written, total, "re-sharding: {written} of {total} items written")
            }
            MachineEvent::PlanRefused {
                job,
                strategy,
                problem,
            } => tracing::error!(
                instance = %me, %job, %strategy,
                "the sharding strategy broke its contract, the plan stays as it is: {problem}"
            ),
            MachineEvent::TxnSplit { job, items } => {
                tracing::info!(instance = %me, %job, items, "transaction too large for the registry: split, at most {items} items each")
            }
            MachineEvent::CorruptNode { path, error } => {
                tracing::warn!(instance = %me, %path, "unreadable node, treated as absent: {error}")
            }
            MachineEvent::RegistryFailed {
                job,
                purpose,
                error,
            } => {
                let job = job.as_deref().unwrap_or("-");
                match error.class() {
                    // Another instance changed the node first: the machine re-reads and decides
                    // again. Normal when instances start or move items at the same time.
                    ErrorClass::Conflict => {
                        tracing::debug!(instance = %me, job, purpose, "registry request lost a race: {error}")
                    }
                    ErrorClass::Fatal => {
                        tracing::error!(instance = %me, job, purpose, "registry request failed: {error}")
                    }
                    _ => {
                        tracing::warn!(instance = %me, job, purpose, "registry request failed: {error}")
                    }
                }
            }
            MachineEvent::CompletionLost { job, items } => {
                tracing::warn!(instance = %me, %job, ?items, "the end of a run could not be recorded (session lost)")
            }
            MachineEvent::ClockStepped { by_ms } => {
                tracing::warn!(instance = %me, by_ms, "the wall clock stepped: fires planned again")
            }
            MachineEvent::SessionInDoubt => {
                tracing::warn!(instance = %me, "session in doubt: running items cancelled, none start")
            }
            MachineEvent::SessionLost => {
                tracing::warn!(instance = %me, "registry session lost: registering again")
            }
            MachineEvent::LeftUnloaded { job, reason } => {
                tracing::warn!(instance = %me, %job, "leaving the job without it: {reason}")
            }
            MachineEvent::OperatorShutdown { job } => {
                tracing::warn!(
                    instance = %me,
                    %job,
                    "an operator shut this job down here (its instance node was deleted while the \
                     session lives): running items cancelled and handed over; this instance runs \
                     nothing more of the job until the process restarts or the job is added again"
                )
            }
            MachineEvent::JavaLeftOverCleared { job, path, value } => {
                tracing::warn!(
                    instance = %me,
                    %job,
                    %path,
                    %value,
                    "removed a node ElasticJob left in a job it no longer shares (a failover \
                     never finished or never claimed); its fire is not run again unless \
                     shardjob's execution record of the item names it"
                )
            }
            MachineEvent::StaleRunningCleared {
                job,
                item,
                path,
                value,
                settled,
            } => {
                let what = match settled {
                    shardjob_core::machine::StaleSettle::FailedOver { fire } => {
                        format!("its fire {fire} (epoch ms) is failed over")
                    }
                    shardjob_core::machine::StaleSettle::GivenUp { fire } => {
                        format!("its fire {fire} (epoch ms) is given up (failover is off)")
                    }
                    shardjob_core::machine::StaleSettle::Removed => {
                        "no fire of it is owed".to_owned()
                    }
                };
                tracing::warn!(
                    instance = %me, %job, item, %path, value = %value.trim(),
                    "removed a running marker no session held, whose owner {:?} is gone \
                     (a killed ElasticJob instance's, or written by hand): it kept item {item} \
                     from running; {what}",
                    value.trim()
                )
            }
            MachineEvent::LeftMarkerRemoved { job, item, value } => tracing::warn!(
                instance = %me, %job, item, value = %value.trim(),
                "removed item {item}'s running marker of {:?}, left behind by its session in a \
                 job shared with ElasticJob (this instance's earlier session, whose runs were \
                 cancelled before it expired, or an instance that is gone and whose run \
                 ElasticJob did not fail over): it kept the item from running",
                value.trim()
            ),
            MachineEvent::OrphansSettled { job, items } => tracing::info!(
                instance = %me, %job, ?items,
                "runs whose instance's session ended are ElasticJob's failover's in a job shared \
                 with ElasticJob: their fires count as done here (run by ElasticJob's failover, \
                 or given up where it could not)"
            ),
            MachineEvent::ReshardStalled {
                job,
                leader,
                waited_ms,
            } => tracing::warn!(
                instance = %me, %job, leader = %leader.trim(), waited_ms,
                "the job's leader {:?}, an ElasticJob instance, has not re-sharded for {} s: new \
                 runs of the job are held here until it does, as ElasticJob's own instances \
                 wait (look at that instance: a long run, a stuck running node, a pause)",
                leader.trim(),
                waited_ms / 1_000
            ),
            MachineEvent::GoneOwnersFlagged { job, items } => {
                let items: Vec<String> = items
                    .iter()
                    .map(|(i, owner)| {
                        if owner.is_empty() {
                            format!("{i} (no owner)")
                        } else {
                            format!("{i} ({owner})")
                        }
                    })
                    .collect();
                tracing::warn!(
                    instance = %me, %job, items = %items.join(", "),
                    "the ElasticJob leader's plan gives items to instances that are gone, with \
                     no re-sharding flag: set the flag, so that it re-shards at its next fire \
                     (ElasticJob re-shards only when an instance comes or goes)"
                );
            }
            MachineEvent::UnboundInstance {
                job,
                path,
                value,
                deleting,
            } => {
                let then = if *deleting {
                    "it is not an instance's (id or value malformed): deleting it"
                } else {
                    "delete it if no instance of that id runs"
                };
                tracing::warn!(
                    instance = %me, %job, %path, value = %value.trim(),
                    "an instance node no session holds (persistent, written by hand or a tool):                      never given items; {then}"
                )
            }
            MachineEvent::JobLeft { job } => {
                tracing::info!(instance = %me, %job, "left the job");
                if let Some(mirror) = &self.mirror {
                    mirror.forget(job);
                }
                self.jobs.remove(job);
                for reply in self.removing.remove(job).unwrap_or_default() {
                    let _ = reply.send(Ok(()));
                }
            }
            // Events a newer core adds are passed on to subscribers and logged at debug level.
            #[allow(unreachable_patterns)]
            other => tracing::debug!(instance = %me, event = ?other, "machine event"),
        }
        self.events.send(RunEvent::Machine(event));
    }
}

/// How often a graceful shutdown says again what it still waits for.
const STILL_WAITING_EVERY: Duration = Duration::from_secs(10);

/// How long closing the registry session may take before the driver goes on without it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The top-level keys (ElasticJob's names) whose values differ between two configurations.
fn differing_keys(a: &JobConfig, b: &JobConfig) -> Vec<String> {
    use serde_yaml_ng::{Mapping, Value};
    let map = |c: &JobConfig| match serde_yaml_ng::from_str::<Value>(&c.to_yaml()) {
        Ok(Value::Mapping(m)) => m,
        _ => Mapping::new(),
    };
    let (a, b) = (map(a), map(b));
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys().filter(|k| !a.contains_key(*k)))
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| match k {
            Value::String(s) => s.clone(),
            other => format!("{other:?}"),
        })
        .collect();
    keys.sort();
    if keys.is_empty() {
        // Equal in YAML, different in memory: say so rather than name nothing.
        keys.push("(a setting the YAML form does not show)".to_owned());
    }
    keys
}

/// Items as `0-4,7,9-12` (runs of consecutive items as ranges).
fn ranges(items: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for &i in items {
        run = match run {
            Some((a, b)) if b.checked_add(1) == Some(i) => Some((a, i)),
            Some(r) => {
                out.push(range(r));
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some(r) = run {
        out.push(range(r));
    }
    out.join(",")
}

fn range((a, b): (u32, u32)) -> String {
    if a == b {
        a.to_string()
    } else if b == a + 1 {
        format!("{a},{b}")
    } else {
        format!("{a}-{b}")
    }
}

/// Items as `0,3,6`.
fn join(items: &[u32]) -> String {
    items
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn plan(owners: &BTreeMap<u32, InstanceId>) -> String {
    let mut by: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (item, id) in owners {
        by.entry(id.as_str()).or_default().push(item.to_string());
    }
    by.iter()
        .map(|(id, items)| format!("{id}=[{}]", items.join(",")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How much before a start the driver's timer is set: tokio's timer has millisecond ticks
/// and rounds up, and the process's wake-up adds to that.
const START_LEAD: Duration = Duration::from_micros(2_500);

/// A run announced with [`Command::Prepare`], until its start or discard.
enum Prepared {
    /// Set up: its task waits for the start signal.
    Waiting(oneshot::Sender<exec::StartPass>),
    /// Of a job with no body here: nothing to set up; its start reports the failure.
    NoBody(Execution),
}

/// The longest the driver puts its bookkeeping off for runs told to start that have not had a
/// thread yet (see the run loop).
const MAX_ASIDE: Duration = Duration::from_millis(20);

/// When the machine's timer is due, and when to wake for it.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    early: Instant,
}

/// Waits out the rest of a deadline the timer woke early for, yielding the thread meanwhile
/// (at most [`START_LEAD`] of real time, once per start time: fires fall on whole seconds).
/// The bound holds under tokio's paused test clock too, which a busy wait cannot advance.
fn wait_out(d: Deadline) {
    let limit = std::time::Instant::now() + START_LEAD;
    while Instant::now() < d.at && std::time::Instant::now() < limit {
        std::thread::yield_now();
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_keys_are_named() {
        let a = JobConfig::new("j", 2);
        let mut b = a.clone();
        b.sharding_total_count = 3;
        b.description = "edited".to_owned();
        assert_eq!(
            differing_keys(&a, &b),
            vec!["description", "shardingTotalCount"]
        );
    }

    #[test]
    fn items_are_written_as_ranges() {
        let set = |v: &[u32]| v.iter().copied().collect::<BTreeSet<u32>>();
        assert_eq!(ranges(&set(&[])), "");
        assert_eq!(ranges(&set(&[0, 3, 6])), "0,3,6");
        assert_eq!(ranges(&set(&[0, 1, 2, 3, 4, 7, 9, 10])), "0-4,7,9,10");
        assert_eq!(
            ranges(&set(&[5, 6, 7, u32::MAX])),
            format!("5-7,{}", u32::MAX)
        );
    }
}
