//! How long jobs of many items take to shard, re-shard and fire over real registries (a
//! benchmark, `#[ignore]`d):
//!
//! ```sh
//! cargo test --release --features zk,etcd --test huge_jobs -- --ignored --nocapture
//! SHARDJOB_HUGE_ONLY=zk SHARDJOB_HUGE_SIZES=10000,30000 cargo test ...   # a subset
//! SHARDJOB_HUGE_DEADLINE=120 cargo test ...   # seconds each phase may take (default 300)
//! ```
//!
//! For each registry (a single ZooKeeper, a single etcd with its default `--max-txn-ops` of
//! 128) and each size (10,000, 30,000 and 100,000 items by default), with a job whose cron
//! never fires in the run:
//!
//! - **plan**: one instance starts (the real driver, in this process); the time from the start
//!   of its build to the leader's `Resharded` event (every `sharding/N/instance` written).
//! - **re-shard**: a second instance joins; the time from the start of its build to the
//!   leader's `Resharded` event that gives items to it.
//! - **fire**: both instances are triggered; the time until every item's body has run once.
//!
//! A phase that does not end within the deadline is reported with how far it got (for the
//! plans: the items whose owner node the registry holds) and ends the size's run. Every
//! figure is wall time on the machine the test runs on, servers included.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use shardjob::core::machine::MachineEvent;
use shardjob::core::registry::{NodePath, Registry};
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::runtime::{RunEvent, Scheduler, SchedulerHandle};
use shardjob_backend_etcd::{EtcdConfig, EtcdRegistry};
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_testkit::Cluster;
use tokio::sync::broadcast;

const JOB: &str = "huge";

/// Counts the items run.
struct Count(Arc<AtomicU64>);

#[async_trait]
impl SimpleJob for Count {
    async fn execute(&self, _ctx: &ShardingContext) -> Result<(), JobError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Zk,
    Etcd,
}

async fn connect(kind: Kind, cluster: &Cluster, namespace: &str) -> Arc<dyn Registry> {
    match kind {
        Kind::Zk => Arc::new(
            ZkRegistry::connect(ZkConfig::new(cluster.connect_string()).namespace(namespace))
                .await
                .unwrap(),
        ),
        Kind::Etcd => Arc::new(
            EtcdRegistry::connect(EtcdConfig::new(cluster.endpoints()).namespace(namespace))
                .await
                .unwrap(),
        ),
    }
}

/// Items of the job whose node exists (read with a client of its own; a plan creates an
/// item's node with its owner's).
async fn planned_items(registry: &dyn Registry) -> String {
    let Ok(sharding) = NodePath::new(format!("/{JOB}/sharding")) else {
        return "?".into();
    };
    match registry.children(&sharding).await {
        Ok(items) => items.len().to_string(),
        Err(e) => format!("? ({e})"),
    }
}

/// Waits for a `Resharded` event of the job that gives items to `to` (any plan when `None`).
async fn wait_plan(
    events: &mut broadcast::Receiver<RunEvent>,
    to: Option<&InstanceId>,
    deadline: Duration,
) -> bool {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(RunEvent::Machine(MachineEvent::Resharded { job, owners, .. }))
                    if job == JOB =>
                {
                    if to.is_none_or(|to| owners.values().any(|o| o == to)) {
                        return true;
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return false,
            }
        }
    };
    tokio::time::timeout(deadline, wait).await.unwrap_or(false)
}

async fn start(
    registry: Arc<dyn Registry>,
    id: &str,
    items: u32,
    ran: &Arc<AtomicU64>,
) -> (SchedulerHandle, broadcast::Receiver<RunEvent>) {
    // Never fires within the run: only the triggers run items.
    let config = JobConfig::new(JOB, items).with_cron(CronExpr::parse("0 0 0 1 1 ? 2099").unwrap());
    let builder = Scheduler::builder()
        .registry(registry)
        .instance_id(InstanceId::new(id).unwrap())
        .job(config, Count(Arc::clone(ran)));
    let events = builder.subscribe();
    (builder.build().await.unwrap(), events)
}

