//! The operation API's conformance suite: the same reads and writes against every backend.
//!
//! A backend harness ([`Backend`]) gives clients with sessions of their own in a namespace of
//! their own. Every check builds its namespace as the nodes a running cluster (shardjob's or
//! ElasticJob 3.0.4's) writes, through [`shardjob_core::layout`], and operates it through a
//! separate client, as an operator's tool would. `ops_tests!` turns every check into a
//! `#[tokio::test]` of the including file.

#![allow(dead_code)]

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use shardjob_core::layout::JobPaths;
use shardjob_core::machine::record::{ItemRecord, RunKind, RunRecord};
use shardjob_core::registry::{CreateMode, NodePath, Registry, TxnOp};
use shardjob_core::{CronExpr, InstanceId, JobConfig};
use shardjob_ops::{ErrorKind, ItemState, JobState, Ops, OpsError, Scope};

/// A backend under test.
#[async_trait]
pub trait Backend: Send + Sync {
    /// A new client (its own session) in namespace `ns`; clients of one namespace see each
    /// other's nodes.
    async fn client(&self, ns: &str) -> Box<dyn Registry>;
}

fn p(s: &str) -> NodePath {
    NodePath::new(s).unwrap()
}

/// Creates `path` (persistent, or ephemeral) with its missing ancestors.
async fn put(reg: &dyn Registry, path: &NodePath, data: &str, mode: CreateMode) {
    if let Some(parent) = path.parent() {
        reg.ensure_path(&parent).await.unwrap();
    }
    reg.create(path, data.as_bytes().to_vec(), mode)
        .await
        .unwrap_or_else(|e| panic!("creating {path}: {e}"));
}

async fn persistent(reg: &dyn Registry, path: NodePath, data: &str) {
    put(reg, &path, data, CreateMode::Persistent).await;
}

/// Every node of the namespace: path → (data, version).
async fn snapshot(reg: &dyn Registry) -> BTreeMap<String, (Vec<u8>, i64)> {
    reg.get_tree(&NodePath::root())
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.path.to_string(), (n.data, n.stat.version.0)))
        .collect()
}

async fn text(reg: &dyn Registry, path: NodePath) -> Option<String> {
    reg.get(&path)
        .await
        .unwrap()
        .map(|n| String::from_utf8(n.data).unwrap())
}

fn instance_value(id: &InstanceId) -> String {
    format!("jobInstanceId: {id}\nserverIp: {}\n", id.server_ip())
}

/// Registers `id` in `job` as an instance does: its ephemeral node (in `session`'s session)
/// and its server node.
async fn register(
    reg: &dyn Registry,
    session: &dyn Registry,
    job: &JobPaths,
    id: &InstanceId,
    server: &str,
) {
    put(
        session,
        &job.instance(id),
        &instance_value(id),
        CreateMode::Ephemeral,
    )
    .await;
    if reg.get(&job.server_of(id)).await.unwrap().is_none() {
        persistent(reg, job.server_of(id), server).await;
    }
}

/// A shardjob job: config, two instances on two servers, items 0..3 split between them, item
/// 0 running with its execution record, a leader and a pending re-shard.
async fn shardjob_cluster(
    reg: &dyn Registry,
    session: &dyn Registry,
) -> (JobPaths, InstanceId, InstanceId) {
    let job = JobPaths::new("settle").unwrap();
    let a = InstanceId::new("10.0.0.1@-@101").unwrap();
    let b = InstanceId::new("10.0.0.2@-@202").unwrap();
    let mut config =
        JobConfig::new("settle", 4).with_cron(CronExpr::parse("0 0/10 * * * ?").unwrap());
    config.description = "settle the day".into();
    persistent(reg, job.root().clone(), "SIMPLE").await;
    persistent(reg, job.config(), &config.to_yaml()).await;
    register(reg, session, &job, &a, "ENABLED").await;
    register(reg, session, &job, &b, "ENABLED").await;
    for item in 0..4 {
        let owner = if item % 2 == 0 { &a } else { &b };
        persistent(reg, job.item_instance(item), owner.as_str()).await;
        let record = ItemRecord {
            done: Some(1_764_050_400_000),
            run: None,
        };
        persistent(
            reg,
            job.item_execution(item),
            std::str::from_utf8(&record.to_bytes()).unwrap(),
        )
        .await;
    }
    // Item 0 runs: its record names the run, its running marker is bound to the session.
    let record = ItemRecord {
        done: Some(1_764_050_400_000),
        run: Some(RunRecord {
            fire: 1_764_051_000_000,
            kind: RunKind::Scheduled,
            instance: a.clone(),
        }),
    };
    reg.set(&job.item_execution(0), record.to_bytes(), None)
        .await
        .unwrap();
    session
        .create(
            &job.item_running(0),
            a.as_str().as_bytes().to_vec(),
            CreateMode::Ephemeral,
        )
        .await
        .unwrap();
    put(
        session,
        &job.leader_instance(),
        a.as_str(),
        CreateMode::Ephemeral,
    )
    .await;
    persistent(reg, job.sharding_necessary(), "").await;
    (job, a, b)
}

