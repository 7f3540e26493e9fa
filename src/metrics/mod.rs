//! Prometheus metrics of a scheduler, through [`prometheus_client`].
//!
//! Turned on by [`SchedulerBuilder::metrics`](crate::runtime::SchedulerBuilder::metrics) (an
//! HTTP endpoint, `GET /metrics`, in the OpenMetrics text format; `shardjob run --metrics
//! 127.0.0.1:9464`) or by
//! [`SchedulerBuilder::metrics_registry`](crate::runtime::SchedulerBuilder::metrics_registry)
//! (the families are registered in the application's own [`Registry`], under the `shardjob`
//! prefix, and the application serves them). The names, as scraped:
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `shardjob_job_fires_total` | counter | `job` | executions started here for a cron fire on time |
//! | `shardjob_job_misfires_total` | counter | `job` | executions started here as a misfire (late fires) |
//! | `shardjob_job_failovers_total` | counter | `job` | executions started here to take over another instance's fire |
//! | `shardjob_job_triggers_total` | counter | `job` | executions started here for a manual trigger |
//! | `shardjob_job_item_runs_total` | counter | `job`, `kind`, `outcome` | item runs that ended; `kind`: `scheduled`, `misfire`, `failover`, `trigger`; `outcome`: `succeeded`, `failed`, `cancelled` |
//! | `shardjob_job_lateness_seconds` | histogram | `job` | start of an item's body minus its fire time, for runs of a fire on time |
//! | `shardjob_job_run_duration_seconds` | histogram | `job` | how long an item's body ran (every item run that ended) |
//! | `shardjob_job_reshards_total` | counter | `job` | sharding plans this instance wrote as the job's leader |
//! | `shardjob_job_items_owned` | gauge | `job` | items the sharding plan gives this instance |
//! | `shardjob_job_leader` | gauge | `job` | 1 while this instance is the job's leader, as far as it knows |
//! | `shardjob_registry_requests_total` | counter | `operation`, `outcome` | the driver's registry requests; `operation`: `get`, `children`, `get_tree`, `transact`; `outcome`: `ok`, `transient`, `conflict`, `lost_session`, `fatal` |
//! | `shardjob_registry_request_duration_seconds` | histogram | `operation` | their latency |
//! | `shardjob_registry_txn_splits_total` | counter | | transactions the registry refused as too large (then split) |
//! | `shardjob_session_state` | gauge | `state` | 1 for the session's state: `connected`, `suspended`, `expired`, `closed` |
//! | `shardjob_session_reconnects_total` | counter | `session` | connections back: `kept` (the session survived), `new` (after an expiry) |
//! | `shardjob_session_losses_total` | counter | | sessions lost (the instance registered again) |
//! | `shardjob_history_queue_depth` | gauge | | job history events waiting to be written (tracing on) |
//! | `shardjob_history_dropped_total` | counter | | job history events dropped (tracing on) |
//! | `shardjob_history_written_total` | counter | | job history events written (tracing on) |
//!
//! Recording never holds up a job: the job figures are counted in line as the scheduler's
//! [`RunEvent`]s are sent (a sink of the scheduler's events, so none is missed however busy
//! the runtime is), and what the driver records itself (registry requests, session, items
//! owned, leadership) is likewise an atomic add or a short lock, never held across an await.

mod serve;

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use shardjob_core::machine::record::RunKind;
use shardjob_core::machine::{ItemOutcome, MachineEvent};
use shardjob_core::registry::{ErrorClass, RegistryOp, RegistryReply, SessionEvent};

use crate::runtime::RunEvent;
use crate::runtime::events::RunEventSink;

pub(crate) use serve::MetricsServer;

/// The port Prometheus' exporters conventionally leave to applications like this one.
pub const DEFAULT_PORT: u16 = 9464;

/// The most executions remembered to count each once (the oldest are forgotten first): an
/// execution whose items start more than this many other executions apart is counted again.
const MAX_SEEN_EXECUTIONS: usize = 10_000;

/// Where the metrics endpoint listens: `127.0.0.1` unless an address says otherwise (the
/// figures name jobs, and the endpoint has no authentication).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsAddr(pub SocketAddr);

