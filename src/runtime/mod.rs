//! The runtime: a tokio driver around the core [`Machine`], and the API a service embeds.
//!
//! One [`Scheduler`] is one instance: one registry client (one session) and one recursive
//! watch for all its jobs, one [`Machine`], one driver task. The driver feeds the machine
//! watch events, registry replies, timer expiries and finished executions, and carries out
//! its commands: registry requests (run concurrently), starting items (per-job concurrency by
//! the executor strategy: `CPU` = cores × 2 items at once, `SINGLE_THREAD` = 1), cancelling
//! them, closing the session at the end of a graceful shutdown, and logging what happens
//! through `tracing`. A job's [`listeners`] run around each execution of its
//! items.
//!
//! ```no_run
//! use std::sync::Arc;
//! use shardjob::core::{CronExpr, JobConfig};
//! use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
//! use shardjob::mem::MemServer;
//! use shardjob::runtime::Scheduler;
//!
//! struct Hello;
//!
//! #[async_trait::async_trait]
//! impl SimpleJob for Hello {
//!     async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
//!         println!("item {} of {}", ctx.sharding_item, ctx.sharding_total_count);
//!         Ok(())
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = MemServer::default();
//! let config = JobConfig::new("hello", 4).with_cron(CronExpr::parse("0/5 * * * * ?")?);
//! let scheduler = Scheduler::builder()
//!     .registry(Arc::new(server.connect_default()))
//!     .job(config, Hello)
//!     .build()
//!     .await?;
//! scheduler.trigger("hello", Some("now".into())).await?;
//! scheduler.shutdown().await?; // finishes running items and leaves the cluster
//! # Ok(()) }
//! ```

mod driver;
pub mod dump;
pub(crate) mod events;
mod exec;
mod ident;
mod mirror;
mod outage;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use shardjob_core::machine::record::RunKind;
use shardjob_core::machine::{
    ExecutionId, ItemOutcome, Machine, MachineError, MachineEvent, MachineOptions,
};
use shardjob_core::registry::{NodePath, Registry, RegistryError};
use shardjob_core::{InstanceId, InstanceIdError, JobConfig, ShardingStrategy};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::jobs::{CapturedOutput, Job, JobError};
use crate::listeners::{
    self, JobListener, ListenerError, ListenerFactory, ListenerHook, ListenerSetupError,
};
use crate::metrics::{Metrics, MetricsAddr};

pub use driver::executor_size;
pub use dump::{DumpAddr, DumpLimits};
pub use ident::{default_instance_id, local_ipv4};

/// How long a cancelled item may ignore its cancellation before the runtime drops it.
pub const DEFAULT_CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// How many [`RunEvent`]s a subscriber may fall behind before it misses some.
pub const EVENT_CAPACITY: usize = 4096;

/// Errors of the runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// [`SchedulerBuilder::build`] was called without a registry.
    #[error("no registry was given to the scheduler builder")]
    NoRegistry,
    /// The instance id is not valid.
    #[error("invalid instance id: {0}")]
    InstanceId(#[from] InstanceIdError),
    /// The machine refused an operator command (unknown or duplicate job, invalid
    /// configuration, shutting down).
    #[error(transparent)]
    Machine(#[from] MachineError),
    /// A job's listeners cannot be made (an unknown `jobListenerTypes` name, a listener for
    /// a job that was not added).
    #[error(transparent)]
    Listener(#[from] ListenerSetupError),
    /// The registry watch could not be opened.
    #[error("cannot watch the registry: {0}")]
    Watch(RegistryError),
    /// The scheduler has stopped (after a shutdown) and takes no more commands.
    #[error("the scheduler has stopped")]
    Stopped,
    /// The job history cannot be set up (a database URL that cannot be used).
    #[error("job history: {0}")]
    Tracing(String),
    /// A job's notifier error handler (`EMAIL`, `WECHAT`, `DINGTALK`) cannot be set up: its
    /// props are missing, unknown or invalid ([`crate::notify::NotifyError`]).
    #[error("{0}")]
    Notify(String),
    /// The scheduler stopped because it could not go on (its registry client was closed or
    /// killed under it).
    #[error("the scheduler failed: {0}")]
    Failed(String),
    /// The metrics endpoint could not be opened ([`SchedulerBuilder::metrics`]).
    #[error(
        "cannot open the metrics endpoint on {addr}: {error} (is the port taken or the address not this host's? pick another port, or 0 for any free one)"
    )]
    Metrics {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        error: String,
    },
    /// The dump port could not be opened ([`SchedulerBuilder::dump`]).
    #[error(
        "cannot open the dump port on {addr}: {error} (is the port taken or the address not this host's? pick another port, or 0 for any free one)"
    )]
    Dump {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        error: String,
    },
}