/// Reads a namespace a shardjob cluster wrote: the job list, one job's status with what only
/// shardjob knows, the servers.
pub async fn reads_a_shardjob_cluster(backend: &dyn Backend) {
    let reg = backend.client("ns").await;
    let session = backend.client("ns").await;
    let (_, a, b) = shardjob_cluster(&*reg, &*session).await;
    let ops = Ops::new(&*reg);

    let jobs = ops.jobs().await.unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let brief = &jobs[0];
    assert_eq!(brief.name, "settle");
    assert_eq!(brief.description, "settle the day");
    assert_eq!(brief.cron.as_deref(), Some("0 0/10 * * * ?"));
    assert_eq!((brief.instance_count, brief.sharding_total_count), (2, 4));
    assert_eq!(brief.status, JobState::Ok);

    let now = Utc.with_ymd_and_hms(2025, 11, 25, 6, 3, 0).unwrap();
    let status = ops.status("settle", now).await.unwrap();
    assert_eq!(status.leader.as_deref(), Some(a.as_str()));
    assert!(status.reshard_pending);
    assert!(!status.resharding);
    let next = Utc.with_ymd_and_hms(2025, 11, 25, 6, 10, 0).unwrap();
    assert_eq!(status.next_fire_ms, Some(next.timestamp_millis()));
    let states: Vec<ItemState> = status.items.iter().map(|i| i.status).collect();
    assert_eq!(
        states,
        [
            ItemState::Running,
            ItemState::Pending,
            ItemState::Pending,
            ItemState::Pending
        ]
    );
    let item0 = &status.items[0];
    assert_eq!(item0.instance.as_deref(), Some(a.as_str()));
    assert_eq!(item0.server_ip.as_deref(), Some("10.0.0.1"));
    // Item 0's record was written since its creation (its run was claimed): its done shows.
    // The others' are as a re-shard created them: where their schedule starts, no fire.
    assert_eq!(item0.last_done_ms, Some(1_764_050_400_000));
    assert!(!item0.never_done);
    for item in &status.items[1..] {
        assert_eq!(
            (item.last_done_ms, item.never_done),
            (None, true),
            "{item:?}"
        );
    }
    let run = item0.run.as_ref().expect("a run in progress");
    assert_eq!(
        (run.since_ms, run.kind, run.instance.as_str()),
        (1_764_051_000_000, RunKind::Scheduled, a.as_str())
    );
    // The fencing token is the running marker's creation revision.
    let marker = reg
        .get(&JobPaths::new("settle").unwrap().item_running(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.fencing_token, Some(marker.stat.created.0));
    assert_eq!(status.items[1].server_ip.as_deref(), Some("10.0.0.2"));
    assert!(status.items[1].run.is_none());
    assert_eq!(status.instances.len(), 2);
    assert_eq!(status.instances[0].items, [0, 2]);
    assert!(status.instances[0].leader && !status.instances[1].leader);
    assert_eq!(status.instances[1].id, b.as_str());

    let servers = ops.servers().await.unwrap();
    let ips: Vec<&str> = servers.iter().map(|s| s.ip.as_str()).collect();
    assert_eq!(ips, ["10.0.0.1", "10.0.0.2"]);
    assert!(servers[0].instances.contains(a.as_str()));
    assert_eq!((servers[0].jobs.len(), servers[0].disabled_jobs), (1, 0));
    let on_b = ops.server_jobs("10.0.0.2").await.unwrap();
    assert_eq!(
        (
            on_b[0].name.as_str(),
            on_b[0].instance_count,
            on_b[0].status
        ),
        ("settle", 1, JobState::Ok)
    );
}

/// The `config` node of a job ElasticJob 3.0.4 registered through its Java API: SnakeYAML's
/// `dumpAsMap` of `JobConfigurationPOJO` (keys in order, nulls and empty collections left out,
/// the 3.0.4 name of the executor key, no `timeZone`).
pub const ELASTICJOB_304_CONFIG: &str = "cron: 0/5 * * * * ?
description: ''
disabled: false
failover: true
jobErrorHandlerType: LOG
jobExecutorServiceHandlerType: CPU
jobName: settle
jobParameter: ''
jobShardingStrategyType: AVG_ALLOCATION
maxTimeDiffSeconds: -1
misfire: true
monitorExecution: true
overwrite: false
reconcileIntervalMinutes: 10
shardingItemParameters: 0=a,1=b,2=c
shardingTotalCount: 3
staticSharding: false
";

/// Builds a namespace as ElasticJob 3.0.4 writes it (reference §1.2–1.4): `settle` healthy on
/// two servers (one DISABLED), with a running item, a failover and a disabled item; `report`
/// crashed; `audit` disabled; `orphan` whose owner is gone.
async fn elasticjob_namespace(reg: &dyn Registry, session: &dyn Registry) {
    let a = InstanceId::new("192.168.10.11@-@4021").unwrap();
    let b = InstanceId::new("192.168.10.12@-@5307").unwrap();
    let settle = JobPaths::new("settle").unwrap();
    persistent(reg, settle.root().clone(), "com.example.SettleJob").await;
    persistent(reg, settle.config(), ELASTICJOB_304_CONFIG).await;
    register(reg, session, &settle, &a, "ENABLED").await;
    register(reg, session, &settle, &b, "DISABLED").await;
    for item in 0..3 {
        persistent(reg, settle.item_instance(item), a.as_str()).await;
    }
    // Item 0 runs (failover on: ElasticJob's running node is persistent), item 1 runs as a
    // failover on `a`, item 2 is disabled.
    persistent(reg, settle.item_running(0), "").await;
    persistent(reg, settle.item_running(1), "").await;
    put(
        session,
        &settle.item_failover(1),
        a.as_str(),
        CreateMode::Ephemeral,
    )
    .await;
    persistent(reg, settle.item_failovering(1), a.as_str()).await;
    persistent(reg, settle.item_disabled(2), "").await;
    put(
        session,
        &settle.leader_instance(),
        a.as_str(),
        CreateMode::Ephemeral,
    )
    .await;
    persistent(
        reg,
        settle
            .leader()
            .join("election")
            .unwrap()
            .join("latch")
            .unwrap(),
        "",
    )
    .await;
    persistent(reg, settle.failover_items(), "").await;

    let report = JobPaths::new("report").unwrap();
    persistent(reg, report.root().clone(), "com.example.ReportJob").await;
    persistent(
        reg,
        report.config(),
        &ELASTICJOB_304_CONFIG
            .replace("jobName: settle", "jobName: report")
            .replace("0/5 * * * * ?", "0 0 2 * * ?"),
    )
    .await;
    persistent(reg, report.server("192.168.10.11").unwrap(), "ENABLED").await;
    persistent(reg, report.item_instance(0), a.as_str()).await;

    let audit = JobPaths::new("audit").unwrap();
    persistent(reg, audit.root().clone(), "SCRIPT").await;
    persistent(
        reg,
        audit.config(),
        &ELASTICJOB_304_CONFIG.replace("jobName: settle", "jobName: audit"),
    )
    .await;
    register(reg, session, &audit, &a, "DISABLED").await;
    persistent(reg, audit.item_instance(0), a.as_str()).await;

    let orphan = JobPaths::new("orphan").unwrap();
    persistent(reg, orphan.root().clone(), "com.example.OrphanJob").await;
    persistent(
        reg,
        orphan.config(),
        &ELASTICJOB_304_CONFIG.replace("jobName: settle", "jobName: orphan"),
    )
    .await;
    register(reg, session, &orphan, &b, "ENABLED").await;
    persistent(reg, orphan.item_instance(0), "192.168.10.99@-@1").await;
    // A top-level node without a config is not a job.
    persistent(reg, p("/stray/leftover"), "").await;
}

/// Reads a namespace ElasticJob 3.0.4 wrote, with ElasticJob's rules.
pub async fn reads_an_elasticjob_namespace(backend: &dyn Backend) {
    let reg = backend.client("ns").await;
    let session = backend.client("ns").await;
    elasticjob_namespace(&*reg, &*session).await;
    let ops = Ops::new(&*reg);

    let jobs = ops.jobs().await.unwrap();
    let seen: Vec<(&str, JobState, usize)> = jobs
        .iter()
        .map(|j| (j.name.as_str(), j.status, j.instance_count))
        .collect();
    assert_eq!(
        seen,
        [
            ("audit", JobState::Disabled, 1),
            ("orphan", JobState::ShardingFlag, 1),
            ("report", JobState::Crashed, 0),
            ("settle", JobState::Ok, 2),
        ]
    );
    let settle = &jobs[3];
    assert_eq!(
        (settle.cron.as_deref(), settle.sharding_total_count),
        (Some("0/5 * * * * ?"), 3)
    );
    assert!(jobs.iter().all(|j| j.config_problem.is_none()), "{jobs:?}");

    let status = ops.status("settle", Utc::now()).await.unwrap();
    let items: Vec<(u32, ItemState, bool)> = status
        .items
        .iter()
        .map(|i| (i.item, i.status, i.failover))
        .collect();
    assert_eq!(
        items,
        [
            (0, ItemState::Running, false),
            (1, ItemState::Running, true),
            (2, ItemState::Disabled, false)
        ]
    );
    assert!(
        status
            .items
            .iter()
            .all(|i| i.server_ip.as_deref() == Some("192.168.10.11"))
    );
    assert!(
        status
            .items
            .iter()
            .all(|i| i.run.is_none() && i.record_problem.is_none())
    );
    assert_eq!(status.leader.as_deref(), Some("192.168.10.11@-@4021"));
    assert_eq!(
        status.servers,
        [
            ("192.168.10.11".to_owned(), false),
            ("192.168.10.12".to_owned(), true)
        ]
    );
    let orphan = ops.status("orphan", Utc::now()).await.unwrap();
    assert_eq!(orphan.items[0].status, ItemState::ShardingFlag);
    assert_eq!(orphan.items[0].server_ip, None);

    let servers = ops.servers().await.unwrap();
    let view: Vec<(&str, usize, usize, usize)> = servers
        .iter()
        .map(|s| {
            (
                s.ip.as_str(),
                s.instances.len(),
                s.jobs.len(),
                s.disabled_jobs,
            )
        })
        .collect();
    // .11: settle, report, audit (DISABLED); its one instance id in settle and audit.
    // .12: settle (DISABLED), orphan.
    assert_eq!(
        view,
        [("192.168.10.11", 1, 3, 1), ("192.168.10.12", 1, 2, 1)]
    );

    // The dump: ElasticJob's snapshot lines, IPs masked.
    let report_config = text(&*reg, JobPaths::new("report").unwrap().config())
        .await
        .unwrap();
    assert_eq!(
        ops.dump("report").await.unwrap(),
        format!(
            "/report/sharding | \n/report/sharding/0 | \n/report/sharding/0/instance | ip1@-@4021\n\
             /report/servers | \n/report/servers/ip1 | ENABLED\n/report/config | {report_config}\n"
        )
    );
    assert_eq!(
        ops.dump("nope").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );

    // The configuration reads, and an update writes only keys ElasticJob 3.0.4 reads.
    let read = ops.config("settle").await.unwrap();
    assert_eq!(read.yaml, ELASTICJOB_304_CONFIG);
    assert_eq!(read.config.sharding_item_parameters.len(), 3);
    let mut new = read.config.clone();
    new.description = "now described".into();
    ops.update_config("settle", &new, read.version)
        .await
        .unwrap();
    let written = text(&*reg, JobPaths::new("settle").unwrap().config())
        .await
        .unwrap();
    // CPU is the default, which every version assumes for a missing key: left out.
    assert!(!written.contains("jobExecutor"), "{written}");
    assert!(!written.contains("timeZone"), "{written}");
    assert!(written.contains("description: now described"), "{written}");
}

/// Every write is the node and value ElasticJob 3.0.4's lifecycle API writes.
pub async fn operations_write_what_elasticjob_writes(backend: &dyn Backend) {
    let reg = backend.client("ns").await;
    let session = backend.client("ns").await;
    elasticjob_namespace(&*reg, &*session).await;
    let ops = Ops::new(&*reg);
    let settle = JobPaths::new("settle").unwrap();
    let a = InstanceId::new("192.168.10.11@-@4021").unwrap();
    let b = InstanceId::new("192.168.10.12@-@5307").unwrap();

    // Trigger: one empty `trigger/{id}` per instance; with a parameter, the parameter.
    let triggered = ops.trigger("settle", None).await.unwrap();
    assert_eq!(triggered, [a.to_string(), b.to_string()]);
    assert_eq!(text(&*reg, settle.trigger(&a)).await.as_deref(), Some(""));
    assert_eq!(text(&*reg, settle.trigger(&b)).await.as_deref(), Some(""));
    reg.delete(&settle.trigger(&a), None).await.unwrap(); // `a` took its trigger
    ops.trigger("settle", Some("backfill 2025-11-24"))
        .await
        .unwrap();
    assert_eq!(reg.children(&settle.triggers()).await.unwrap().len(), 2);
    assert_eq!(
        text(&*reg, settle.trigger(&a)).await.as_deref(),
        Some("backfill 2025-11-24")
    );
    assert_eq!(
        text(&*reg, settle.trigger(&b)).await.as_deref(),
        Some("backfill 2025-11-24")
    );
    let status = ops.status("settle", Utc::now()).await.unwrap();
    assert_eq!(status.pending_triggers.len(), 2);

    // Disable/enable: `servers/{ip}` ← DISABLED / ENABLED.
    ops.enable(&Scope::job("settle")).await.unwrap();
    assert_eq!(
        text(&*reg, settle.server("192.168.10.12").unwrap())
            .await
            .as_deref(),
        Some("ENABLED")
    );
    ops.disable(&Scope::job_on_server("settle", "192.168.10.11"))
        .await
        .unwrap();
    assert_eq!(
        text(&*reg, settle.server("192.168.10.11").unwrap())
            .await
            .as_deref(),
        Some("DISABLED")
    );
    assert_eq!(
        text(&*reg, settle.server("192.168.10.12").unwrap())
            .await
            .as_deref(),
        Some("ENABLED")
    );
    let written = ops.disable(&Scope::server("192.168.10.12")).await.unwrap();
    assert_eq!(
        written,
        [
            ("orphan".to_owned(), "192.168.10.12".to_owned()),
            ("settle".to_owned(), "192.168.10.12".to_owned())
        ]
    );
    assert_eq!(
        ops.status("settle", Utc::now()).await.unwrap().brief.status,
        JobState::Disabled
    );
    ops.enable(&Scope::server("192.168.10.11")).await.unwrap();
    for job in ["settle", "report", "audit"] {
        let path = JobPaths::new(job).unwrap().server("192.168.10.11").unwrap();
        assert_eq!(text(&*reg, path).await.as_deref(), Some("ENABLED"), "{job}");
    }

    // Items: `sharding/{n}/disabled`, empty; enable deletes it.
    ops.disable_item("settle", 0).await.unwrap();
    assert_eq!(
        text(&*reg, settle.item_disabled(0)).await.as_deref(),
        Some("")
    );
    ops.enable_item("settle", 2).await.unwrap();
    assert_eq!(text(&*reg, settle.item_disabled(2)).await, None);
    ops.enable_item("settle", 2).await.unwrap(); // already enabled: fine
    let states: Vec<ItemState> = ops
        .status("settle", Utc::now())
        .await
        .unwrap()
        .items
        .iter()
        .map(|i| i.status)
        .collect();
    assert_eq!(
        states,
        [ItemState::Disabled, ItemState::Running, ItemState::Pending]
    );
    // An item of a job not sharded yet: its parents are created.
    ops.disable_item("audit", 2).await.unwrap();
    assert_eq!(
        text(&*reg, JobPaths::new("audit").unwrap().item_disabled(2))
            .await
            .as_deref(),
        Some("")
    );

    // Re-shard: `leader/sharding/necessary`, empty.
    ops.reshard("settle").await.unwrap();
    assert_eq!(
        text(&*reg, settle.sharding_necessary()).await.as_deref(),
        Some("")
    );
    ops.reshard("settle").await.unwrap();
    assert!(
        ops.status("settle", Utc::now())
            .await
            .unwrap()
            .reshard_pending
    );

    // Shutdown: the instance nodes go (even though another session owns them).
    let down = ops
        .shutdown(&Scope::job_on_server("settle", "192.168.10.12"))
        .await
        .unwrap();
    assert_eq!(down.instances, [("settle".to_owned(), b.to_string())]);
    assert_eq!(
        reg.children(&settle.instances()).await.unwrap(),
        [a.to_string()]
    );
    assert!(down.servers.is_empty());
    // Remove: shutdown, then the server nodes.
    let removed = ops.remove(&Scope::server("192.168.10.11")).await.unwrap();
    let jobs: Vec<&str> = removed.instances.iter().map(|(j, _)| j.as_str()).collect();
    assert_eq!(jobs, ["audit", "settle"]);
    let servers: Vec<&str> = removed.servers.iter().map(|(j, _)| j.as_str()).collect();
    assert_eq!(servers, ["audit", "report", "settle"]);
    assert_eq!(
        reg.children(&settle.servers()).await.unwrap(),
        ["192.168.10.12"]
    );
    assert_eq!(
        ops.status("settle", Utc::now()).await.unwrap().brief.status,
        JobState::Crashed
    );
    let err = ops.shutdown(&Scope::job("settle")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");

    // Remove a job: its subtree goes.
    ops.remove_job("report").await.unwrap();
    assert!(reg.get(&p("/report")).await.unwrap().is_none());
    let names: Vec<String> = ops
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.name)
        .collect();
    assert_eq!(names, ["audit", "orphan", "settle"]);
}

/// A configuration update applies only over the version it was read at, and only valid.
pub async fn config_update_is_compare_and_set(backend: &dyn Backend) {
    let reg = backend.client("ns").await;
    let session = backend.client("ns").await;
    shardjob_cluster(&*reg, &*session).await;
    let ops = Ops::new(&*reg);
    let read = ops.config("settle").await.unwrap();
    assert_eq!(read.config.sharding_total_count, 4);

    let mut new = read.config.clone();
    new.sharding_total_count = 6;
    let changes = shardjob_ops::config_changes(&read.config, &new);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].key, "shardingTotalCount");
    let version = ops
        .update_config("settle", &new, read.version)
        .await
        .unwrap();
    assert_ne!(version, read.version);
    assert_eq!(ops.config("settle").await.unwrap().config, new);

    // A second operator who read before the first wrote: refused, nothing written.
    let mut stale = read.config.clone();
    stale.description = "clobber".into();
    let before = snapshot(&*reg).await;
    let err = ops
        .update_config("settle", &stale, read.version)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("changed by someone else"), "{err}");
    // Invalid: every problem named.
    let yaml = "jobName: settle\nshardingTotalCount: 0\ncron: every minute\nfailover: true\nmonitorExecution: false\nshardingTotalCont: 3\n";
    let err = ops
        .update_config_yaml("settle", yaml, version)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput);
    let message = err.to_string();
    for key in [
        "shardingTotalCount",
        "cron",
        "failover",
        "shardingTotalCont",
    ] {
        assert!(message.contains(key), "{key} not named in: {message}");
    }
    let err = ops
        .update_config_yaml("settle", "jobName: other\nshardingTotalCount: 2\n", version)
        .await
        .unwrap_err();
    assert!(matches!(err, OpsError::JobNameMismatch { .. }), "{err}");
    assert_eq!(snapshot(&*reg).await, before);
    // From a file, valid: planned (nothing written), then applied.
    let yaml = "jobName: settle\nshardingTotalCount: 2\ncron: 0 * * * * ?\n";
    let plan = ops.plan_config("settle", yaml).await.unwrap();
    assert_eq!(plan.current.version, version);
    let keys: Vec<&str> = plan.changes.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["cron", "description", "shardingTotalCount"]);
    assert_eq!(snapshot(&*reg).await, before);
    let err = ops
        .plan_config("settle", "jobName: settle\n")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    ops.update_config("settle", &plan.new, plan.current.version)
        .await
        .unwrap();
    assert_eq!(
        ops.config("settle")
            .await
            .unwrap()
            .config
            .sharding_total_count,
        2
    );
}

