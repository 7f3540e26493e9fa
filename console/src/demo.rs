//! A `mem://` registry is a demo: an in-process registry on which two instances run a few
//! jobs inside the console (one fails now and then, one only runs when triggered), recording
//! their history, so every page has something to show without a cluster.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::runtime::{Scheduler, SchedulerHandle};
use shardjob_backend_mem::MemServer;
use shardjob_core::registry::Registry;
use shardjob_core::{CronExpr, InstanceId, JobConfig, JobTimeZone};
use shardjob_history::DatabaseUrl;

/// The demo's instances (their ids name two servers).
const INSTANCES: [&str; 2] = ["10.0.0.1@-@101", "10.0.0.2@-@102"];

/// What a demo job does.
#[derive(Debug, Clone, Copy)]
enum Work {
    /// Works for a while and succeeds.
    Steady(Duration),
    /// Item 2 fails every other minute, with a long cause.
    Flaky,
}

struct DemoJob(Work);

#[async_trait]
impl SimpleJob for DemoJob {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        let work = match self.0 {
            Work::Steady(d) => d,
            Work::Flaky => Duration::from_millis(300),
        };
        tokio::select! {
            () = tokio::time::sleep(work) => {}
            _ = ctx.cancel.cancelled() => return Err(JobError::Cancelled),
        }
        if matches!(self.0, Work::Flaky)
            && ctx.sharding_item == 2
            && chrono::Utc::now().timestamp() / 60 % 2 == 1
        {
            return Err(JobError::Failed(format!(
                "import of partition {} failed: upstream answered 503 Service Unavailable\n\
                 request: GET /export?partition={}&since=-1h\n\
                 retry in the next fire (parameter {:?})",
                ctx.sharding_item, ctx.sharding_item, ctx.job_parameter
            )));
        }
        Ok(())
    }

    fn job_type(&self) -> String {
        "DEMO".to_owned()
    }
}

fn configs() -> Vec<(JobConfig, Work)> {
    let cron = |c: &str| CronExpr::parse(c).ok();
    let mut orders = JobConfig::new("orders-sync", 4);
    orders.cron = cron("0/5 * * * * ?");
    orders.failover = true;
    orders.description = "copies new orders to the warehouse, every 5 s".to_owned();
    orders.sharding_item_parameters = [(0, "eu"), (1, "us"), (2, "apac"), (3, "latam")]
        .into_iter()
        .map(|(i, p)| (i, p.to_owned()))
        .collect();
    let mut flaky = JobConfig::new("flaky-import", 3);
    flaky.cron = cron("0/10 * * * * ?");
    flaky.description = "imports partner feeds; partition 2 fails every other minute".to_owned();
    let mut report = JobConfig::new("nightly-report", 2);
    report.cron = cron("0 0 2 * * ?");
    report.time_zone = JobTimeZone::parse("Europe/Berlin").unwrap_or_else(|_| JobTimeZone::utc());
    report.description = "the daily report, 02:00 Berlin time".to_owned();
    let mut reindex = JobConfig::new("reindex", 2);
    reindex.description = "runs only when triggered".to_owned();
    vec![
        (orders, Work::Steady(Duration::from_millis(800))),
        (flaky, Work::Flaky),
        (report, Work::Steady(Duration::from_secs(2))),
        (reindex, Work::Steady(Duration::from_secs(3))),
    ]
}

/// The demo's registry and instances.
pub struct Demo {
    server: MemServer,
    handles: Arc<tokio::sync::Mutex<Vec<SchedulerHandle>>>,
    started: bool,
}

impl Demo {
    /// An empty in-process registry.
    pub fn new() -> Demo {
        Demo {
            server: MemServer::default(),
            handles: Arc::default(),
            started: false,
        }
    }

    /// A client of the demo's registry (the console's own).
    pub fn client(&self) -> Arc<dyn Registry> {
        Arc::new(self.server.connect(Duration::from_secs(30)))
    }

    /// Starts the instances once (later calls do nothing), recording history in `history`.
    pub fn start_jobs(&mut self, history: Option<DatabaseUrl>) {
        if self.started {
            return;
        }
        self.started = true;
        let server = self.server.clone();
        let handles = Arc::clone(&self.handles);
        tokio::spawn(async move {
            for id in INSTANCES {
                let Ok(id) = InstanceId::new(id) else {
                    continue;
                };
                let mut builder = Scheduler::builder()
                    .registry(Arc::new(server.connect(Duration::from_secs(3))))
                    .registry_name("mem:// (console demo)")
                    .instance_id(id);
                if let Some(url) = &history {
                    builder =
                        builder.tracing_config(shardjob::history::TracingConfig::new(url.clone()));
                }
                for (config, work) in configs() {
                    builder = builder.job(config, DemoJob(work));
                }
                match builder.build().await {
                    Ok(h) => handles.lock().await.push(h),
                    Err(e) => tracing::error!("the demo's instance did not start: {e}"),
                }
            }
        });
    }

    /// Stops the instances (they leave gracefully, within a few seconds).
    pub async fn stop(self) {
        let handles = std::mem::take(&mut *self.handles.lock().await);
        for h in handles {
            let _ = tokio::time::timeout(Duration::from_secs(10), h.shutdown()).await;
        }
    }
}

impl Default for Demo {
    fn default() -> Self {
        Demo::new()
    }
}