/// One size on one registry: the report's line.
async fn measure(kind: Kind, cluster: &Cluster, items: u32, deadline: Duration) -> String {
    let namespace = format!(
        "huge-{}-{items}",
        if kind == Kind::Zk { "zk" } else { "etcd" }
    );
    let probe = connect(kind, cluster, &namespace).await;
    let ran = Arc::new(AtomicU64::new(0));
    let mut line = format!("{kind:?} {items:>6} items:");

    let t = Instant::now();
    let (a, mut a_events) = start(
        connect(kind, cluster, &namespace).await,
        "127.0.0.1@-@1",
        items,
        &ran,
    )
    .await;
    if !wait_plan(&mut a_events, None, deadline).await {
        let got = planned_items(probe.as_ref()).await;
        line += &format!(" plan NOT DONE in {deadline:?} ({got} items written)");
        let _ = tokio::time::timeout(deadline, a.shutdown()).await;
        return line;
    }
    line += &format!(" plan {:.1} s;", t.elapsed().as_secs_f64());

    let second = InstanceId::new("127.0.0.1@-@2").unwrap();
    let t = Instant::now();
    let (b, _b_events) = start(
        connect(kind, cluster, &namespace).await,
        second.as_str(),
        items,
        &ran,
    )
    .await;
    if !wait_plan(&mut a_events, Some(&second), deadline).await {
        line += &format!(" re-shard NOT DONE in {deadline:?}");
    } else {
        line += &format!(" re-shard {:.1} s;", t.elapsed().as_secs_f64());
        let t = Instant::now();
        a.trigger(JOB, None).await.unwrap();
        b.trigger(JOB, None).await.unwrap();
        let all = u64::from(items);
        let fired = tokio::time::timeout(deadline, async {
            while ran.load(Ordering::Relaxed) < all {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        match fired {
            Ok(()) => line += &format!(" fire {:.1} s", t.elapsed().as_secs_f64()),
            Err(_) => {
                line += &format!(
                    " fire NOT DONE in {deadline:?} ({} items ran)",
                    ran.load(Ordering::Relaxed)
                )
            }
        }
    }
    let _ = tokio::time::timeout(deadline, b.shutdown()).await;
    let _ = tokio::time::timeout(deadline, a.shutdown()).await;
    let _ = probe.close().await;
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: cargo test --release --features zk,etcd --test huge_jobs -- --ignored --nocapture"]
async fn huge_jobs_shard_reshard_and_fire() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("SHARDJOB_HUGE_LOG").unwrap_or_else(|_| "warn".into()),
        ))
        .with_test_writer()
        .try_init();
    let sizes: Vec<u32> = std::env::var("SHARDJOB_HUGE_SIZES")
        .unwrap_or_else(|_| "10000,30000,100000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("SHARDJOB_HUGE_SIZES: numbers"))
        .collect();
    let deadline = Duration::from_secs(
        std::env::var("SHARDJOB_HUGE_DEADLINE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300),
    );
    let only = std::env::var("SHARDJOB_HUGE_ONLY").unwrap_or_default();
    let mut report = Vec::new();
    for kind in [Kind::Zk, Kind::Etcd] {
        let tag = if kind == Kind::Zk { "zk" } else { "etcd" };
        if !tag.starts_with(only.as_str()) {
            continue;
        }
        let cluster = tokio::task::spawn_blocking(move || match kind {
            Kind::Zk => Cluster::zookeeper(1),
            Kind::Etcd => Cluster::etcd(1),
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
        for &items in &sizes {
            let line = measure(kind, &cluster, items, deadline).await;
            println!("{line}");
            report.push(line);
        }
    }
    println!("---");
    for line in &report {
        println!("{line}");
    }
}