/// Unknown jobs, servers and items, bad names: a clear error of the right kind, no write.
pub async fn bad_input_writes_nothing(backend: &dyn Backend) {
    let reg = backend.client("ns").await;
    let session = backend.client("ns").await;
    shardjob_cluster(&*reg, &*session).await;
    // A job whose instances are all gone: nothing to trigger, no server to disable.
    let idle = JobPaths::new("idle").unwrap();
    persistent(&*reg, idle.config(), &JobConfig::new("idle", 1).to_yaml()).await;
    let ops = Ops::new(&*reg);
    let before = snapshot(&*reg).await;
    let now = Utc::now();

    let cases: Vec<(&str, OpsError, ErrorKind)> = vec![
        (
            "status of unknown job",
            ops.status("nope", now).await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "config of unknown job",
            ops.config("nope").await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "trigger unknown job",
            ops.trigger("nope", None).await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "trigger job without instance",
            ops.trigger("idle", None).await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "disable job without server",
            ops.disable(&Scope::job("idle")).await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "disable item out of range",
            ops.disable_item("settle", 4).await.unwrap_err(),
            ErrorKind::BadInput,
        ),
        (
            "enable item out of range",
            ops.enable_item("settle", 99).await.unwrap_err(),
            ErrorKind::BadInput,
        ),
        (
            "disable item of unknown job",
            ops.disable_item("nope", 0).await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "disable unknown server of job",
            ops.disable(&Scope::job_on_server("settle", "10.9.9.9"))
                .await
                .unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "enable unknown server",
            ops.enable(&Scope::server("10.9.9.9")).await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "shutdown unknown server",
            ops.shutdown(&Scope::server("10.9.9.9")).await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "remove unknown server",
            ops.remove(&Scope::job_on_server("settle", "10.9.9.9"))
                .await
                .unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "server jobs of unknown server",
            ops.server_jobs("10.9.9.9").await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "job name with a slash",
            ops.status("a/b", now).await.unwrap_err(),
            ErrorKind::BadInput,
        ),
        (
            "server with a slash",
            ops.disable(&Scope::server("1.2/3")).await.unwrap_err(),
            ErrorKind::BadInput,
        ),
        (
            "no scope",
            Scope::from_parts(None, None).unwrap_err(),
            ErrorKind::BadInput,
        ),
        (
            "reshard unknown job",
            ops.reshard("nope").await.unwrap_err(),
            ErrorKind::NotFound,
        ),
        (
            "remove unknown job",
            ops.remove_job("nope").await.unwrap_err(),
            ErrorKind::NotFound,
        ),
    ];
    for (what, err, kind) in &cases {
        assert_eq!(err.kind(), *kind, "{what}: {err}");
        assert!(!err.to_string().is_empty());
    }
    assert!(
        cases[5].1.to_string().contains("items are 0..4"),
        "{}",
        cases[5].1
    );
    assert_eq!(
        snapshot(&*reg).await,
        before,
        "a failed call wrote something"
    );
}

