//! Nodes no session holds, over real ZooKeeper and etcd servers (started by the test kit on
//! loopback ports), as issue 25 found them:
//!
//! - a persistent `instances/10.9.9.9@-@99999` written by hand took items in the plan, and
//!   they stopped running while it existed: it must never be given items, and is reported;
//! - a persistent `sharding/N/running` whose owner is no live instance (left by a killed
//!   ElasticJob instance with failover on) blocked its item for good: the leader clears it,
//!   reports it, and the item runs again;
//! - a persistent instance node of a malformed id is deleted.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardjob::core::machine::MachineEvent;
use shardjob::core::registry::{CreateMode, NodePath, Registry, RegistryError};
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::runtime::{RunEvent, Scheduler, SchedulerHandle};
use shardjob_backend_etcd::{EtcdConfig, EtcdRegistry};
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_testkit::Cluster;

const JOB: &str = "foreign-job";
const SESSION: Duration = Duration::from_secs(2);

/// Each run's item and start time.
type Seen = Arc<Mutex<Vec<(u32, DateTime<Utc>)>>>;

struct Record(Seen);

#[async_trait]
impl SimpleJob for Record {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.0.lock().unwrap().push((ctx.sharding_item, Utc::now()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(())
    }

    fn job_type(&self) -> String {
        "RECORD".to_owned()
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Zk,
    Etcd,
}

async fn connect(kind: Kind, cluster: &Cluster, namespace: &str) -> Arc<dyn Registry> {
    match kind {
        Kind::Zk => Arc::new(
            ZkRegistry::connect(
                ZkConfig::new(cluster.connect_string())
                    .namespace(namespace)
                    .session_timeout(SESSION),
            )
            .await
            .unwrap(),
        ),
        Kind::Etcd => Arc::new(
            EtcdRegistry::connect(
                EtcdConfig::new(cluster.endpoints())
                    .namespace(namespace)
                    .lease_ttl(SESSION),
            )
            .await
            .unwrap(),
        ),
    }
}

async fn instance(registry: Arc<dyn Registry>, seen: &Seen) -> SchedulerHandle {
    let mut job = JobConfig::new(JOB, 2).with_cron(CronExpr::parse("* * * * * ?").unwrap());
    job.failover = true;
    job.misfire = true;
    Scheduler::builder()
        .registry(registry)
        .instance_id(InstanceId::new("127.0.0.1@-@1").unwrap())
        .options(|o| o.reshard_debounce = Duration::from_millis(50))
        .job(job, Record(Arc::clone(seen)))
        .build()
        .await
        .unwrap()
}

fn path(s: &str) -> NodePath {
    NodePath::new(format!("/{JOB}/{s}")).unwrap()
}

/// Waits up to `within` (a loaded machine only makes it slower) until `done` holds.
async fn wait(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether both items started a run after `t`, `times` times each.
fn both_ran_after(seen: &Seen, t: DateTime<Utc>, times: usize) -> bool {
    let runs = seen.lock().unwrap();
    (0..2).all(|i| {
        runs.iter()
            .filter(|(item, at)| *item == i && *at > t)
            .count()
            >= times
    })
}

/// Collects the machine's events as they come.
fn collect(handle: &SchedulerHandle) -> Arc<Mutex<Vec<MachineEvent>>> {
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut rx = handle.subscribe();
    let sink = Arc::clone(&events);
    tokio::spawn(async move {
        while let Ok(e) = rx.recv().await {
            if let RunEvent::Machine(m) = e {
                sink.lock().unwrap().push(m);
            }
        }
    });
    events
}

async fn scenario(kind: Kind, cluster: &Cluster) {
    let namespace = format!("foreign-{kind:?}").to_lowercase();
    let seen: Seen = Arc::default();
    let a = instance(connect(kind, cluster, &namespace).await, &seen).await;
    let events = collect(&a);
    let hand = connect(kind, cluster, &namespace).await;
    let start = Utc::now();
    wait("run of both items", Duration::from_secs(30), || {
        both_ran_after(&seen, start, 1)
    })
    .await;

    // (b) A session-less instance node, well formed: never given items, reported, kept.
    let foreign = "10.9.9.9@-@99999";
    let yaml = format!("jobInstanceId: {foreign}\nserverIp: 10.9.9.9\n");
    let stat = hand
        .create(
            &path(&format!("instances/{foreign}")),
            yaml.into_bytes(),
            CreateMode::Persistent,
        )
        .await
        .unwrap();
    assert_eq!(stat.ephemeral_owner, None, "{kind:?}: a persistent node");
    let written = Utc::now();
    wait(
        "the instance node reported",
        Duration::from_secs(10),
        || {
            events.lock().unwrap().iter().any(|e| {
                matches!(e, MachineEvent::UnboundInstance { path, deleting: false, .. }
                if path.ends_with(foreign))
            })
        },
    )
    .await;
    wait(
        "three runs of each item after the node was written",
        Duration::from_secs(30),
        || both_ran_after(&seen, written, 3),
    )
    .await;
    for i in 0..2 {
        let owner = hand
            .get(&path(&format!("sharding/{i}/instance")))
            .await
            .unwrap()
            .map(|n| String::from_utf8_lossy(&n.data).into_owned());
        assert_eq!(
            owner.as_deref(),
            Some("127.0.0.1@-@1"),
            "{kind:?}: item {i} given to a node no session holds"
        );
    }
    assert!(
        hand.get(&path(&format!("instances/{foreign}")))
            .await
            .unwrap()
            .is_some(),
        "{kind:?}: a well-formed node is only warned about"
    );

    // (b') A session-less instance node of a malformed id is deleted.
    let junk = path("instances/10.9.9.9@-@not-a-pid!");
    hand.create(&junk, b"garbage".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while hand.get(&junk).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{kind:?}: the garbage instance node is still there"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // (a) A persistent `running` marker of a dead owner on item 0, written between its runs.
    let marker = path("sharding/0/running");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match hand
            .create(&marker, b"10.9.9.8@-@4242".to_vec(), CreateMode::Persistent)
            .await
        {
            Ok(_) => break,
            // Item 0 is running: its own marker is there.
            Err(RegistryError::NodeExists(_)) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{kind:?}: never idle"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{kind:?}: {e}"),
        }
    }
    let blocked = Utc::now();
    // The marker goes once its owner has been seen gone for a session timeout; item 0 runs
    // again (ElasticJob's rule: once for the marker's fire, failed over, then on schedule).
    wait("the stale marker cleared", Duration::from_secs(20), || {
        events.lock().unwrap().iter().any(|e| {
            matches!(e, MachineEvent::StaleRunningCleared { item: 0, value, .. }
                if value == "10.9.9.8@-@4242")
        })
    })
    .await;
    wait(
        "item 0 running again after the marker",
        Duration::from_secs(20),
        || {
            let runs = seen.lock().unwrap();
            runs.iter()
                .filter(|(i, at)| *i == 0 && *at > blocked)
                .count()
                >= 2
        },
    )
    .await;
    let blocked_for = {
        let runs = seen.lock().unwrap();
        let first = runs
            .iter()
            .filter(|(i, at)| *i == 0 && *at > blocked)
            .map(|(_, at)| *at)
            .min()
            .unwrap();
        first - blocked
    };
    eprintln!(
        "{kind:?}: item 0 blocked by the stale marker for {} ms (session {} ms)",
        blocked_for.num_milliseconds(),
        SESSION.as_millis()
    );
    let kinds: BTreeSet<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            MachineEvent::StaleRunningCleared { settled, .. } => Some(format!("{settled:?}")),
            _ => None,
        })
        .collect();
    eprintln!("{kind:?}: settled {kinds:?}");
    a.shutdown().await.unwrap();
    hand.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_nodes_over_zookeeper_and_etcd() {
    let zk = tokio::task::spawn_blocking(|| Cluster::zookeeper(1))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    scenario(Kind::Zk, &zk).await;
    let etcd = tokio::task::spawn_blocking(|| Cluster::etcd(1))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    scenario(Kind::Etcd, &etcd).await;
}