impl From<u16> for MetricsAddr {
    fn from(port: u16) -> Self {
        MetricsAddr(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
    }
}

impl From<SocketAddr> for MetricsAddr {
    fn from(addr: SocketAddr) -> Self {
        MetricsAddr(addr)
    }
}

/// A metrics address that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a metrics address: give HOST:PORT (say 127.0.0.1:9464, or 0.0.0.0:9464 to be scraped from other hosts) or a port alone (bound on 127.0.0.1)"
)]
pub struct BadMetricsAddr(pub String);

impl std::str::FromStr for MetricsAddr {
    type Err = BadMetricsAddr;

    /// `HOST:PORT` (an IP address; `[::1]:9464` for IPv6) or a port alone, bound on
    /// `127.0.0.1`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Ok(port) = t.parse::<u16>() {
            return Ok(port.into());
        }
        t.parse::<SocketAddr>()
            .map(MetricsAddr)
            .map_err(|_| BadMetricsAddr(s.to_owned()))
    }
}

impl std::fmt::Display for MetricsAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// `job` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabel {
    job: String,
}

/// `job`, `kind`, `outcome` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    job: String,
    kind: &'static str,
    outcome: &'static str,
}

/// `operation`, `outcome` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: &'static str,
    outcome: &'static str,
}

/// `operation` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

/// `state` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

/// `session` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionLabel {
    session: &'static str,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

fn lateness_histogram() -> Histogram {
    // 1 ms to 10 s: a scheduler on time starts within milliseconds.
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 2 h.
    Histogram::new([
        0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
        7200.0,
    ])
}

fn request_histogram() -> Histogram {
    // 100 µs to 10 s.
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0, 10.0,
    ])
}

/// The session states, in [`Families::session_state`]'s label order.
const SESSION_STATES: [&str; 4] = ["connected", "suspended", "expired", "closed"];

/// The registry operations, as labelled.
const OPERATIONS: [&str; 4] = ["get", "children", "get_tree", "transact"];

/// The outcomes of a registry request, as labelled.
const REQUEST_OUTCOMES: [&str; 5] = ["ok", "transient", "conflict", "lost_session", "fatal"];

#[derive(Debug)]
struct Families {
    fires: Family<JobLabel, Counter>,
    misfires: Family<JobLabel, Counter>,
    failovers: Family<JobLabel, Counter>,
    triggers: Family<JobLabel, Counter>,
    item_runs: Family<RunLabels, Counter>,
    lateness: HistogramFamily<JobLabel>,
    duration: HistogramFamily<JobLabel>,
    reshards: Family<JobLabel, Counter>,
    owned: Family<JobLabel, Gauge>,
    leader: Family<JobLabel, Gauge>,
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily<OperationLabel>,
    txn_splits: Counter,
    session_state: Family<StateLabel, Gauge>,
    reconnects: Family<SessionLabel, Counter>,
    session_losses: Counter,
    #[cfg(feature = "history")]
    history: std::sync::OnceLock<crate::history::History>,
}