/// A [`shardjob_ops::NamespaceView`] fed by one watch of the root holds what the registry
/// holds: after its first snapshot, and after operations applied through another client, its
/// lists, job statuses and servers are what [`Ops`] reads from the registry.
pub async fn live_view_follows_the_registry(backend: &dyn Backend) {
    use shardjob_core::registry::RegistryEvent;
    use shardjob_ops::NamespaceView;
    let reg = backend.client("view").await;
    let session = backend.client("view").await;
    let viewer = backend.client("view").await;
    elasticjob_namespace(&*reg, &*session).await;
    let ops = Ops::new(&*reg);

    let mut stream = viewer.watch(&NodePath::root()).await.unwrap();
    let mut view = NamespaceView::new();
    view.start_reload();
    let trees = Ops::new(&*viewer).snapshot().await.unwrap();
    let changed = view.finish_reload(trees);
    assert!(
        changed.contains("settle") && changed.contains("stray"),
        "{changed:?}"
    );

    let now = Utc::now();
    let same = |view: &mut NamespaceView,
                jobs: &[shardjob_ops::JobBrief],
                servers: &[shardjob_ops::ServerBrief],
                settle: &shardjob_ops::JobStatus| {
        view.jobs() == jobs
            && view.servers() == servers
            && view.status("settle", now).as_ref() == Some(settle)
    };
    let reads = || async {
        (
            ops.jobs().await.unwrap(),
            ops.servers().await.unwrap(),
            ops.status("settle", now).await.unwrap(),
        )
    };
    let (jobs, servers, settle) = reads().await;
    assert!(same(&mut view, &jobs, &servers, &settle));

    // Operations through another client: the view follows by its events alone.
    ops.disable_item("settle", 0).await.unwrap();
    ops.enable_item("settle", 2).await.unwrap();
    ops.disable(&Scope::job_on_server("settle", "192.168.10.11"))
        .await
        .unwrap();
    ops.trigger("settle", Some("p")).await.unwrap();
    ops.remove_job("report").await.unwrap();
    ops.reshard("orphan").await.unwrap();
    let (jobs, servers, settle) = reads().await;
    assert_eq!(settle.items[0].status, ItemState::Disabled);
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while !same(&mut view, &jobs, &servers, &settle) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(RegistryEvent::Node(e))) => {
                view.apply(&e);
            }
            Ok(Some(RegistryEvent::Session(_))) => {}
            Ok(None) => panic!("the watch ended"),
            Err(_) => panic!(
                "the view did not follow within 60 s: view {:?}, registry {jobs:?}",
                view.jobs()
            ),
        }
    }
    assert!(
        view.dump("settle")
            .unwrap()
            .contains("/settle/sharding/0/disabled | \n")
    );
    assert!(view.job("report").is_none());
}