/// Where a scheduler is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedulerState {
    /// It runs.
    Running,
    /// It left gracefully and closed its session.
    Stopped,
    /// It stopped because it could not go on; running items were cancelled and dropped.
    Failed(String),
}

/// One item's run, as reported in [`RunEvent`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRunInfo {
    /// The instance that runs it.
    pub instance: InstanceId,
    /// The job.
    pub job: String,
    /// The item.
    pub item: u32,
    /// The execution it belongs to.
    pub execution: ExecutionId,
    /// The scheduled fire time (the trigger time for a trigger).
    pub fire_time: DateTime<Utc>,
    /// Why it runs.
    pub kind: RunKind,
    /// Its fencing token.
    pub fencing_token: u64,
    /// ElasticJob's task id of its execution, `{job}@-@{items}@-@READY@-@{instance}` (the
    /// items this instance runs for the fire).
    pub task_id: String,
}

/// What a scheduler reports to subscribers ([`SchedulerHandle::subscribe`]).
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// An item's job body is about to run.
    ItemStarted {
        /// Which run.
        run: ItemRunInfo,
        /// When the body started (wall clock).
        at: DateTime<Utc>,
    },
    /// An item ended (or was never started because its run was cancelled first).
    ItemFinished {
        /// Which run.
        run: ItemRunInfo,
        /// How it ended.
        outcome: ItemOutcome,
        /// The error, for a failed or interrupted item.
        error: Option<JobError>,
        /// What the job captured (a script's stdout and stderr).
        output: Option<CapturedOutput>,
        /// How long the body ran.
        elapsed: Duration,
    },
    /// A listener hook failed, panicked, timed out or was stopped (see
    /// [`crate::listeners`]).
    ListenerFailed {
        /// The job.
        job: String,
        /// The execution it was called for.
        execution: ExecutionId,
        /// The execution's fire time.
        fire_time: DateTime<Utc>,
        /// The listener's [name](JobListener::name).
        listener: String,
        /// Which hook.
        hook: ListenerHook,
        /// What went wrong.
        error: ListenerError,
    },
    /// Something the state machine reported (leadership, re-sharding, session trouble...).
    Machine(MachineEvent),
}

/// Entry point: `Scheduler::builder()`.
#[derive(Debug)]
pub struct Scheduler;

impl Scheduler {
    /// A builder with no registry and no jobs.
    pub fn builder() -> SchedulerBuilder {
        SchedulerBuilder {
            registry: None,
            instance_id: None,
            jobs: Vec::new(),
            listeners: Vec::new(),
            listener_types: BTreeMap::new(),
            strategies: Vec::new(),
            configure: Vec::new(),
            cancel_timeout: DEFAULT_CANCEL_TIMEOUT,
            events: broadcast::channel(EVENT_CAPACITY).0,
            registry_name: None,
            dump: None,
            metrics: None,
            #[cfg(feature = "history")]
            tracing: None,
        }
    }
}

type Configure = Box<dyn FnOnce(&mut MachineOptions) + Send>;

