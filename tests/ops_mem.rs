//! The operation API over a running cluster: two schedulers over the in-memory registry, on
//! real (short) time, operated through `shardjob_ops` as an operator's tool would — status,
//! disabling an item and a server, a trigger with a parameter, a re-shard, a configuration
//! change — each followed by its effect on the runs.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use shardjob::core::machine::record::RunKind;
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::{Scheduler, SchedulerHandle};
use shardjob_ops::{ItemState, JobState, JobStatus, Ops, Scope};

const JOB: &str = "operated";
/// Every wait for an effect; generous, for a loaded machine.
const WAIT: Duration = Duration::from_secs(40);

/// One item run as the job body saw it.
#[derive(Debug, Clone)]
struct Seen {
    instance: String,
    item: u32,
    kind: RunKind,
    fire_ms: i64,
    token: u64,
    parameter: String,
}

#[derive(Clone)]
struct Recorder {
    instance: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

#[async_trait]
impl SimpleJob for Recorder {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.seen.lock().unwrap().push(Seen {
            instance: self.instance.clone(),
            item: ctx.sharding_item,
            kind: ctx.kind,
            fire_ms: ctx.fire_time.timestamp_millis(),
            token: ctx.fencing_token,
            parameter: ctx.job_parameter.clone(),
        });
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(150)) => Ok(()),
            _ = ctx.cancel.cancelled() => Err(JobError::Cancelled),
        }
    }
}

fn id(n: u32) -> InstanceId {
    InstanceId::new(format!("127.0.0.{n}@-@{}", 1000 + n)).unwrap()
}

async fn start(server: &MemServer, n: u32, seen: &Arc<Mutex<Vec<Seen>>>) -> SchedulerHandle {
    let config = JobConfig::new(JOB, 4).with_cron(CronExpr::parse("* * * * * ?").unwrap());
    let job = Recorder {
        instance: id(n).to_string(),
        seen: Arc::clone(seen),
    };
    Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(5))))
        .instance_id(id(n))
        .options(|o| o.reshard_debounce = Duration::from_millis(50))
        .job(config, job)
        .build()
        .await
        .unwrap()
}

