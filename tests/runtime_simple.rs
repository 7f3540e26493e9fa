//! The real tokio driver over the in-memory registry, on real (short) time: Simple jobs on one
//! and two instances, triggers, graceful hand-over, run-time add and remove.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardjob::core::machine::ItemOutcome;
use shardjob::core::machine::record::RunKind;
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::{RunEvent, Scheduler, SchedulerHandle, SchedulerState};

/// One item run as the job body saw it.
#[derive(Debug, Clone)]
struct Seen {
    instance: String,
    item: u32,
    fire: DateTime<Utc>,
    kind: RunKind,
    token: u64,
    started: DateTime<Utc>,
    parameter: String,
    sharding_parameter: Option<String>,
}

#[derive(Clone, Default)]
struct Recorder {
    instance: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    work: Duration,
}

#[async_trait]
impl SimpleJob for Recorder {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.seen.lock().unwrap().push(Seen {
            instance: self.instance.clone(),
            item: ctx.sharding_item,
            fire: ctx.fire_time,
            kind: ctx.kind,
            token: ctx.fencing_token,
            started: Utc::now(),
            parameter: ctx.job_parameter.clone(),
            sharding_parameter: ctx.sharding_parameter.clone(),
        });
        tokio::select! {
            () = tokio::time::sleep(self.work) => Ok(()),
            _ = ctx.cancel.cancelled() => Err(JobError::Cancelled),
        }
    }

    fn job_type(&self) -> String {
        "RECORDER".to_owned()
    }
}

fn every_second(name: &str, items: u32) -> JobConfig {
    let mut config = JobConfig::new(name, items).with_cron(CronExpr::parse("* * * * * ?").unwrap());
    config.failover = true;
    config
}

fn id(n: u32) -> InstanceId {
    InstanceId::new(format!("127.0.0.{n}@-@{}", 1000 + n)).unwrap()
}

async fn start(
    server: &MemServer,
    n: u32,
    config: JobConfig,
    seen: &Arc<Mutex<Vec<Seen>>>,
) -> SchedulerHandle {
    let job = Recorder {
        instance: id(n).to_string(),
        seen: Arc::clone(seen),
        work: Duration::from_millis(100),
    };
    Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(3))))
        .instance_id(id(n))
        .options(|o| o.reshard_debounce = Duration::from_millis(50))
        .job(config, job)
        .build()
        .await
        .unwrap()
}

/// How long a test waits for what must come: generous, so that a loaded machine only makes a
/// test slower, never fails it.
const WAIT: Duration = Duration::from_secs(30);

