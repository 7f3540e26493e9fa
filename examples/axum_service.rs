//! An axum service that embeds a shardjob scheduler over a real registry, with a status and a
//! trigger endpoint:
//!
//! - `GET /status`: this instance's id and state, its jobs, and the items of each that the
//!   sharding plan gives this instance (`SchedulerHandle::owned_items`);
//! - `POST /jobs/{name}/trigger[?parameter=...]`: runs this instance's items of the job once
//!   now (the parameter replaces `jobParameter` for that run).
//!
//! The registry is chosen by URL in `SHARDJOB_REGISTRY` (see `shardjob::registry_url`):
//!
//! ```text
//! SHARDJOB_REGISTRY=zk://127.0.0.1:2181/my-service cargo run --example axum_service --features zk
//! SHARDJOB_REGISTRY=etcd://127.0.0.1:2379/my-service cargo run --example axum_service --features etcd
//! curl -s localhost:3000/status
//! curl -s -X POST 'localhost:3000/jobs/send-reports/trigger?parameter=eu-only'
//! ```
//!
//! Without `SHARDJOB_REGISTRY` it runs over `mem://`, the in-process store, and says so: two
//! copies of the service would then not share the job's items, each would run them all.
//! `SHARDJOB_LISTEN` sets the address (default `127.0.0.1:3000`). Ctrl-C stops the HTTP server,
//! then the scheduler leaves gracefully (running items finish, the others take over).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use shardjob::core::machine::MachineError;
use shardjob::core::{CronExpr, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::registry_url::RegistryUrl;
use shardjob::runtime::{RuntimeError, Scheduler, SchedulerHandle, SchedulerState};

/// The job this service runs.
pub const JOB: &str = "send-reports";
/// Its schedule: every five minutes.
pub const CRON: &str = "0 0/5 * * * ?";
/// Its items: one region each.
pub const REGIONS: [&str; 4] = ["eu", "us", "apac", "latam"];
/// The session timeout unless the URL gives one (`?session_timeout_ms=N`).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends the reports of one region per item, and remembers what it ran for the status page.
#[derive(Default)]
pub struct SendReports {
    runs: Mutex<Vec<RunSeen>>,
}

/// One run of an item, as the status page shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunSeen {
    /// The item.
    pub item: u32,
    /// Its region.
    pub region: String,
    /// The job parameter of the run (a trigger's parameter).
    pub parameter: String,
    /// Why it ran: SCHEDULED, MISFIRE, FAILOVER or TRIGGER.
    pub kind: String,
    /// The fire time (RFC 3339).
    pub fire_time: String,
}

#[async_trait::async_trait]
impl SimpleJob for SendReports {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        let region = ctx.sharding_parameter.clone().unwrap_or_default();
        // The real work goes here; long work should watch `ctx.cancel`.
        let run = RunSeen {
            item: ctx.sharding_item,
            region,
            parameter: ctx.job_parameter.clone(),
            kind: ctx.kind.as_str().to_owned(),
            fire_time: ctx.fire_time.to_rfc3339(),
        };
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        runs.push(run);
        // Keep the last few for the status page.
        let excess = runs.len().saturating_sub(20);
        runs.drain(..excess);
        Ok(())
    }
}

/// What the handlers share: the scheduler's handle and the jobs it was given.
pub struct Service {
    /// The running scheduler.
    pub handle: SchedulerHandle,
    /// The registry URL it runs over.
    pub registry: String,
    jobs: Vec<JobConfig>,
    reports: Arc<SendReports>,
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The registry URL is wrong, or the registry cannot be reached.
    #[error("registry {url}: {source}")]
    Registry {
        /// The URL.
        url: String,
        /// What went wrong.
        source: shardjob::registry_url::RegistryUrlError,
    },
    /// A built-in value was refused (a bug of this example).
    #[error("job setup: {0}")]
    Setup(String),
    /// The scheduler could not be started.
    #[error("scheduler: {0}")]
    Scheduler(#[from] RuntimeError),
}

/// Connects to the registry at `url` and starts the scheduler with the service's job.
pub async fn start(url: &str) -> Result<Arc<Service>, StartError> {
    let registry_error = |source| StartError::Registry {
        url: url.to_owned(),
        source,
    };
    let registry = RegistryUrl::parse(url)
        .map_err(registry_error)?
        .connect(SESSION_TIMEOUT)
        .await
        .map_err(registry_error)?;
    let cron = CronExpr::parse(CRON).map_err(|e| StartError::Setup(e.to_string()))?;
    let mut config = JobConfig::new(JOB, REGIONS.len() as u32).with_cron(cron);
    config.sharding_item_parameters = (0..)
        .zip(REGIONS)
        .map(|(item, region)| (item, region.to_owned()))
        .collect();
    config.failover = true;
    let reports = Arc::new(SendReports::default());
    let handle = Scheduler::builder()
        .registry(registry)
        .job_arc(config.clone(), Arc::clone(&reports) as _)
        .build()
        .await?;
    Ok(Arc::new(Service {
        handle,
        registry: url.to_owned(),
        jobs: vec![config],
        reports,
    }))
}

/// The service's routes.
pub fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/jobs/{name}/trigger", post(trigger))
        .with_state(service)
}

