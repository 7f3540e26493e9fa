//! The real driver over a real ZooKeeper server (started by the test kit on a loopback port):
//! two instances share a job's items, one leaves gracefully and the other takes them all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardjob::core::machine::record::RunKind;
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::runtime::{Scheduler, SchedulerHandle};
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_testkit::Cluster;

type Seen = Arc<Mutex<Vec<(String, u32, DateTime<Utc>, RunKind)>>>;

struct Record {
    instance: String,
    seen: Seen,
}

#[async_trait]
impl SimpleJob for Record {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.seen.lock().unwrap().push((
            self.instance.clone(),
            ctx.sharding_item,
            ctx.fire_time,
            ctx.kind,
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(())
    }

    fn job_type(&self) -> String {
        "RECORD".to_owned()
    }
}

/// The runs seen so far, by fire (triggers left out).
fn by_fire(seen: &Seen) -> BTreeMap<DateTime<Utc>, Vec<(String, u32)>> {
    let mut by: BTreeMap<DateTime<Utc>, Vec<(String, u32)>> = BTreeMap::new();
    for (who, item, fire, kind) in seen.lock().unwrap().iter() {
        if *kind != RunKind::Trigger {
            by.entry(*fire).or_default().push((who.clone(), *item));
        }
    }
    by
}

/// Waits up to 30 s (a loaded machine only makes it slower) until `done` holds of the runs
/// by fire.
async fn wait_fires(
    seen: &Seen,
    what: &str,
    done: impl Fn(&BTreeMap<DateTime<Utc>, Vec<(String, u32)>>) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(&by_fire(seen)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within 30 s: {:#?}",
            by_fire(seen)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn instance(connect: &str, n: u32, seen: &Seen) -> SchedulerHandle {
    let config = ZkConfig::new(connect)
        .namespace("runtime-zk")
        .session_timeout(Duration::from_secs(4))
        .request_timeout(Duration::from_secs(5));
    let registry = ZkRegistry::connect(config).await.unwrap();
    let id = InstanceId::new(format!("127.0.0.{n}@-@{n}")).unwrap();
    let job = JobConfig::new("zk-job", 4).with_cron(CronExpr::parse("* * * * * ?").unwrap());
    Scheduler::builder()
        .registry(Arc::new(registry))
        .instance_id(id.clone())
        .options(|o| o.reshard_debounce = Duration::from_millis(50))
        .job(
            job,
            Record {
                instance: id.to_string(),
                seen: Arc::clone(seen),
            },
        )
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_items_over_zookeeper() {
    let cluster = tokio::task::spawn_blocking(|| Cluster::zookeeper(1))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let connect = cluster.connect_string();
    let seen: Seen = Arc::default();
    let a = instance(&connect, 1, &seen).await;
    let b = instance(&connect, 2, &seen).await;
    wait_fires(&seen, "a fire shared by both", |by| {
        by.values().any(|runs| {
            let who: BTreeSet<&str> = runs.iter().map(|r| r.0.as_str()).collect();
            runs.len() == 4 && who.len() == 2
        })
    })
    .await;
    let left = Utc::now();
    b.shutdown().await.unwrap();
    let settled = left + chrono::Duration::milliseconds(1200);
    wait_fires(&seen, "two whole fires on A after B left", |by| {
        by.range(settled..)
            .filter(|(_, runs)| runs.len() == 4)
            .count()
            >= 2
    })
    .await;
    a.shutdown().await.unwrap();

    let seen = seen.lock().unwrap().clone();
    let mut by_fire: BTreeMap<DateTime<Utc>, Vec<(String, u32)>> = BTreeMap::new();
    let mut once = BTreeSet::new();
    for (who, item, fire, kind) in &seen {
        if *kind != RunKind::Trigger {
            assert!(
                once.insert((*item, *fire)),
                "item {item} ran twice for {fire}"
            );
            by_fire.entry(*fire).or_default().push((who.clone(), *item));
        }
    }
    // Some fire ran its 4 items on both instances.
    assert!(
        by_fire.values().any(|runs| {
            let who: BTreeSet<&str> = runs.iter().map(|r| r.0.as_str()).collect();
            runs.len() == 4 && who.len() == 2
        }),
        "{by_fire:#?}"
    );
    // After B left, A ran every item.
    let after: Vec<_> = by_fire
        .iter()
        .filter(|(f, _)| **f > left + chrono::Duration::milliseconds(1200))
        .collect();
    assert!(!after.is_empty(), "{by_fire:#?}");
    for (fire, runs) in after {
        assert_eq!(runs.len(), 4, "{fire}: {runs:?}");
        assert!(
            runs.iter().all(|r| r.0 == "127.0.0.1@-@1"),
            "{fire}: {runs:?}"
        );
    }
    drop(cluster);
}

/// `maxTimeDiffSeconds` is honoured over ZooKeeper, as ElasticJob honours it: the instance
/// measures its clock against the server's (the `mtime` of a node it writes) before its first
/// run, and runs while it is within the bound. A measurement that never came, or a stamp not
/// read, would hold the job here for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_sets_max_time_diff_seconds_runs_over_zookeeper() {
    let cluster = tokio::task::spawn_blocking(|| Cluster::zookeeper(1))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let config = ZkConfig::new(cluster.connect_string())
        .namespace("runtime-zk-clock")
        .session_timeout(Duration::from_secs(4))
        .request_timeout(Duration::from_secs(5));
    let registry = ZkRegistry::connect(config).await.unwrap();
    let id = InstanceId::new("127.0.0.1@-@1").unwrap();
    let mut job = JobConfig::new("clock-job", 2).with_cron(CronExpr::parse("* * * * * ?").unwrap());
    job.max_time_diff_seconds = 5;
    let seen: Seen = Arc::default();
    let handle = Scheduler::builder()
        .registry(Arc::new(registry))
        .instance_id(id.clone())
        .job(
            job,
            Record {
                instance: id.to_string(),
                seen: Arc::clone(&seen),
            },
        )
        .build()
        .await
        .unwrap();
    wait_fires(&seen, "two whole fires", |by| {
        by.values().filter(|runs| runs.len() == 2).count() >= 2
    })
    .await;
    handle.shutdown().await.unwrap();
    drop(cluster);
}