/// The last fire done by the items' execution records, as a running cluster writes them: a
/// record as its re-shard created it (where the item's schedule starts) names no fire, on a
/// whole second or not; once a run was claimed its `done` shows, and a completed fire after it.
/// The live view says the same as the reads.
pub async fn fires_done_from_the_records(backend: &dyn Backend) {
    use shardjob_core::registry::{RegistryEvent, Version};
    use shardjob_ops::NamespaceView;
    let reg = backend.client("done").await;
    let viewer = backend.client("done").await;
    let job = JobPaths::new("tick").unwrap();
    let a = InstanceId::new("10.0.0.1@-@101").unwrap();
    let config = JobConfig::new("tick", 2).with_cron(CronExpr::parse("0 * * * * ?").unwrap());
    // The starts a leader's clock gave: one on a whole second, one not.
    let starts = [1_764_050_400_000_i64, 1_764_050_401_234];
    let mut ops = vec![
        TxnOp::create(job.root().clone(), "SIMPLE"),
        TxnOp::create(job.config(), config.to_yaml()),
        TxnOp::create(job.sharding(), ""),
    ];
    for (item, start) in (0..).zip(starts) {
        let record = ItemRecord {
            done: Some(start),
            run: None,
        };
        ops.push(TxnOp::create(job.item(item), ""));
        ops.push(TxnOp::create(job.item_instance(item), a.as_str()));
        ops.push(TxnOp::create(job.item_execution(item), record.to_bytes()));
    }
    reg.transact(ops).await.unwrap();

    let mut stream = viewer.watch(&NodePath::root()).await.unwrap();
    let mut view = NamespaceView::new();
    view.start_reload();
    view.finish_reload(Ops::new(&*viewer).snapshot().await.unwrap());
    let ops = Ops::new(&*reg);
    let now = Utc::now();
    // The view follows by its events until it says what a fresh read says.
    let mut follow = async |view: &mut NamespaceView| {
        let status = ops.status("tick", now).await.unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while view.status("tick", now).as_ref() != Some(&status) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, stream.next()).await {
                Ok(Some(RegistryEvent::Node(e))) => {
                    view.apply(&e);
                }
                Ok(Some(RegistryEvent::Session(_))) => {}
                Ok(None) => panic!("the watch ended"),
                Err(_) => panic!("the view did not follow within 60 s: {status:?}"),
            }
        }
        let line = view.line("tick", now).unwrap();
        (status, (line.last_done_ms, line.never_done))
    };

    // As created: no fire done, proven.
    let (status, line) = follow(&mut view).await;
    for item in &status.items {
        assert_eq!(
            (item.last_done_ms, item.never_done),
            (None, true),
            "{item:?}"
        );
    }
    assert_eq!(line, (None, true));

    // Item 0's run of the next minute's fire is claimed: its record is rewritten, and its
    // done (still the start) shows as it is; "never" is no longer proven.
    let fire = 1_764_050_460_000;
    let path = job.item_execution(0);
    let version: Version = reg.get(&path).await.unwrap().unwrap().stat.version;
    let claimed = ItemRecord {
        done: Some(starts[0]),
        run: Some(RunRecord {
            fire,
            kind: RunKind::Scheduled,
            instance: a.clone(),
        }),
    };
    let version = reg
        .set(&path, claimed.to_bytes(), Some(version))
        .await
        .unwrap()
        .version;
    let (status, line) = follow(&mut view).await;
    assert_eq!(
        (status.items[0].last_done_ms, status.items[0].never_done),
        (Some(starts[0]), false)
    );
    assert_eq!(
        (status.items[1].last_done_ms, status.items[1].never_done),
        (None, true)
    );
    assert_eq!(line, (Some(starts[0]), false));

    // Its end is recorded: the fire is done.
    let ended = ItemRecord {
        done: Some(fire),
        run: None,
    };
    reg.set(&path, ended.to_bytes(), Some(version))
        .await
        .unwrap();
    let (status, line) = follow(&mut view).await;
    assert_eq!(status.items[0].last_done_ms, Some(fire));
    assert!(!status.items[0].never_done);
    assert_eq!(line, (Some(fire), false));
}