/// `GET /status`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    /// This instance's id (`ip@-@pid` by default).
    pub instance: String,
    /// `running`, `stopped` or `failed: why`.
    pub state: String,
    /// The registry URL.
    pub registry: String,
    /// The jobs this instance hosts.
    pub jobs: Vec<JobStatus>,
    /// The last runs on this instance.
    pub recent_runs: Vec<RunSeen>,
}

/// One job in [`Status`].
#[derive(Debug, Serialize, Deserialize)]
pub struct JobStatus {
    /// Its name.
    pub name: String,
    /// Its cron expression.
    pub cron: Option<String>,
    /// shardingTotalCount.
    pub items: u32,
    /// The items the sharding plan gives this instance now.
    pub owned_items: Vec<u32>,
    /// Why they could not be read, if they could not.
    pub error: Option<String>,
}

async fn status(State(service): State<Arc<Service>>) -> Json<Status> {
    let mut jobs = Vec::new();
    for config in &service.jobs {
        let (owned_items, error) = match service.handle.owned_items(&config.job_name).await {
            Ok(items) => (items, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        jobs.push(JobStatus {
            name: config.job_name.clone(),
            cron: config.cron.as_ref().map(ToString::to_string),
            items: config.sharding_total_count,
            owned_items,
            error,
        });
    }
    let state = match service.handle.state() {
        SchedulerState::Running => "running".to_owned(),
        SchedulerState::Stopped => "stopped".to_owned(),
        SchedulerState::Failed(why) => format!("failed: {why}"),
    };
    let recent_runs = service
        .reports
        .runs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Json(Status {
        instance: service.handle.instance_id().to_string(),
        state,
        registry: service.registry.clone(),
        jobs,
        recent_runs,
    })
}

/// The query of `POST /jobs/{name}/trigger`.
#[derive(Debug, Deserialize)]
pub struct TriggerQuery {
    /// Replaces `jobParameter` for this run.
    pub parameter: Option<String>,
}

async fn trigger(
    State(service): State<Arc<Service>>,
    Path(name): Path<String>,
    Query(query): Query<TriggerQuery>,
) -> (StatusCode, Json<BTreeMap<&'static str, String>>) {
    let answer = |status, key, text: String| (status, Json(BTreeMap::from([(key, text)])));
    match service.handle.trigger(&name, query.parameter).await {
        Ok(()) => answer(
            StatusCode::ACCEPTED,
            "triggered",
            format!("{name}: this instance's items run once now"),
        ),
        Err(RuntimeError::Machine(MachineError::UnknownJob(_))) => answer(
            StatusCode::NOT_FOUND,
            "error",
            format!("no job {name:?} on this instance"),
        ),
        Err(e @ (RuntimeError::Stopped | RuntimeError::Failed(_))) => {
            answer(StatusCode::SERVICE_UNAVAILABLE, "error", e.to_string())
        }
        Err(e) => answer(StatusCode::CONFLICT, "error", e.to_string()),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let url = match std::env::var("SHARDJOB_REGISTRY") {
        Ok(url) => url,
        Err(_) => {
            eprintln!(
                "axum_service: NOTE: SHARDJOB_REGISTRY is not set, so this runs over mem://, \
                 the in-process registry. Another copy of this service would NOT share the \
                 job's items with this one: each would run every item. Set \
                 SHARDJOB_REGISTRY=zk://host:port/namespace or etcd://host:port/namespace \
                 (and build with --features zk or etcd) to share them."
            );
            "mem://".to_owned()
        }
    };
    let listen = std::env::var("SHARDJOB_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let addr: SocketAddr = match listen.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("axum_service: SHARDJOB_LISTEN={listen:?} is not host:port: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let service = match start(&url).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("axum_service: cannot start: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("axum_service: cannot listen on {addr}: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    eprintln!(
        "axum_service: instance {} on {url}; http://{addr}/status, POST http://{addr}/jobs/{JOB}/trigger",
        service.handle.instance_id()
    );
    let served = axum::serve(listener, router(Arc::clone(&service)))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    if let Err(e) = served {
        eprintln!("axum_service: the HTTP server failed: {e}");
    }
    // Leave the cluster: running items finish, the other instances take the items over.
    match service.handle.shutdown().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("axum_service: the scheduler did not leave cleanly: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