/// A scheduler's metrics: what [`SchedulerBuilder::metrics_registry`] registers in an
/// application's registry. Cheap to clone (the clones share the figures).
///
/// [`SchedulerBuilder::metrics_registry`]: crate::runtime::SchedulerBuilder::metrics_registry
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Families>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Empty figures, registered nowhere yet.
    pub fn new() -> Metrics {
        let session_state = Family::<StateLabel, Gauge>::default();
        for state in SESSION_STATES {
            session_state.get_or_create(&StateLabel { state }).set(0);
        }
        // Shown at 0 from the start, so that a rate over them has a beginning.
        let reconnects = Family::<SessionLabel, Counter>::default();
        for session in ["kept", "new"] {
            reconnects
                .get_or_create(&SessionLabel { session })
                .inc_by(0);
        }
        Metrics {
            inner: Arc::new(Families {
                fires: Family::default(),
                misfires: Family::default(),
                failovers: Family::default(),
                triggers: Family::default(),
                item_runs: Family::default(),
                lateness: Family::new_with_constructor(lateness_histogram),
                duration: Family::new_with_constructor(duration_histogram),
                reshards: Family::default(),
                owned: Family::default(),
                leader: Family::default(),
                requests: Family::default(),
                latency: Family::new_with_constructor(request_histogram),
                txn_splits: Counter::default(),
                session_state,
                reconnects,
                session_losses: Counter::default(),
                #[cfg(feature = "history")]
                history: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Registers every family in `registry` under the `shardjob` prefix (`shardjob_job_…`,
    /// `shardjob_registry_…`, ...). One scheduler per registry: a second would register the
    /// same names again (give each its own
    /// [`sub_registry_with_label`](Registry::sub_registry_with_label), say by instance).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("shardjob");
        let m = &self.inner;
        r.register(
            "job_fires",
            "Executions started on this instance for a cron fire on time",
            m.fires.clone(),
        );
        r.register(
            "job_misfires",
            "Executions started on this instance as a misfire (fires run late)",
            m.misfires.clone(),
        );
        r.register(
            "job_failovers",
            "Executions started on this instance to take over a fire of a lost instance",
            m.failovers.clone(),
        );
        r.register(
            "job_triggers",
            "Executions started on this instance for a manual trigger",
            m.triggers.clone(),
        );
        r.register(
            "job_item_runs",
            "Item runs that ended, by kind and outcome",
            m.item_runs.clone(),
        );
        r.register_with_unit(
            "job_lateness",
            "Start of an item's body minus its fire time, for runs of fires on time",
            Unit::Seconds,
            m.lateness.clone(),
        );
        r.register_with_unit(
            "job_run_duration",
            "How long an item's body ran",
            Unit::Seconds,
            m.duration.clone(),
        );
        r.register(
            "job_reshards",
            "Sharding plans this instance wrote as the job's leader",
            m.reshards.clone(),
        );
        r.register(
            "job_items_owned",
            "Items the sharding plan gives this instance",
            m.owned.clone(),
        );
        r.register(
            "job_leader",
            "1 while this instance is the job's leader",
            m.leader.clone(),
        );
        r.register(
            "registry_requests",
            "Registry requests of the scheduler, by operation and outcome",
            m.requests.clone(),
        );
        r.register_with_unit(
            "registry_request_duration",
            "Latency of the scheduler's registry requests",
            Unit::Seconds,
            m.latency.clone(),
        );
        r.register(
            "registry_txn_splits",
            "Transactions the registry refused as too large, then split",
            m.txn_splits.clone(),
        );
        r.register(
            "session_state",
            "1 for the registry session's current state",
            m.session_state.clone(),
        );
        r.register(
            "session_reconnects",
            "Connections to the registry back: the session kept, or a new one after an expiry",
            m.reconnects.clone(),
        );
        r.register(
            "session_losses",
            "Registry sessions lost (the instance registered again)",
            m.session_losses.clone(),
        );
        #[cfg(feature = "history")]
        r.register_collector(Box::new(HistoryCollector(Arc::clone(&self.inner))));
    }

    /// The history whose queue the metrics show (set once, by the build).
    #[cfg(feature = "history")]
    pub(crate) fn set_history(&self, history: crate::history::History) {
        let _ = self.inner.history.set(history);
    }

    /// What counts the scheduler's events (handed to them before the driver starts).
    pub(crate) fn sink(&self) -> Arc<dyn RunEventSink> {
        Arc::new(Sink(std::sync::Mutex::new(Recorder::new(self.clone()))))
    }

    /// What the driver records itself.
    pub(crate) fn probe(&self) -> DriverProbe {
        DriverProbe::new(self.clone())
    }
}

/// The job history's figures, read at each scrape.
#[cfg(feature = "history")]
#[derive(Debug)]
struct HistoryCollector(Arc<Families>);

#[cfg(feature = "history")]
impl prometheus_client::collector::Collector for HistoryCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let Some(history) = self.0.history.get() else {
            return Ok(());
        };
        let stats = history.stats();
        let depth = ConstGauge::new(i64::try_from(stats.queued).unwrap_or(i64::MAX));
        depth.encode(encoder.encode_descriptor(
            "history_queue_depth",
            "Job history events waiting to be written",
            None,
            depth.metric_type(),
        )?)?;
        let dropped = ConstCounter::new(stats.dropped);
        dropped.encode(encoder.encode_descriptor(
            "history_dropped",
            "Job history events dropped (queue bound exceeded, or missed)",
            None,
            dropped.metric_type(),
        )?)?;
        let written = ConstCounter::new(stats.written);
        written.encode(encoder.encode_descriptor(
            "history_written",
            "Job history events written",
            None,
            written.metric_type(),
        )?)?;
        Ok(())
    }
}

/// The metrics' sink of the scheduler's events.
struct Sink(std::sync::Mutex<Recorder>);

impl RunEventSink for Sink {
    fn event(&self, event: &RunEvent) {
        // A panic elsewhere while the lock was held leaves the recorder between two events:
        // go on with it.
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .event(event);
    }
}

fn kind_label(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Scheduled => "scheduled",
        RunKind::Misfire => "misfire",
        RunKind::Failover => "failover",
        RunKind::Trigger => "trigger",
    }
}