/// Polls the job's status until `done` holds, or fails after [`WAIT`] saying `what`.
async fn wait_status(ops: &Ops<'_>, what: &str, done: impl Fn(&JobStatus) -> bool) -> JobStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(status) = ops.status(JOB, Utc::now()).await
            && done(&status)
        {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {WAIT:?}: {:#?}",
            ops.status(JOB, Utc::now()).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `done` holds of the runs seen, or fails after [`WAIT`] saying `what`.
async fn wait_seen(seen: &Arc<Mutex<Vec<Seen>>>, what: &str, done: impl Fn(&[Seen]) -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done(&seen.lock().unwrap()) {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The scheduled fires at which `item` ran.
fn fires_of(seen: &[Seen], item: u32) -> BTreeSet<i64> {
    seen.iter()
        .filter(|s| s.item == item && s.kind != RunKind::Trigger)
        .map(|s| s.fire_ms)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operating_a_running_cluster() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let one = start(&server, 1, &seen).await;
    let two = start(&server, 2, &seen).await;
    let tool = server.connect(Duration::from_secs(5));
    let ops = Ops::new(&tool as &dyn shardjob::core::registry::Registry);

    // Status: both instances hold two items each; the list says OK.
    let status = wait_status(&ops, "two instances sharing the items", |s| {
        s.brief.status == JobState::Ok
            && s.instances.len() == 2
            && s.instances.iter().all(|i| i.items.len() == 2)
            && s.items.iter().all(|i| i.last_done_ms.is_some())
    })
    .await;
    let ids: BTreeSet<String> = [id(1).to_string(), id(2).to_string()].into();
    assert!(
        ids.contains(status.leader.as_deref().unwrap()),
        "{status:#?}"
    );
    assert!(
        status
            .next_fire_ms
            .is_some_and(|t| t > Utc::now().timestamp_millis() - 1000)
    );
    assert_eq!(ops.jobs().await.unwrap()[0].status, JobState::Ok);

    // A run in progress shows with the fencing token the job received.
    let status = wait_status(&ops, "a run in progress", |s| {
        s.items
            .iter()
            .any(|i| i.run.as_ref().is_some_and(|r| r.fencing_token.is_some()))
    })
    .await;
    let (item, run) = status
        .items
        .iter()
        .find_map(|i| {
            i.run
                .as_ref()
                .filter(|r| r.fencing_token.is_some())
                .map(|r| (i.item, r.clone()))
        })
        .unwrap();
    wait_seen(&seen, "the job saw the run's fencing token", |s| {
        s.iter().any(|s| {
            s.item == item && Some(s.token) == run.fencing_token && s.fire_ms == run.since_ms
        })
    })
    .await;

    // Disable item 1: it stops running (everywhere), the status says DISABLED.
    ops.disable_item(JOB, 1).await.unwrap();
    wait_status(&ops, "item 1 disabled", |s| {
        s.items[1].status == ItemState::Disabled
    })
    .await;
    let stopped_at = fires_of(&seen.lock().unwrap(), 1)
        .last()
        .copied()
        .unwrap_or(0);
    wait_seen(
        &seen,
        "three fires of the other items after item 1 stopped",
        |s| fires_of(s, 0).range(stopped_at + 1..).count() >= 3,
    )
    .await;
    assert!(
        fires_of(&seen.lock().unwrap(), 1)
            .range(stopped_at + 1..)
            .next()
            .is_none(),
        "item 1 ran after its last fire {stopped_at} while disabled"
    );

    // Trigger with a parameter: every enabled item runs once with it, the disabled one not.
    ops.trigger(JOB, Some("manual-7")).await.unwrap();
    wait_seen(
        &seen,
        "the trigger ran items 0, 2 and 3 with its parameter",
        |s| {
            [0, 2, 3].iter().all(|item| {
                s.iter().any(|s| {
                    s.item == *item && s.kind == RunKind::Trigger && s.parameter == "manual-7"
                })
            })
        },
    )
    .await;
    assert!(
        !seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.item == 1 && s.kind == RunKind::Trigger)
    );
    wait_status(&ops, "the triggers taken", |s| {
        s.pending_triggers.is_empty()
    })
    .await;

    // Enable it again: it runs again.
    ops.enable_item(JOB, 1).await.unwrap();
    let again = seen.lock().unwrap().len();
    wait_seen(&seen, "item 1 runs again", |s| {
        s[again..].iter().any(|s| s.item == 1)
    })
    .await;

    // Re-shard now: the leader takes the flag.
    ops.reshard(JOB).await.unwrap();
    wait_status(&ops, "the re-shard flag cleared", |s| !s.reshard_pending).await;

    // Disable server 127.0.0.2 for the job: instance 1 takes every item.
    ops.disable(&Scope::job_on_server(JOB, "127.0.0.2"))
        .await
        .unwrap();
    wait_status(&ops, "every item on instance 1", |s| {
        s.items
            .iter()
            .all(|i| i.instance.as_deref() == Some(id(1).as_str()))
    })
    .await;
    let moved = seen.lock().unwrap().len();
    wait_seen(&seen, "instance 1 runs all four items", |s| {
        (0..4).all(|item| {
            s[moved..]
                .iter()
                .any(|s| s.item == item && s.instance == id(1).as_str())
        })
    })
    .await;
    ops.enable(&Scope::job(JOB)).await.unwrap();

    // A new item count, compare-and-set: the cluster re-shards to six items.
    let read = ops.config(JOB).await.unwrap();
    let mut config = read.config.clone();
    config.sharding_total_count = 6;
    ops.update_config(JOB, &config, read.version).await.unwrap();
    let status = wait_status(&ops, "six items shared by both instances", |s| {
        s.items.len() == 6 && s.instances.iter().all(|i| i.items.len() == 3)
    })
    .await;
    assert_eq!(status.brief.sharding_total_count, 6);
    assert!(ops.update_config(JOB, &config, read.version).await.is_err());

    one.shutdown().await.unwrap();
    two.shutdown().await.unwrap();
    let status = ops.status(JOB, Utc::now()).await.unwrap();
    assert_eq!(status.brief.status, JobState::Crashed);
}