/// Builds a scheduler: a registry, jobs, options; then [`SchedulerBuilder::build`].
pub struct SchedulerBuilder {
    registry: Option<Arc<dyn Registry>>,
    instance_id: Option<InstanceId>,
    jobs: Vec<(JobConfig, Arc<dyn Job>)>,
    listeners: Vec<(String, Arc<dyn JobListener>)>,
    listener_types: BTreeMap<String, ListenerFactory>,
    strategies: Vec<Arc<dyn ShardingStrategy>>,
    configure: Vec<Configure>,
    cancel_timeout: Duration,
    events: broadcast::Sender<RunEvent>,
    registry_name: Option<String>,
    dump: Option<(DumpAddr, DumpLimits)>,
    /// The metrics, and where to serve them (if not only in an application's registry).
    metrics: Option<(Metrics, Option<MetricsAddr>)>,
    #[cfg(feature = "history")]
    tracing: Option<Result<crate::history::TracingConfig, String>>,
}

impl std::fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("instance_id", &self.instance_id)
            .field(
                "jobs",
                &self.jobs.iter().map(|j| &j.0.job_name).collect::<Vec<_>>(),
            )
            .field("listener_types", &self.listener_types.keys())
            .field(
                "strategies",
                &self.strategies.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl SchedulerBuilder {
    /// Events from the scheduler's very start, before [`SchedulerBuilder::build`] returns:
    /// its jobs becoming active, the first runs. [`SchedulerHandle::subscribe`] sees only
    /// what comes after it is called, which can be after some of those.
    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.events.subscribe()
    }

    /// The registry client. Its session is this instance's; the scheduler closes it at the end
    /// of a graceful shutdown.
    pub fn registry(mut self, registry: Arc<dyn Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// How the registry is named in the log when it cannot be reached (its address, say
    /// `zk://10.0.0.5:2181/shop`; never credentials). By default "the registry".
    pub fn registry_name(mut self, name: impl Into<String>) -> Self {
        self.registry_name = Some(name.into());
        self
    }

    /// This instance's id; by default [`default_instance_id`] (`{ip}@-@{pid}`, with a random
    /// part when the machine has only loopback). Several
    /// schedulers in one process need distinct ids.
    pub fn instance_id(mut self, id: InstanceId) -> Self {
        self.instance_id = Some(id);
        self
    }

    /// Adds a job: its local configuration and its body.
    pub fn job(self, config: JobConfig, job: impl Job) -> Self {
        self.job_arc(config, Arc::new(job))
    }

    /// Adds a job whose body is shared.
    pub fn job_arc(mut self, config: JobConfig, job: Arc<dyn Job>) -> Self {
        self.jobs.push((config, job));
        self
    }

    /// Adds a listener to the job called `job` (added with [`SchedulerBuilder::job`], before
    /// or after this call): its hooks run around every run of the job's items on this
    /// instance. See [`crate::listeners`].
    pub fn listener(self, job: impl Into<String>, listener: impl JobListener) -> Self {
        self.listener_arc(job, Arc::new(listener))
    }

    /// Adds a shared listener to a job.
    pub fn listener_arc(mut self, job: impl Into<String>, listener: Arc<dyn JobListener>) -> Self {
        self.listeners.push((job.into(), listener));
        self
    }

    /// Registers a listener type by name: every job whose `jobListenerTypes` lists `name` gets
    /// a listener made by `factory` from the job's local configuration (also jobs added later
    /// with [`SchedulerHandle::add_job`]). A name in `jobListenerTypes` that no type is
    /// registered for makes [`SchedulerBuilder::build`] fail.
    pub fn listener_type(
        mut self,
        name: impl Into<String>,
        factory: impl Fn(&JobConfig) -> Arc<dyn JobListener> + Send + Sync + 'static,
    ) -> Self {
        self.listener_types.insert(name.into(), Arc::new(factory));
        self
    }

    /// Registers a custom sharding strategy: jobs name it in `jobShardingStrategyType`, as
    /// ElasticJob's `JobShardingStrategy` SPI does. Every instance that hosts such a job must
    /// register the same strategy (the leader, whichever instance it is, works the plan out
    /// with it); a job that names a strategy this instance lacks makes
    /// [`SchedulerBuilder::build`] fail. The strategy's assignment must give every item to
    /// exactly one of the candidates; one that does not is refused and reported
    /// ([`MachineEvent::PlanRefused`]), and the plan stays as it was. Built-in names cannot
    /// be taken.
    pub fn strategy(self, strategy: impl ShardingStrategy + 'static) -> Self {
        self.strategy_arc(Arc::new(strategy))
    }

    /// Registers a shared custom sharding strategy (see [`SchedulerBuilder::strategy`]).
    pub fn strategy_arc(mut self, strategy: Arc<dyn ShardingStrategy>) -> Self {
        self.strategies.push(strategy);
        self
    }

    /// Adjusts the machine's options (safety margin, re-shard debounce and wait, failover
    /// take-over delay, shutdown grace, ...). The instance id set here is overridden by
    /// [`SchedulerBuilder::instance_id`].
    pub fn options(mut self, f: impl FnOnce(&mut MachineOptions) + Send + 'static) -> Self {
        self.configure.push(Box::new(f));
        self
    }

    /// Serves ElasticJob's dump (snapshot) protocol on `addr` while the scheduler runs: a
    /// client sends `dump@{job}` and gets the job's registry tree, IPv4 addresses masked, with
    /// this instance's copy of the nodes where it differs (see [`dump`]). A port alone binds
    /// `127.0.0.1` (`.dump(9888)`); give a socket address to listen elsewhere
    /// (`.dump("0.0.0.0:9888".parse::<SocketAddr>()?)`); port 0 takes a free port
    /// ([`SchedulerHandle::dump_addr`]). The port has no authentication: expose it with care.
    /// [`SchedulerBuilder::build`] fails with [`RuntimeError::Dump`] if it cannot be bound.
    ///
    /// [`SocketAddr`]: std::net::SocketAddr
    pub fn dump(self, addr: impl Into<DumpAddr>) -> Self {
        self.dump_with(addr, DumpLimits::default())
    }

    /// [`SchedulerBuilder::dump`] with other bounds on its clients than the defaults (how
    /// long a client has for its request and for the answer, how long the registry has, how
    /// many clients are served at once).
    pub fn dump_with(mut self, addr: impl Into<DumpAddr>, limits: DumpLimits) -> Self {
        self.dump = Some((addr.into(), limits));
        self
    }

    /// How long a cancelled item may ignore its cancellation before it is dropped (default
    /// [`DEFAULT_CANCEL_TIMEOUT`]).
    pub fn cancel_timeout(mut self, timeout: Duration) -> Self {
        self.cancel_timeout = timeout;
        self
    }

    /// Serves Prometheus metrics ([`crate::metrics`]) on `GET /metrics` at `addr`: a port
    /// alone binds `127.0.0.1` (`.metrics(9464)`), a [`SocketAddr`](std::net::SocketAddr)
    /// binds what it says (port 0: any free port, see [`SchedulerHandle::metrics_addr`]). A
    /// port that cannot be bound makes [`SchedulerBuilder::build`] fail. The endpoint closes
    /// when the scheduler stops.
    pub fn metrics(mut self, addr: impl Into<MetricsAddr>) -> Self {
        let addr = addr.into();
        match &mut self.metrics {
            Some((_, at)) => *at = Some(addr),
            None => self.metrics = Some((Metrics::new(), Some(addr))),
        }
        self
    }

    /// Registers the scheduler's metrics ([`crate::metrics`]) in the application's own
    /// Prometheus registry, under the `shardjob_` prefix, for the application to serve with
    /// its own. May be combined with [`SchedulerBuilder::metrics`] (both show the same
    /// figures). One scheduler per registry (see [`Metrics::register`]).
    pub fn metrics_registry(
        mut self,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Self {
        let metrics = match &self.metrics {
            Some((m, _)) => m.clone(),
            None => {
                let m = Metrics::new();
                self.metrics = Some((m.clone(), None));
                m
            }
        };
        metrics.register(registry);
        self
    }

    /// Records the job history (ElasticJob's event trace tables) in the database at `url`:
    /// `sqlite://path`, `postgres://user:pass@host:port/db` or `mysql://…` (see
    /// [`crate::history`]). A URL that cannot be used makes [`SchedulerBuilder::build`] fail;
    /// a database that is down does not (the history waits for it, within its queue's bound).
    /// [`SchedulerHandle::shutdown`] and [`SchedulerHandle::shutdown_now`] write what is queued
    /// (10 s at most by default) before they return.
    #[cfg(feature = "history")]
    pub fn tracing(mut self, url: &str) -> Self {
        self.tracing = Some(
            crate::history::DatabaseUrl::parse(url)
                .map(crate::history::TracingConfig::new)
                .map_err(|e| e.to_string()),
        );
        self
    }

    /// Records the job history with all its settings (queue bound, retention, jobs).
    #[cfg(feature = "history")]
    pub fn tracing_config(mut self, config: crate::history::TracingConfig) -> Self {
        self.tracing = Some(Ok(config));
        self
    }

    /// Validates the jobs, makes their listeners, opens the registry watch and starts the
    /// driver task. Must be called within a tokio runtime.
    pub async fn build(self) -> Result<SchedulerHandle, RuntimeError> {
        let registry = self.registry.ok_or(RuntimeError::NoRegistry)?;
        let instance_id = match self.instance_id {
            Some(id) => id,
            None => default_instance_id()?,
        };
        let mut opts = MachineOptions::new(instance_id.clone());
        // A registry that limits the operations of a transaction (etcd's --max-txn-ops) gets
        // transactions split to fit; a limit set in the options wins.
        if let Some(max_ops) = registry.max_txn_ops() {
            opts.fit_txn_ops(max_ops);
        }
        // A registry that stamps its writes with its clock lets the machine measure this
        // host's clock against it (`maxTimeDiffSeconds`, and the hold beside ElasticJob).
        opts.registry_clock = registry.stamps_time();
        // Runs claimed ahead are set up before their fire, so that a thousand jobs firing at
        // once each cost the driver little more than a signal when the fire comes.
        opts.prepare_ahead = true;
        for f in self.configure {
            f(&mut opts);
        }
        opts.instance_id = instance_id.clone();
        let shutdown_grace = opts.shutdown_grace;
        let clock = driver::Clock::new();
        let mut machine = Machine::new(opts);
        for strategy in self.strategies {
            machine.add_strategy(strategy)?;
        }
        let mut given: BTreeMap<String, Vec<Arc<dyn JobListener>>> = BTreeMap::new();
        for (job, listener) in self.listeners {
            given.entry(job).or_default().push(listener);
        }
        let factories = Arc::new(self.listener_types);
        let mut jobs = Vec::new();
        for (config, job) in self.jobs {
            let mine = given.remove(&config.job_name).unwrap_or_default();
            let listeners = listeners::resolve(&config, mine, &factories)?;
            crate::notify::Settings::from_config(&config)
                .map_err(|e| RuntimeError::Notify(e.to_string()))?;
            let spec = shardjob_core::machine::JobSpec {
                config: config.clone(),
                job_type: job.job_type(),
            };
            machine.add_job(spec, clock.now())?;
            jobs.push((config, job, listeners));
        }
        // Listeners left over were given for jobs this builder does not have.
        if let Some(job) = given.into_keys().next() {
            return Err(ListenerSetupError::UnknownJob(job).into());
        }
        // Bound before anything starts, so that a port taken fails the build.
        let mirror = self.dump.map(|_| mirror::Mirror::default());
        let dump = match (self.dump, &mirror) {
            (Some((addr, limits)), Some(mirror)) => {
                let server =
                    dump::DumpServer::bind(addr, limits, Arc::clone(&registry), mirror.clone())
                        .await
                        .and_then(|s| s.local_addr().map(|a| (s, a)))
                        .map_err(|e| RuntimeError::Dump {
                            addr: addr.0,
                            error: e.to_string(),
                        })?;
                Some(server)
            }
            _ => None,
        };
        let metrics = match self.metrics {
            None => None,
            Some((metrics, None)) => Some((metrics, None)),
            Some((metrics, Some(addr))) => {
                let server = crate::metrics::MetricsServer::bind(addr, &metrics)
                    .await
                    .and_then(|s| s.local_addr().map(|a| (s, a)))
                    .map_err(|e| RuntimeError::Metrics {
                        addr: addr.0,
                        error: e.to_string(),
                    })?;
                Some((metrics, Some(server)))
            }
        };
        let stream = registry
            .watch(&NodePath::root())
            .await
            .map_err(RuntimeError::Watch)?;
        let (ops_tx, ops_rx) = mpsc::unbounded_channel();
        let (state_tx, state_rx) = watch::channel(SchedulerState::Running);
        // The metrics and the history hear every event, in line, from the driver's first:
        // they are the events' sinks, not subscribers that could fall behind.
        let mut sinks: Vec<Arc<dyn events::RunEventSink>> = Vec::new();
        if let Some((m, _)) = &metrics {
            sinks.push(m.sink());
        }
        #[cfg(feature = "history")]
        let history = match self.tracing {
            None => None,
            Some(config) => {
                let config = config.map_err(RuntimeError::Tracing)?;
                let writer = crate::history::start(&config).map_err(RuntimeError::Tracing)?;
                let feed = crate::history::Feed::start(writer, config.jobs, config.flush_deadline);
                sinks.push(feed.sink());
                Some(feed)
            }
        };
        let events_tx = events::EventOut::new(self.events, sinks);
        #[cfg(feature = "history")]
        if let (Some((m, _)), Some(feed)) = (&metrics, &history) {
            m.set_history(feed.history().clone());
        }
        let status_registry = Arc::clone(&registry);
        let notifiers = crate::notify::NotifierTasks::default();
        let driver = driver::Driver::new(driver::Parts {
            machine,
            registry,
            clock,
            instance: instance_id.clone(),
            jobs,
            factories,
            stream,
            ops: ops_rx,
            state: state_tx,
            events: events_tx.clone(),
            notifiers: notifiers.clone(),
            cancel_timeout: self.cancel_timeout,
            shutdown_grace,
            registry_name: self.registry_name,
            mirror,
            metrics: metrics.as_ref().map(|(m, _)| m.probe()),
        });
        let dump_addr = dump.as_ref().map(|(_, addr)| *addr);
        if let Some((server, addr)) = dump {
            tracing::info!(instance = %instance_id, %addr, "dump port open: send dump@JOB_NAME");
            tokio::spawn(server.run(state_rx.clone()));
        }
        let mut metrics_addr = None;
        if let Some((_, Some((server, addr)))) = metrics {
            tracing::info!(instance = %instance_id, %addr, "metrics endpoint open: GET http://{addr}/metrics");
            metrics_addr = Some(addr);
            tokio::spawn(server.run(state_rx.clone()));
        }
        tokio::spawn(driver.run());
        Ok(SchedulerHandle {
            inner: Arc::new(Inner {
                ops: ops_tx,
                state: state_rx,
                events: events_tx,
                instance_id,
                registry: status_registry,
                dump_addr,
                notifiers,
                metrics_addr,
                #[cfg(feature = "history")]
                history,
            }),
        })
    }
}

/// Operator commands from handles to the driver.
pub(crate) enum Op {
    Trigger {
        job: String,
        parameter: Option<String>,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    AddJob {
        config: Box<JobConfig>,
        job: Arc<dyn Job>,
        listeners: Vec<Arc<dyn JobListener>>,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    RemoveJob {
        job: String,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    Shutdown,
    ShutdownNow,
}

struct Inner {
    ops: mpsc::UnboundedSender<Op>,
    state: watch::Receiver<SchedulerState>,
    events: events::EventOut,
    instance_id: InstanceId,
    /// The scheduler's registry client, for reads a status page makes.
    registry: Arc<dyn Registry>,
    /// Where the dump port listens, if it is on.
    dump_addr: Option<std::net::SocketAddr>,
    /// The jobs' notifier tasks, waited for at shutdown (their last folded messages).
    notifiers: crate::notify::NotifierTasks,
    /// Where the metrics endpoint listens, if it is on.
    metrics_addr: Option<std::net::SocketAddr>,
    /// The job history's feeder and writer, when tracing is on.
    #[cfg(feature = "history")]
    history: Option<crate::history::Feed>,
}

/// A running scheduler. Cheap to clone; when every clone is dropped the scheduler shuts down
/// gracefully in the background.
#[derive(Clone)]
pub struct SchedulerHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerHandle")
            .field("instance_id", &self.inner.instance_id)
            .field("state", &*self.inner.state.borrow())
            .finish()
    }
}

impl SchedulerHandle {
    /// This instance's id.
    pub fn instance_id(&self) -> &InstanceId {
        &self.inner.instance_id
    }

    /// Where the dump port listens ([`SchedulerBuilder::dump`]), if it is on: the address
    /// bound, with the port taken when port 0 was asked for.
    pub fn dump_addr(&self) -> Option<std::net::SocketAddr> {
        self.inner.dump_addr
    }

    /// Where the metrics endpoint listens ([`SchedulerBuilder::metrics`]), if it is on: the
    /// address bound, with the port taken when port 0 was asked for.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.inner.metrics_addr
    }

    /// Where the scheduler is in its life.
    pub fn state(&self) -> SchedulerState {
        self.inner.state.borrow().clone()
    }

    /// The items of `job` that the registry's sharding plan gives this instance (the job's
    /// `sharding/{item}/instance` nodes that hold its id), ascending: what a status page
    /// shows. Read from the registry at each call (one read of the job's `sharding` subtree),
    /// so it may be a moment behind a plan the leader is writing; a failover run of another
    /// instance's item is not in it. Empty while the job has no plan yet, and for a job that
    /// is not in the registry.
    pub async fn owned_items(&self, job: &str) -> Result<Vec<u32>, RegistryError> {
        use shardjob_core::layout::{ItemLeaf, JobNode, JobPaths};
        let paths = JobPaths::new(job)?;
        let nodes = self.inner.registry.get_tree(&paths.sharding()).await?;
        let mine = self.inner.instance_id.as_str();
        let mut items: Vec<u32> = nodes
            .iter()
            .filter_map(|node| match JobNode::parse(&node.path)? {
                (name, JobNode::ItemState(item, ItemLeaf::Instance))
                    if name == job && node.text() == Some(mine) =>
                {
                    Some(item)
                }
                _ => None,
            })
            .collect();
        items.sort_unstable();
        items.dedup();
        Ok(items)
    }

    /// Events from now on: items started and finished, and what the state machine reports. A
    /// subscriber that falls more than [`EVENT_CAPACITY`] events behind misses some.
    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.inner.events.subscribe()
    }

    /// Runs this instance's items of `job` once now; with a parameter, it replaces
    /// `jobParameter` for that run. Queued while the items run.
    pub async fn trigger(&self, job: &str, parameter: Option<String>) -> Result<(), RuntimeError> {
        let (reply, rx) = oneshot::channel();
        self.send(Op::Trigger {
            job: job.to_owned(),
            parameter,
            reply,
        })?;
        rx.await.map_err(|_| self.gone())?
    }

    /// Starts hosting a job at run time. Its `jobListenerTypes` are made by the listener
    /// types registered on the builder.
    pub async fn add_job(&self, config: JobConfig, job: impl Job) -> Result<(), RuntimeError> {
        self.add_job_with_listeners(config, job, Vec::new()).await
    }

    /// Starts hosting a job at run time, with listeners besides those of its
    /// `jobListenerTypes`.
    pub async fn add_job_with_listeners(
        &self,
        config: JobConfig,
        job: impl Job,
        listeners: Vec<Arc<dyn JobListener>>,
    ) -> Result<(), RuntimeError> {
        crate::notify::Settings::from_config(&config)
            .map_err(|e| RuntimeError::Notify(e.to_string()))?;
        let (reply, rx) = oneshot::channel();
        self.send(Op::AddJob {
            config: Box::new(config),
            job: Arc::new(job),
            listeners,
            reply,
        })?;
        rx.await.map_err(|_| self.gone())?
    }

    /// Stops hosting a job: its running items finish (or are cancelled after the shutdown
    /// grace), then the instance leaves the job's nodes, so that the other instances take its
    /// items over at once. Returns when the instance has left the job; it can be added again
    /// then, with a new configuration if need be. (Adding it while it leaves fails with
    /// [`MachineError::JobLeaving`].) While the registry cannot be reached it waits for the
    /// session to come back or to be found expired: leaving earlier would leave the instance's
    /// nodes holding the job's items. A graceful shutdown meanwhile ends it with `Ok`.
    pub async fn remove_job(&self, job: &str) -> Result<(), RuntimeError> {
        let (reply, rx) = oneshot::channel();
        self.send(Op::RemoveJob {
            job: job.to_owned(),
            reply,
        })?;
        rx.await.map_err(|_| self.gone())?
    }

    /// Leaves gracefully: no new items start, running ones finish (or are cancelled after
    /// the shutdown grace), the instance's nodes are deleted so the others take over at once,
    /// and the session is closed. Returns when that is done.
    pub async fn shutdown(&self) -> Result<(), RuntimeError> {
        // A driver that is gone already has stopped one way or the other: `wait` says how.
        let _ = self.inner.ops.send(Op::Shutdown);
        let result = self.wait().await;
        self.finish_history().await;
        self.inner.notifiers.finish().await;
        result
    }

    /// Leaves at once, as on a second SIGTERM: running items are cancelled (a script is
    /// killed with its process group), waited for at most the cancel timeout, then dropped;
    /// the session is closed without recording their end, so their fires are failed over (if
    /// the job fails over) rather than counted as done. Returns when that is done. Use
    /// [`SchedulerHandle::shutdown`] to let running items finish.
    pub async fn shutdown_now(&self) -> Result<(), RuntimeError> {
        let _ = self.inner.ops.send(Op::ShutdownNow);
        let result = self.wait().await;
        self.finish_history().await;
        self.inner.notifiers.finish().await;
        result
    }

    /// The job history, when tracing is on: its figures ([`crate::history::History::stats`])
    /// and its database ([`crate::history::History::store`]).
    #[cfg(feature = "history")]
    pub fn history(&self) -> Option<&crate::history::History> {
        self.inner.history.as_ref().map(|feed| feed.history())
    }

    /// After the driver stopped: the history takes the last events and writes its queue
    /// within its flush deadline.
    async fn finish_history(&self) {
        #[cfg(feature = "history")]
        if let Some(feed) = &self.inner.history {
            feed.finish().await;
        }
    }

    /// Waits until the scheduler has stopped: `Ok` after a graceful shutdown, an error if it
    /// failed.
    pub async fn wait(&self) -> Result<(), RuntimeError> {
        let mut rx = self.inner.state.clone();
        loop {
            match &*rx.borrow_and_update() {
                SchedulerState::Running => {}
                SchedulerState::Stopped => return Ok(()),
                SchedulerState::Failed(why) => return Err(RuntimeError::Failed(why.clone())),
            }
            if rx.changed().await.is_err() {
                return Err(RuntimeError::Failed(
                    "the driver task ended without saying why".to_owned(),
                ));
            }
        }
    }

    fn send(&self, op: Op) -> Result<(), RuntimeError> {
        self.inner.ops.send(op).map_err(|_| self.gone())
    }

    fn gone(&self) -> RuntimeError {
        match self.state() {
            SchedulerState::Failed(why) => RuntimeError::Failed(why),
            _ => RuntimeError::Stopped,
        }
    }
}