fn outcome_label(outcome: &ItemOutcome) -> &'static str {
    match outcome {
        ItemOutcome::Succeeded => "succeeded",
        ItemOutcome::Failed(_) => "failed",
        ItemOutcome::Cancelled => "cancelled",
    }
}

/// One job's handles, looked up once.
struct JobHandles {
    fires: Counter,
    misfires: Counter,
    failovers: Counter,
    triggers: Counter,
    lateness: Histogram,
    duration: Histogram,
    reshards: Counter,
    runs: HashMap<(&'static str, &'static str), Counter>,
}

/// Counts the scheduler's events (one task owns it: no lock of its own).
pub(crate) struct Recorder {
    metrics: Metrics,
    jobs: HashMap<String, JobHandles>,
    /// Executions counted already (ids only grow: the smallest go first).
    seen: BTreeSet<u64>,
}

impl Recorder {
    pub(crate) fn new(metrics: Metrics) -> Recorder {
        Recorder {
            metrics,
            jobs: HashMap::new(),
            seen: BTreeSet::new(),
        }
    }

    fn job(&mut self, job: &str) -> &mut JobHandles {
        if !self.jobs.contains_key(job) {
            let m = &self.metrics.inner;
            let label = JobLabel {
                job: job.to_owned(),
            };
            let handles = JobHandles {
                fires: m.fires.get_or_create_owned(&label),
                misfires: m.misfires.get_or_create_owned(&label),
                failovers: m.failovers.get_or_create_owned(&label),
                triggers: m.triggers.get_or_create_owned(&label),
                lateness: m.lateness.get_or_create_owned(&label),
                duration: m.duration.get_or_create_owned(&label),
                reshards: m.reshards.get_or_create_owned(&label),
                runs: HashMap::new(),
            };
            self.jobs.insert(job.to_owned(), handles);
        }
        self.jobs
            .get_mut(job)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// Counts an execution the first time one of its items is seen.
    fn execution(&mut self, job: &str, id: u64, kind: RunKind) {
        if !self.seen.insert(id) {
            return;
        }
        while self.seen.len() > MAX_SEEN_EXECUTIONS {
            self.seen.pop_first();
        }
        let h = self.job(job);
        match kind {
            RunKind::Scheduled => h.fires.inc(),
            RunKind::Misfire => h.misfires.inc(),
            RunKind::Failover => h.failovers.inc(),
            RunKind::Trigger => h.triggers.inc(),
        };
    }

    pub(crate) fn event(&mut self, event: &RunEvent) {
        match event {
            RunEvent::ItemStarted { run, at } => {
                self.execution(&run.job, run.execution.0, run.kind);
                if run.kind == RunKind::Scheduled {
                    let late = (*at - run.fire_time).to_std().unwrap_or(Duration::ZERO);
                    self.job(&run.job).lateness.observe(late.as_secs_f64());
                }
            }
            RunEvent::ItemFinished {
                run,
                outcome,
                elapsed,
                ..
            } => {
                self.execution(&run.job, run.execution.0, run.kind);
                let key = (kind_label(run.kind), outcome_label(outcome));
                let family = self.metrics.inner.item_runs.clone();
                let h = self.job(&run.job);
                h.duration.observe(elapsed.as_secs_f64());
                h.runs
                    .entry(key)
                    .or_insert_with(|| {
                        family.get_or_create_owned(&RunLabels {
                            job: run.job.clone(),
                            kind: key.0,
                            outcome: key.1,
                        })
                    })
                    .inc();
            }
            RunEvent::Machine(MachineEvent::Resharded { job, .. }) => {
                self.job(job).reshards.inc();
            }
            RunEvent::Machine(MachineEvent::TxnSplit { .. }) => {
                self.metrics.inner.txn_splits.inc();
            }
            RunEvent::Machine(MachineEvent::SessionLost) => {
                self.metrics.inner.session_losses.inc();
            }
            _ => {}
        }
    }
}

/// What the driver records itself: its registry requests, the session, the items it owns
/// and its leadership. The driver owns it; the request counters are shared with the tasks
/// that carry requests out.
pub(crate) struct DriverProbe {
    metrics: Metrics,
    requests: Arc<RequestHandles>,
    /// Per job: items owned, leader.
    jobs: HashMap<String, (Gauge, Gauge)>,
    /// Whether a session was connected before (a later `Connected` is a new session).
    connected_once: bool,
}

/// The request counters and histograms, created up front.
pub(crate) struct RequestHandles {
    counts: [[Counter; REQUEST_OUTCOMES.len()]; OPERATIONS.len()],
    latency: [Histogram; OPERATIONS.len()],
}

impl RequestHandles {
    /// Records a request of operation `op` (see [`op_index`]) that took `took`.
    pub(crate) fn record(&self, op: usize, reply: &RegistryReply, took: Duration) {
        let outcome = match reply {
            RegistryReply::Failed(e) => match e.class() {
                ErrorClass::Transient => 1,
                ErrorClass::Conflict => 2,
                ErrorClass::LostSession => 3,
                ErrorClass::Fatal => 4,
            },
            _ => 0,
        };
        if let (Some(row), Some(h)) = (self.counts.get(op), self.latency.get(op)) {
            if let Some(c) = row.get(outcome) {
                c.inc();
            }
            h.observe(took.as_secs_f64());
        }
    }
}

/// The label index of a registry operation.
pub(crate) fn op_index(op: &RegistryOp) -> usize {
    match op {
        RegistryOp::Get(_) => 0,
        RegistryOp::Children(_) => 1,
        RegistryOp::GetTree(_) => 2,
        RegistryOp::Transact(_) => 3,
    }
}

impl DriverProbe {
    fn new(metrics: Metrics) -> DriverProbe {
        let m = &metrics.inner;
        let counts = OPERATIONS.map(|operation| {
            REQUEST_OUTCOMES.map(|outcome| {
                m.requests
                    .get_or_create_owned(&RequestLabels { operation, outcome })
            })
        });
        let latency = OPERATIONS
            .map(|operation| m.latency.get_or_create_owned(&OperationLabel { operation }));
        DriverProbe {
            requests: Arc::new(RequestHandles { counts, latency }),
            metrics,
            jobs: HashMap::new(),
            connected_once: false,
        }
    }