/// Waits (up to [`WAIT`]) until `done` holds of the runs seen so far.
async fn wait_seen(seen: &Arc<Mutex<Vec<Seen>>>, what: &str, done: impl Fn(&[Seen]) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if done(&seen.lock().unwrap()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within {WAIT:?}: {:#?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Fires whose runs cover `items` items.
fn full_fires(seen: &[Seen], items: usize) -> usize {
    runs_by_fire(seen)
        .values()
        .filter(|runs| runs.len() == items)
        .count()
}

fn runs_by_fire(seen: &[Seen]) -> BTreeMap<DateTime<Utc>, Vec<Seen>> {
    let mut by: BTreeMap<DateTime<Utc>, Vec<Seen>> = BTreeMap::new();
    for s in seen.iter().filter(|s| s.kind != RunKind::Trigger) {
        by.entry(s.fire).or_default().push(s.clone());
    }
    by
}

/// The fires more than 1.2 s after `t`, once a change of the plan at `t` has settled.
fn fires_after(
    by_fire: &BTreeMap<DateTime<Utc>, Vec<Seen>>,
    t: DateTime<Utc>,
) -> Vec<(&DateTime<Utc>, &Vec<Seen>)> {
    let settled = t + chrono::Duration::milliseconds(1200);
    by_fire
        .iter()
        .filter(|(fire, _)| **fire > settled)
        .collect()
}

/// No (item, fire) ran twice; fencing tokens of an item grow with its fires.
fn assert_no_duplicates(seen: &[Seen]) {
    let mut keys = BTreeSet::new();
    for s in seen.iter().filter(|s| s.kind != RunKind::Trigger) {
        assert!(
            keys.insert((s.item, s.fire)),
            "ran twice: {s:?}\nall: {seen:#?}"
        );
    }
    let mut last: BTreeMap<u32, (DateTime<Utc>, u64)> = BTreeMap::new();
    let mut sorted: Vec<&Seen> = seen.iter().collect();
    sorted.sort_by_key(|s| (s.started, s.item));
    for s in sorted {
        if let Some((_, token)) = last.get(&s.item) {
            assert!(s.token > *token, "token did not grow: {s:?}");
        }
        last.insert(s.item, (s.fire, s.token));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_runs_every_item_on_time() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut config = every_second("simple-one", 3);
    config.sharding_item_parameters = [(0, "a".to_owned()), (2, "c".to_owned())].into();
    config.job_parameter = "p".to_owned();
    let handle = start(&server, 1, config, &seen).await;
    let mut events = handle.subscribe();
    wait_seen(&seen, "two whole fires", |s| full_fires(s, 3) >= 2).await;
    handle.shutdown().await.unwrap();
    assert_eq!(handle.state(), SchedulerState::Stopped);

    let seen = seen.lock().unwrap().clone();
    let by_fire = runs_by_fire(&seen);
    // At least two whole fires ran in 3.3 s (the first may be partial: the job loads first).
    let full: Vec<_> = by_fire.values().filter(|runs| runs.len() == 3).collect();
    assert!(full.len() >= 2, "{by_fire:#?}");
    for runs in &full {
        let items: BTreeSet<u32> = runs.iter().map(|s| s.item).collect();
        assert_eq!(items, BTreeSet::from([0, 1, 2]));
        for s in runs.iter() {
            let late = (s.started - s.fire).num_milliseconds();
            assert!(
                (0..900).contains(&late),
                "started {late} ms after its fire: {s:?}"
            );
            assert_eq!(s.kind, RunKind::Scheduled);
            assert!(s.token > 0);
            assert_eq!(s.parameter, "p");
        }
    }
    let params: BTreeMap<u32, Option<String>> = seen
        .iter()
        .map(|s| (s.item, s.sharding_parameter.clone()))
        .collect();
    assert_eq!(params[&0].as_deref(), Some("a"));
    assert_eq!(params[&1], None);
    assert_eq!(params[&2].as_deref(), Some("c"));
    assert_no_duplicates(&seen);

    // Subscribers saw the items finish.
    let mut finished = 0;
    while let Ok(ev) = events.try_recv() {
        if let RunEvent::ItemFinished { outcome, .. } = ev {
            assert_eq!(outcome, ItemOutcome::Succeeded);
            finished += 1;
        }
    }
    assert!(finished >= 6, "{finished}");
    // The instance left: its ephemeral and server nodes are gone.
    let paths: Vec<String> = server.dump().iter().map(|n| n.path.to_string()).collect();
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with("/simple-one/instances/")),
        "{paths:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_with_parameter_runs_at_once() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    // No cron: runs only when triggered.
    let config = JobConfig::new("triggered", 2);
    let handle = start(&server, 1, config, &seen).await;
    // The job must be loaded and registered before its items are assigned; a trigger sent
    // earlier waits in the queue.
    handle
        .trigger("triggered", Some("manual".into()))
        .await
        .unwrap();
    let err = handle.trigger("no-such-job", None).await.unwrap_err();
    assert!(err.to_string().contains("no-such-job"), "{err}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while seen.lock().unwrap().len() < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    for s in &seen {
        assert_eq!(s.kind, RunKind::Trigger);
        assert_eq!(s.parameter, "manual");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_items_and_shutdown_hands_over() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let config = every_second("shared", 4);
    let a = start(&server, 1, config.clone(), &seen).await;
    let b = start(&server, 2, config, &seen).await;
    wait_seen(&seen, "a fire shared by both", |s| {
        runs_by_fire(s).values().any(|runs| {
            let who: BTreeSet<&str> = runs.iter().map(|s| s.instance.as_str()).collect();
            runs.len() == 4 && who.len() == 2
        })
    })
    .await;

    // Both ran items; each fire's items ran once, spread over both.
    let shared_fires = {
        let seen = seen.lock().unwrap();
        let by_fire = runs_by_fire(&seen);
        by_fire
            .values()
            .filter(|runs| {
                let who: BTreeSet<&str> = runs.iter().map(|s| s.instance.as_str()).collect();
                runs.len() == 4 && who.len() == 2
            })
            .count()
    };
    assert!(shared_fires >= 1, "{:#?}", seen.lock().unwrap());

    // B leaves gracefully; A takes every item from the next fires on, with no session timeout
    // to wait for (3 s here).
    let left = Utc::now();
    b.shutdown().await.unwrap();
    wait_seen(&seen, "two whole fires on A after B left", |s| {
        fires_after(&runs_by_fire(s), left)
            .iter()
            .filter(|(_, runs)| runs.len() == 4)
            .count()
            >= 2
    })
    .await;
    a.shutdown().await.unwrap();

    let seen = seen.lock().unwrap().clone();
    assert_no_duplicates(&seen);
    let by_fire = runs_by_fire(&seen);
    let after = fires_after(&by_fire, left);
    assert!(!after.is_empty(), "{by_fire:#?}");
    for (fire, runs) in after {
        let items: BTreeSet<u32> = runs.iter().map(|s| s.item).collect();
        assert_eq!(
            items,
            BTreeSet::from([0, 1, 2, 3]),
            "fire {fire}: {runs:#?}"
        );
        assert!(runs.iter().all(|s| s.instance == id(1).to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_added_and_removed_at_run_time() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handle = start(&server, 1, JobConfig::new("idle", 1), &seen).await;
    let job = Recorder {
        instance: "late".into(),
        seen: Arc::clone(&seen),
        work: Duration::from_millis(10),
    };
    handle
        .add_job(every_second("added", 2), job.clone())
        .await
        .unwrap();
    let dup = handle.add_job(every_second("added", 2), job).await;
    assert!(dup.is_err());
    wait_seen(&seen, "two runs of the added job", |s| s.len() >= 2).await;
    let before = seen.lock().unwrap().len();
    assert!(before >= 2, "{before}");
    handle.remove_job("added").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = seen.lock().unwrap().len();
    // At most a fire that was already being claimed when the removal came.
    assert!(after <= before + 2, "{before} -> {after}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(seen.lock().unwrap().len(), after);
    handle.shutdown().await.unwrap();
}

/// The items a job's runs started, with when.
type Started = Arc<Mutex<Vec<(u32, DateTime<Utc>)>>>;

/// A job whose runs record their item and then wait until the test opens the gate.
#[derive(Clone)]
struct Gated {
    items: Started,
    open: tokio::sync::watch::Receiver<bool>,
}

#[async_trait]
impl SimpleJob for Gated {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.items
            .lock()
            .unwrap()
            .push((ctx.sharding_item, Utc::now()));
        let mut open = self.open.clone();
        tokio::select! {
            opened = open.wait_for(|o| *o) => opened.map(|_| ()).map_err(|_| JobError::Cancelled),
            _ = ctx.cancel.cancelled() => Err(JobError::Cancelled),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_job_is_added_again_with_a_new_configuration_once_it_has_left() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handle = start(&server, 1, JobConfig::new("idle", 1), &seen).await;
    let (gate, open) = tokio::sync::watch::channel(false);
    let items = Arc::new(Mutex::new(Vec::new()));
    let job = Gated {
        items: Arc::clone(&items),
        open,
    };
    handle
        .add_job(every_second("reload", 2), job.clone())
        .await
        .unwrap();
    // Runs start and hold until the gate opens; then the job is removed.
    let wait = tokio::time::Instant::now() + WAIT;
    while items.lock().unwrap().is_empty() && tokio::time::Instant::now() < wait {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!items.lock().unwrap().is_empty(), "no run started");
    let removing = {
        let handle = handle.clone();
        tokio::spawn(async move { handle.remove_job("reload").await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Its runs hold: the job is still leaving, and says so.
    let mut bigger = every_second("reload", 3);
    bigger.overwrite = true;
    let early = handle.add_job(bigger.clone(), job.clone()).await;
    assert!(
        early
            .as_ref()
            .is_err_and(|e| e.to_string().contains("still leaving")),
        "{early:?}"
    );
    assert!(
        !removing.is_finished(),
        "remove_job returned while runs held"
    );
    gate.send_replace(true);
    let removed = tokio::time::timeout(WAIT, removing).await;
    assert!(matches!(removed, Ok(Ok(Ok(())))), "{removed:?}");
    // Gone: it is added again at once, with three items.
    let left_at = Utc::now();
    handle.add_job(bigger, job).await.unwrap();
    let items_after = || -> BTreeSet<u32> {
        items
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, at)| *at > left_at)
            .map(|(item, _)| *item)
            .collect()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while items_after().len() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(items_after(), BTreeSet::from([0, 1, 2]));
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_instance_items_fail_over() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let config = every_second("crash", 4);
    let mut handles = Vec::new();
    let mut clients = Vec::new();
    for n in 1..=2 {
        let client = Arc::new(server.connect(Duration::from_secs(2)));
        let job = Recorder {
            instance: id(n).to_string(),
            seen: Arc::clone(&seen),
            work: Duration::from_millis(700),
        };
        let handle = Scheduler::builder()
            .registry(client.clone())
            .instance_id(id(n))
            .options(|o| o.reshard_debounce = Duration::from_millis(50))
            .job(config.clone(), job)
            .build()
            .await
            .unwrap();
        handles.push(handle);
        clients.push(client);
    }
    // Wait until instance 2 is in the middle of a run, then kill its client: no goodbye.
    let deadline = tokio::time::Instant::now() + WAIT;
    let crashed_fire = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "instance 2 never ran"
        );
        let now = Utc::now();
        let running = seen.lock().unwrap().iter().rev().find_map(|s| {
            let age = (now - s.started).num_milliseconds();
            (s.instance == id(2).to_string() && (100..400).contains(&age)).then_some(s.fire)
        });
        if let Some(fire) = running {
            break fire;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    server.kill(clients[1].session_id().unwrap());
    // Instance 2's driver notices that its client is gone and stops.
    let err = tokio::time::timeout(WAIT, handles[1].wait())
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("registry"), "{err}");
    // Session timeout 2 s, then failover and re-sharding: instance 1 runs the crashed fire's
    // items again, then whole fires alone.
    let one = id(1).to_string();
    wait_seen(
        &seen,
        "the failover and two whole fires on instance 1",
        |s| {
            let crashed: BTreeSet<u32> = s
                .iter()
                .filter(|r| r.instance == id(2).to_string() && r.fire == crashed_fire)
                .map(|r| r.item)
                .collect();
            let failed_over = crashed.iter().all(|item| {
                s.iter().any(|r| {
                    r.instance == one
                        && r.item == *item
                        && r.fire == crashed_fire
                        && r.kind == RunKind::Failover
                })
            });
            let alone = runs_by_fire(s)
                .iter()
                .filter(|(f, runs)| {
                    **f > crashed_fire && runs.len() == 4 && runs.iter().all(|r| r.instance == one)
                })
                .count();
            failed_over && alone >= 2
        },
    )
    .await;
    // The last whole fire is older than 900 ms by now (runs last 700 ms).
    tokio::time::sleep(Duration::from_millis(900)).await;
    let end = Utc::now();
    handles[0].shutdown().await.unwrap();

    let seen = seen.lock().unwrap().clone();
    let crashed: BTreeSet<u32> = seen
        .iter()
        .filter(|s| s.instance == id(2).to_string() && s.fire == crashed_fire)
        .map(|s| s.item)
        .collect();
    assert!(!crashed.is_empty());
    // Every item the crash cut short ran again on instance 1, as a failover of that fire.
    for item in &crashed {
        assert!(
            seen.iter().any(|s| s.instance == id(1).to_string()
                && s.item == *item
                && s.fire == crashed_fire
                && s.kind == RunKind::Failover),
            "item {item} of {crashed_fire} was not failed over: {seen:#?}"
        );
    }
    // The last fires ran every item on instance 1.
    let by_fire = runs_by_fire(&seen);
    let (fire, runs) = by_fire
        .iter()
        .rev()
        .find(|(f, _)| **f < end - chrono::Duration::milliseconds(900))
        .unwrap();
    let items: BTreeSet<u32> = runs.iter().map(|s| s.item).collect();
    assert_eq!(items, BTreeSet::from([0, 1, 2, 3]), "{fire}: {runs:#?}");
    assert!(runs.iter().all(|s| s.instance == id(1).to_string()));
}

/// Fails item 0, succeeds otherwise.
struct FailFirst;

#[async_trait]
impl SimpleJob for FailFirst {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        if ctx.sharding_item == 0 {
            Err(JobError::failed("item 0 always fails"))
        } else {
            Ok(())
        }
    }
}

async fn outcomes_with(handler: &str) -> BTreeMap<u32, ItemOutcome> {
    use shardjob::core::config::ExecutorType;
    let server = MemServer::default();
    let mut config = JobConfig::new("handled", 2);
    config.job_executor_thread_pool_size_provider_type = ExecutorType::SingleThread;
    config.job_error_handler_type = handler.parse().unwrap();
    let handle = Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(3))))
        .instance_id(id(1))
        .job(config, FailFirst)
        .build()
        .await
        .unwrap();
    let outcomes = trigger_and_collect(&handle, "handled", 2).await;
    handle.shutdown().await.unwrap();
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_handlers() {
    // LOG and IGNORE: the failure is reported, the other item runs.
    for handler in ["LOG", "IGNORE"] {
        let outcomes = outcomes_with(handler).await;
        assert!(matches!(&outcomes[&0], ItemOutcome::Failed(m) if m.contains("always fails")));
        assert_eq!(outcomes[&1], ItemOutcome::Succeeded, "{handler}");
    }
    // THROW (one item at a time): the failure ends the run; item 1 does not start.
    let outcomes = outcomes_with("THROW").await;
    assert!(matches!(&outcomes[&0], ItemOutcome::Failed(m) if m.contains("always fails")));
    assert!(
        matches!(&outcomes[&1], ItemOutcome::Failed(m) if m.contains("THROW")),
        "{outcomes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_handle_leaves_gracefully() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handle = start(&server, 1, every_second("dropped", 1), &seen).await;
    let id = handle.instance_id().to_string();
    let alive = |server: &MemServer| {
        server
            .dump()
            .iter()
            .any(|n| n.path.to_string() == format!("/dropped/instances/{id}"))
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !alive(&server) {
        assert!(tokio::time::Instant::now() < deadline, "never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(handle);
    let deadline = tokio::time::Instant::now() + WAIT;
    while alive(&server) {
        assert!(tokio::time::Instant::now() < deadline, "still registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Panics on its first run of each item, succeeds afterwards.
#[derive(Default)]
struct PanicsOnce {
    runs: Mutex<BTreeSet<u32>>,
}

#[async_trait]
impl SimpleJob for PanicsOnce {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        let first = self.runs.lock().unwrap().insert(ctx.sharding_item);
        if first {
            panic!("boom on item {}", ctx.sharding_item);
        }
        Ok(())
    }
}

/// Triggers the job and returns each item's outcome.
async fn trigger_and_collect(
    handle: &SchedulerHandle,
    job: &str,
    items: usize,
) -> BTreeMap<u32, ItemOutcome> {
    let mut events = handle.subscribe();
    handle.trigger(job, None).await.unwrap();
    let mut outcomes = BTreeMap::new();
    while outcomes.len() < items {
        let ev = tokio::time::timeout(WAIT, events.recv())
            .await
            .unwrap()
            .unwrap();
        if let RunEvent::ItemFinished { run, outcome, .. } = ev {
            outcomes.insert(run.item, outcome);
        }
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_body_fails_its_item_and_the_job_goes_on() {
    // One item (run within the execution's own task) and two items (a task each).
    for items in [1u32, 2] {
        let server = MemServer::default();
        let handle = Scheduler::builder()
            .registry(Arc::new(server.connect(Duration::from_secs(3))))
            .instance_id(id(1))
            .job(JobConfig::new("panics", items), PanicsOnce::default())
            .build()
            .await
            .unwrap();
        let first = trigger_and_collect(&handle, "panics", items as usize).await;
        for item in 0..items {
            assert!(
                matches!(&first[&item], ItemOutcome::Failed(m) if m.contains("panicked") && m.contains("boom")),
                "{items} items: {first:?}"
            );
        }
        let second = trigger_and_collect(&handle, "panics", items as usize).await;
        assert!(
            second.values().all(|o| *o == ItemOutcome::Succeeded),
            "{items} items: {second:?}"
        );
        handle.shutdown().await.unwrap();
    }
}

/// Runs for a minute whatever it is told.
struct Deaf;

#[async_trait]
impl SimpleJob for Deaf {
    async fn execute(&self, _ctx: &ShardingContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_that_ignores_cancellation_is_stopped_after_the_cancel_timeout() {
    for items in [1u32, 2] {
        let server = MemServer::default();
        let handle = Scheduler::builder()
            .registry(Arc::new(server.connect(Duration::from_secs(3))))
            .instance_id(id(1))
            .options(|o| o.shutdown_grace = Duration::from_millis(200))
            .cancel_timeout(Duration::from_millis(300))
            .job(JobConfig::new("deaf", items), Deaf)
            .build()
            .await
            .unwrap();
        let mut events = handle.subscribe();
        handle.trigger("deaf", None).await.unwrap();
        let mut started = 0;
        while started < items {
            let ev = tokio::time::timeout(WAIT, events.recv())
                .await
                .unwrap()
                .unwrap();
            if matches!(ev, RunEvent::ItemStarted { .. }) {
                started += 1;
            }
        }
        let t = tokio::time::Instant::now();
        // Grace 200 ms, then the cancel timeout of 300 ms: far less than the body's minute.
        tokio::time::timeout(Duration::from_secs(10), handle.shutdown())
            .await
            .expect("shutdown waits for the deaf item no longer than its cancel timeout")
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let mut stopped = 0;
        while let Ok(ev) = events.try_recv() {
            if let RunEvent::ItemFinished { outcome, error, .. } = ev {
                assert_eq!(outcome, ItemOutcome::Cancelled);
                assert!(
                    error.is_some_and(|e| e.to_string().contains("ignored its cancellation")),
                    "{items} items"
                );
                stopped += 1;
            }
        }
        assert_eq!(stopped, items);
    }
}

/// A subscription taken on the builder sees the scheduler from its start: with the
/// in-memory registry, jobs are active before `build` returns; and it sees the first run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_on_the_builder_sees_the_start_up() {
    use shardjob::core::machine::MachineEvent;
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let builder = Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(3))))
        .instance_id(id(1))
        .job(
            every_second("early", 1),
            Recorder {
                instance: id(1).to_string(),
                seen: Arc::clone(&seen),
                work: Duration::ZERO,
            },
        );
    let mut events = builder.subscribe();
    let handle = builder.build().await.unwrap();
    let (mut active, mut finished) = (false, false);
    let deadline = tokio::time::Instant::now() + WAIT;
    while !(active && finished) {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(RunEvent::Machine(MachineEvent::JobActive { job }))) => {
                assert_eq!(job, "early");
                active = true;
            }
            Ok(Ok(RunEvent::ItemFinished { run, outcome, .. })) => {
                assert!(active, "a run before the job was active");
                assert_eq!((run.job.as_str(), run.item), ("early", 0));
                assert_eq!(outcome, ItemOutcome::Succeeded);
                finished = true;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("events: {e}"),
            Err(_) => panic!("no JobActive and ItemFinished within {WAIT:?}: {active} {finished}"),
        }
    }
    handle.shutdown().await.unwrap();
}

/// A custom strategy: every item to the candidate with the greatest id.
#[derive(Debug)]
struct ToGreatest(&'static str);

impl shardjob::core::ShardingStrategy for ToGreatest {
    fn name(&self) -> &str {
        self.0
    }

    fn shard(
        &self,
        candidates: &[InstanceId],
        _job_name: &str,
        total: u32,
    ) -> shardjob::core::Assignment {
        let top = candidates.iter().max();
        let pairs = candidates
            .iter()
            .map(|c| {
                let mine = if Some(c) == top {
                    (0..total).collect()
                } else {
                    Vec::new()
                };
                (c.clone(), mine)
            })
            .collect();
        shardjob::core::Assignment::from_pairs(pairs)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_sharding_strategy_places_the_items() {
    let server = MemServer::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut config = every_second("placed", 3);
    config.job_sharding_strategy_type = "TO_GREATEST".to_owned();
    let with_strategy = |n: u32| {
        Scheduler::builder()
            .registry(Arc::new(server.connect(Duration::from_secs(3))))
            .instance_id(id(n))
            .options(|o| o.reshard_debounce = Duration::from_millis(50))
            .strategy(ToGreatest("TO_GREATEST"))
            .job(
                config.clone(),
                Recorder {
                    instance: id(n).to_string(),
                    seen: Arc::clone(&seen),
                    work: Duration::from_millis(100),
                },
            )
    };
    let a = with_strategy(1).build().await.unwrap();
    let b = with_strategy(2).build().await.unwrap();
    let joined = Utc::now();
    wait_seen(
        &seen,
        "two whole fires after the second instance joined",
        |s| {
            fires_after(&runs_by_fire(s), joined)
                .iter()
                .filter(|(_, runs)| runs.len() == 3)
                .count()
                >= 2
        },
    )
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();

    // Once the second instance has joined, the plan gives it every item.
    let seen = seen.lock().unwrap().clone();
    assert_no_duplicates(&seen);
    let by_fire = runs_by_fire(&seen);
    let after = fires_after(&by_fire, joined);
    assert!(after.len() >= 2, "{by_fire:#?}");
    for (fire, runs) in after {
        assert_eq!(runs.len(), 3, "fire {fire}: {runs:#?}");
        assert!(
            runs.iter().all(|s| s.instance == id(2).to_string()),
            "fire {fire}: {runs:#?}"
        );
    }
}

#[tokio::test]
async fn a_strategy_must_be_registered_under_a_name_of_its_own() {
    let server = MemServer::default();
    let builder = || {
        Scheduler::builder()
            .registry(Arc::new(server.connect(Duration::from_secs(3))))
            .instance_id(id(1))
    };
    // A built-in name cannot be taken, nor one name twice.
    let err = builder()
        .strategy(ToGreatest("AVG_ALLOCATION"))
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("\"AVG_ALLOCATION\""), "{err}");
    let err = builder()
        .strategy(ToGreatest("MINE"))
        .strategy(ToGreatest("MINE"))
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("registered already"), "{err}");
    // A job that names a strategy this instance lacks does not start.
    let mut config = every_second("placed", 3);
    config.job_sharding_strategy_type = "MINE".to_owned();
    let err = builder()
        .job(config, Recorder::default())
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("MINE"), "{err}");
}