/// Expands to one `#[tokio::test]` per check, each with a backend from `$make(test_name)`.
#[macro_export]
macro_rules! ops_tests {
    ($make:expr) => {
        $crate::ops_tests!(@each $make;
            reads_a_shardjob_cluster, reads_an_elasticjob_namespace,
            operations_write_what_elasticjob_writes, config_update_is_compare_and_set,
            bad_input_writes_nothing, live_view_follows_the_registry,
            fires_done_from_the_records);
    };
    (@each $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let backend = $make(stringify!($name)).await;
                suite::$name(&backend).await;
            }
        )*
    };
}

/// Writes `n` jobs of `items` items each, as a running cluster of two instances leaves them,
/// one transaction per job (the benchmark's namespace).
pub async fn build_large_namespace(
    reg: &dyn Registry,
    session: &dyn Registry,
    n: usize,
    items: u32,
) {
    let a = InstanceId::new("10.1.0.1@-@1").unwrap();
    let b = InstanceId::new("10.1.0.2@-@2").unwrap();
    for j in 0..n {
        let name = format!("job-{j:05}");
        let job = JobPaths::new(&name).unwrap();
        let config =
            JobConfig::new(name.as_str(), items).with_cron(CronExpr::parse("0 * * * * ?").unwrap());
        let mut ops = vec![
            TxnOp::create(job.root().clone(), "SIMPLE"),
            TxnOp::create(job.config(), config.to_yaml()),
            TxnOp::create(job.instances(), ""),
            TxnOp::create(job.servers(), ""),
            TxnOp::create(job.server_of(&a), "ENABLED"),
            TxnOp::create(job.server_of(&b), "ENABLED"),
            TxnOp::create(job.sharding(), ""),
            TxnOp::create(job.leader(), ""),
            TxnOp::create(job.leader_election(), ""),
            TxnOp::create(job.leader_sharding(), ""),
        ];
        for item in 0..items {
            let owner = if item % 2 == 0 { &a } else { &b };
            let record = ItemRecord {
                done: Some(1_764_050_400_000),
                run: None,
            };
            ops.push(TxnOp::create(job.item(item), ""));
            ops.push(TxnOp::create(job.item_instance(item), owner.as_str()));
            ops.push(TxnOp::create(job.item_execution(item), record.to_bytes()));
        }
        reg.transact(ops).await.unwrap();
        session
            .transact(vec![
                TxnOp::create_ephemeral(job.instance(&a), instance_value(&a)),
                TxnOp::create_ephemeral(job.instance(&b), instance_value(&b)),
                TxnOp::create_ephemeral(job.leader_instance(), a.as_str()),
            ])
            .await
            .unwrap();
    }
}

/// With the registry out of reach, every call fails as [`ErrorKind::Unreachable`] within its
/// deadline, and says so.
pub async fn calls_fail_as_unreachable(reg: &dyn Registry) {
    let ops = Ops::new(reg);
    let started = std::time::Instant::now();
    let errors = vec![
        ops.jobs().await.unwrap_err(),
        ops.servers().await.unwrap_err(),
        ops.status("settle", Utc::now()).await.unwrap_err(),
        ops.config("settle").await.unwrap_err(),
        ops.trigger("settle", None).await.unwrap_err(),
        ops.disable_item("settle", 0).await.unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
        assert!(err.to_string().contains("registry unreachable"), "{err}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}