    /// The counters a request's task records into.
    pub(crate) fn requests(&self) -> Arc<RequestHandles> {
        Arc::clone(&self.requests)
    }

    fn gauges(&mut self, job: &str) -> &(Gauge, Gauge) {
        if !self.jobs.contains_key(job) {
            let label = JobLabel {
                job: job.to_owned(),
            };
            let m = &self.metrics.inner;
            let pair = (
                m.owned.get_or_create_owned(&label),
                m.leader.get_or_create_owned(&label),
            );
            self.jobs.insert(job.to_owned(), pair);
        }
        self.jobs
            .get(job)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// The items the plan gives this instance and whether it leads the job.
    pub(crate) fn job(&mut self, job: &str, owned: usize, leader: bool) {
        let (o, l) = self.gauges(job);
        o.set(i64::try_from(owned).unwrap_or(i64::MAX));
        l.set(i64::from(leader));
    }

    /// A session event of the registry's watch.
    pub(crate) fn session(&mut self, event: &SessionEvent) {
        let state = match event {
            SessionEvent::Connected(_) => {
                if std::mem::replace(&mut self.connected_once, true) {
                    self.reconnected("new");
                }
                "connected"
            }
            SessionEvent::Reconnected(_) => {
                self.reconnected("kept");
                "connected"
            }
            SessionEvent::Suspended(_) => "suspended",
            SessionEvent::Expired(_) => "expired",
            SessionEvent::Closed => "closed",
        };
        for s in SESSION_STATES {
            self.metrics
                .inner
                .session_state
                .get_or_create(&StateLabel { state: s })
                .set(i64::from(s == state));
        }
    }

    fn reconnected(&self, session: &'static str) {
        self.metrics
            .inner
            .reconnects
            .get_or_create(&SessionLabel { session })
            .inc();
    }

    /// A machine event the gauges follow: leadership won, lost with the session, a job
    /// left.
    pub(crate) fn machine_event(&mut self, event: &MachineEvent) {
        match event {
            MachineEvent::BecameLeader { job } => {
                self.gauges(job).1.set(1);
            }
            MachineEvent::SessionLost => {
                for (_, leader) in self.jobs.values() {
                    leader.set(0);
                }
            }
            MachineEvent::JobLeft { job } => self.job(job, 0, false),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
