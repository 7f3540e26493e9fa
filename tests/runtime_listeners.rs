//! Job listeners on the real tokio driver over the in-memory registry, several schedulers in
//! one process standing for several instances: `before`/`after` around each run with its
//! items, failing and panicking listeners, listener types by name, and the distribute-once
//! listener (once per fire across three instances, timeouts, disabled items).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardjob::core::config::ErrorHandlerType;
use shardjob::core::machine::record::RunKind;
use shardjob::core::machine::{ExecutionId, ItemOutcome};
use shardjob::core::registry::{CreateMode, NodePath, Registry, RegistryError};
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::listeners::{
    DistributeOnce, DistributeOnceListener, JobListener, ListenerError, ListenerHook,
    ShardingContexts,
};
use shardjob::mem::MemServer;
use shardjob::runtime::{RunEvent, RuntimeError, Scheduler, SchedulerBuilder, SchedulerHandle};

fn id(n: u32) -> InstanceId {
    InstanceId::new(format!("127.0.0.{n}@-@{}", 1000 + n)).unwrap()
}

fn every_second(name: &str, items: u32) -> JobConfig {
    JobConfig::new(name, items).with_cron(CronExpr::parse("* * * * * ?").unwrap())
}

/// One item run as the job body saw it.
#[derive(Debug, Clone)]
struct ItemRun {
    instance: String,
    item: u32,
    fire: DateTime<Utc>,
    kind: RunKind,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

/// Records its item runs; fails the items in `fail`.
#[derive(Clone, Default)]
struct Work {
    instance: String,
    runs: Arc<Mutex<Vec<ItemRun>>>,
    fail: BTreeSet<u32>,
    work: Duration,
}

#[async_trait]
impl SimpleJob for Work {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        let start = Utc::now();
        tokio::time::sleep(self.work).await;
        self.runs.lock().unwrap().push(ItemRun {
            instance: self.instance.clone(),
            item: ctx.sharding_item,
            fire: ctx.fire_time,
            kind: ctx.kind,
            start,
            end: Utc::now(),
        });
        if self.fail.contains(&ctx.sharding_item) {
            Err(JobError::failed("planned failure"))
        } else {
            Ok(())
        }
    }

    fn job_type(&self) -> String {
        "WORK".to_owned()
    }
}

/// One listener call.
#[derive(Debug, Clone)]
struct Call {
    instance: String,
    hook: ListenerHook,
    execution: ExecutionId,
    fire: DateTime<Utc>,
    kind: RunKind,
    items: Vec<u32>,
    outcomes: Option<BTreeMap<u32, ItemOutcome>>,
    at: DateTime<Utc>,
}

/// Records every call.
#[derive(Clone, Default)]
struct Recorder {
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Recorder {
    fn record(
        &self,
        hook: ListenerHook,
        ctx: &ShardingContexts,
        outcomes: Option<&BTreeMap<u32, ItemOutcome>>,
    ) {
        self.calls.lock().unwrap().push(Call {
            instance: ctx.instance_id.clone(),
            hook,
            execution: ctx.execution,
            fire: ctx.fire_time,
            kind: ctx.kind,
            items: ctx.items().collect(),
            outcomes: outcomes.cloned(),
            at: Utc::now(),
        });
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl JobListener for Recorder {
    async fn before(&self, ctx: &ShardingContexts) -> Result<(), ListenerError> {
        self.record(ListenerHook::Before, ctx, None);
        Ok(())
    }

    async fn after(
        &self,
        ctx: &ShardingContexts,
        outcomes: &BTreeMap<u32, ItemOutcome>,
    ) -> Result<(), ListenerError> {
        self.record(ListenerHook::After, ctx, Some(outcomes));
        Ok(())
    }
}

/// When a once-hook ended: (hook, round, time).
type Ended = (ListenerHook, String, DateTime<Utc>);

/// The once-hooks record into a [`Recorder`] shared by every instance; each call also marks
/// when it ended.
#[derive(Clone, Default)]
struct Once {
    calls: Recorder,
    ended: Arc<Mutex<Vec<Ended>>>,
}

#[async_trait]
impl DistributeOnceListener for Once {
    async fn before_once(&self, ctx: &ShardingContexts) -> Result<(), ListenerError> {
        self.calls.record(ListenerHook::Before, ctx, None);
        // Long enough that an item starting before the hook ends would show.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let key = round(ctx);
        self.ended
            .lock()
            .unwrap()
            .push((ListenerHook::Before, key, Utc::now()));
        Ok(())
    }

    async fn after_once(
        &self,
        ctx: &ShardingContexts,
        outcomes: &BTreeMap<u32, ItemOutcome>,
    ) -> Result<(), ListenerError> {
        self.calls.record(ListenerHook::After, ctx, Some(outcomes));
        Ok(())
    }
}

fn round(ctx: &ShardingContexts) -> String {
    if ctx.kind == RunKind::Trigger {
        "trigger".to_owned()
    } else {
        ctx.fire_time.to_rfc3339()
    }
}

fn builder(server: &MemServer, n: u32) -> SchedulerBuilder {
    Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(3))))
        .instance_id(id(n))
        .options(|o| o.reshard_debounce = Duration::from_millis(50))
}

/// The listener failures reported so far: (listener, hook, error).
fn failures(
    events: &mut tokio::sync::broadcast::Receiver<RunEvent>,
) -> Vec<(String, ListenerHook, ListenerError)> {
    failures_at(events)
        .into_iter()
        .map(|(_, l, h, e)| (l, h, e))
        .collect()
}

/// The listener failures reported so far, with the fire of their run.
fn failures_at(
    events: &mut tokio::sync::broadcast::Receiver<RunEvent>,
) -> Vec<(DateTime<Utc>, String, ListenerHook, ListenerError)> {
    let mut out = Vec::new();
    while let Ok(ev) = events.try_recv() {
        if let RunEvent::ListenerFailed {
            fire_time,
            listener,
            hook,
            error,
            ..
        } = ev
        {
            out.push((fire_time, listener, hook, error));
        }
    }
    out
}

/// Waits until every item of `job` is owned and the owners are `instances` distinct ones.
async fn wait_for_plan(server: &MemServer, job: &str, items: u32, instances: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let owners: BTreeMap<u32, String> = server
            .dump()
            .iter()
            .filter_map(|n| {
                let p = n.path.to_string();
                let rest = p.strip_prefix(&format!("/{job}/sharding/"))?;
                let item = rest.strip_suffix("/instance")?.parse().ok()?;
                Some((item, String::from_utf8_lossy(&n.data).into_owned()))
            })
            .filter(|(_, owner)| !owner.is_empty())
            .collect();
        let distinct: BTreeSet<&String> = owners.values().collect();
        if owners.len() == items as usize && distinct.len() == instances {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no plan over {instances} instances: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `f` holds, for at most `secs` seconds (tens of seconds: a loaded machine only
/// makes a test slower, never fails it).
async fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_and_after_wrap_each_run_with_its_items() {
    let server = MemServer::default();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let listener = Recorder::default();
    let mut handles = Vec::new();
    for n in 1..=2 {
        let work = Work {
            instance: id(n).to_string(),
            runs: Arc::clone(&runs),
            fail: BTreeSet::from([3]),
            work: Duration::from_millis(100),
        };
        let handle = builder(&server, n)
            .job(every_second("wrapped", 4), work)
            .listener("wrapped", listener.clone())
            .build()
            .await
            .unwrap();
        handles.push(handle);
    }
    eventually(120, "four runs with listeners, on both instances", || {
        let afters: Vec<Call> = listener
            .calls()
            .into_iter()
            .filter(|c| c.hook == ListenerHook::After)
            .collect();
        let who: BTreeSet<&str> = afters.iter().map(|c| c.instance.as_str()).collect();
        afters.len() >= 4 && who.len() == 2
    })
    .await;
    for h in &handles {
        h.shutdown().await.unwrap();
    }

    let runs = runs.lock().unwrap().clone();
    let calls = listener.calls();
    let mut by_execution: BTreeMap<(String, ExecutionId), Vec<Call>> = BTreeMap::new();
    for c in &calls {
        by_execution
            .entry((c.instance.clone(), c.execution))
            .or_default()
            .push(c.clone());
    }
    assert!(by_execution.len() >= 4, "{calls:#?}");
    let mut shared_fires = BTreeSet::new();
    for ((instance, _), calls) in &by_execution {
        // Exactly one before and one after per execution, in that order, same items.
        assert_eq!(calls.len(), 2, "{calls:#?}");
        let (before, after) = (&calls[0], &calls[1]);
        assert_eq!(before.hook, ListenerHook::Before);
        assert_eq!(after.hook, ListenerHook::After);
        assert_eq!(before.items, after.items);
        assert!(!before.items.is_empty());
        let outcomes = after.outcomes.as_ref().unwrap();
        assert_eq!(outcomes.keys().copied().collect::<Vec<_>>(), after.items);
        // The items of the run are exactly the items this instance ran for that fire and
        // kind, all between the two calls.
        let ran: Vec<&ItemRun> = runs
            .iter()
            .filter(|r| &r.instance == instance && r.fire == before.fire && r.kind == before.kind)
            .collect();
        let mut items: Vec<u32> = ran.iter().map(|r| r.item).collect();
        items.sort_unstable();
        assert_eq!(items, before.items, "{ran:#?}");
        for r in &ran {
            assert!(
                before.at <= r.start && r.end <= after.at,
                "{r:?} {before:?} {after:?}"
            );
        }
        // The after sees each item's outcome: item 3 fails.
        for (item, outcome) in outcomes {
            if *item == 3 {
                assert!(matches!(outcome, ItemOutcome::Failed(m) if m.contains("planned")));
            } else {
                assert_eq!(outcome, &ItemOutcome::Succeeded);
            }
        }
        shared_fires.insert((before.fire, instance.clone()));
    }
    // Both instances ran with listeners.
    let instances: BTreeSet<&String> = shared_fires.iter().map(|(_, i)| i).collect();
    assert_eq!(instances.len(), 2, "{shared_fires:?}");
}

/// Fails or panics in the hooks it is told to.
struct Faulty {
    before: Option<bool>,
    after: Option<bool>,
}

#[async_trait]
impl JobListener for Faulty {
    async fn before(&self, _ctx: &ShardingContexts) -> Result<(), ListenerError> {
        match self.before {
            Some(true) => panic!("before panics"),
            Some(false) => Err(ListenerError::failed("before fails")),
            None => Ok(()),
        }
    }

    async fn after(
        &self,
        _ctx: &ShardingContexts,
        _outcomes: &BTreeMap<u32, ItemOutcome>,
    ) -> Result<(), ListenerError> {
        match self.after {
            Some(true) => panic!("after panics"),
            Some(false) => Err(ListenerError::failed("after fails")),
            None => Ok(()),
        }
    }

    fn order(&self) -> i32 {
        0
    }

    fn name(&self) -> String {
        format!("faulty-{:?}-{:?}", self.before, self.after)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_and_panicking_listeners_do_not_stop_the_job() {
    let server = MemServer::default();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let other_runs = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder::default();
    let work = |runs: &Arc<Mutex<Vec<ItemRun>>>| Work {
        instance: id(1).to_string(),
        runs: Arc::clone(runs),
        fail: BTreeSet::new(),
        work: Duration::from_millis(20),
    };
    let handle = builder(&server, 1)
        .job(every_second("faulty", 2), work(&runs))
        .job(every_second("bystander", 1), work(&other_runs))
        .listener(
            "faulty",
            Faulty {
                before: Some(true),
                after: Some(false),
            },
        )
        .listener(
            "faulty",
            Faulty {
                before: Some(false),
                after: Some(true),
            },
        )
        // Called after the faulty ones (higher order): still called, in both hooks.
        .listener("faulty", recorder.clone())
        .build()
        .await
        .unwrap();
    let mut events = handle.subscribe();
    eventually(120, "two whole fires of both jobs", || {
        let mut fires: BTreeMap<DateTime<Utc>, BTreeSet<u32>> = BTreeMap::new();
        for r in runs.lock().unwrap().iter() {
            fires.entry(r.fire).or_default().insert(r.item);
        }
        let whole = fires.values().filter(|items| items.len() == 2).count();
        let afters = recorder
            .calls()
            .iter()
            .filter(|c| c.hook == ListenerHook::After)
            .count();
        whole >= 2 && other_runs.lock().unwrap().len() >= 2 && afters >= 2
    })
    .await;
    handle.shutdown().await.unwrap();

    // The job ran every item on every fire anyway, and so did the other job.
    let runs = runs.lock().unwrap().clone();
    let mut fires: BTreeMap<DateTime<Utc>, BTreeSet<u32>> = BTreeMap::new();
    for r in &runs {
        fires.entry(r.fire).or_default().insert(r.item);
    }
    assert!(
        fires.values().filter(|items| items.len() == 2).count() >= 2,
        "{fires:?}"
    );
    assert!(other_runs.lock().unwrap().len() >= 2);
    // The recorder saw every run, items succeeded.
    let calls = recorder.calls();
    let afters: Vec<&Call> = calls
        .iter()
        .filter(|c| c.hook == ListenerHook::After)
        .collect();
    assert!(afters.len() >= 2, "{calls:#?}");
    for c in afters {
        assert!(
            c.outcomes
                .as_ref()
                .unwrap()
                .values()
                .all(|o| *o == ItemOutcome::Succeeded)
        );
    }
    // Every failure was reported, by listener and hook.
    let failed = failures(&mut events);
    let has = |name: &str, hook: ListenerHook, f: &dyn Fn(&ListenerError) -> bool| {
        failed
            .iter()
            .any(|(l, h, e)| l == name && *h == hook && f(e))
    };
    let panicked =
        |e: &ListenerError| matches!(e, ListenerError::Panicked(m) if m.contains("panics"));
    let errored = |e: &ListenerError| matches!(e, ListenerError::Failed(m) if m.contains("fails"));
    assert!(
        has(
            "faulty-Some(true)-Some(false)",
            ListenerHook::Before,
            &panicked
        ),
        "{failed:#?}"
    );
    assert!(
        has(
            "faulty-Some(true)-Some(false)",
            ListenerHook::After,
            &errored
        ),
        "{failed:#?}"
    );
    assert!(
        has(
            "faulty-Some(false)-Some(true)",
            ListenerHook::Before,
            &errored
        ),
        "{failed:#?}"
    );
    assert!(
        has(
            "faulty-Some(false)-Some(true)",
            ListenerHook::After,
            &panicked
        ),
        "{failed:#?}"
    );
    assert!(failed.iter().all(|(l, _, _)| l.starts_with("faulty")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_before_with_throw_skips_the_run_and_still_calls_after() {
    let server = MemServer::default();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder::default();
    let mut config = JobConfig::new("thrown", 2);
    config.job_error_handler_type = ErrorHandlerType::Throw;
    let handle = builder(&server, 1)
        .job(
            config,
            Work {
                instance: id(1).to_string(),
                runs: Arc::clone(&runs),
                ..Work::default()
            },
        )
        .listener(
            "thrown",
            Faulty {
                before: Some(false),
                after: None,
            },
        )
        .listener("thrown", recorder.clone())
        .build()
        .await
        .unwrap();
    let mut events = handle.subscribe();
    handle.trigger("thrown", None).await.unwrap();
    eventually(5, "the after listener", || {
        recorder
            .calls()
            .iter()
            .any(|c| c.hook == ListenerHook::After)
    })
    .await;
    handle.shutdown().await.unwrap();

    assert!(runs.lock().unwrap().is_empty(), "items ran");
    let calls = recorder.calls();
    let after = calls
        .iter()
        .find(|c| c.hook == ListenerHook::After)
        .unwrap();
    let outcomes = after.outcomes.as_ref().unwrap();
    assert_eq!(outcomes.len(), 2);
    for o in outcomes.values() {
        assert!(
            matches!(o, ItemOutcome::Failed(m) if m.contains("THROW")),
            "{o:?}"
        );
    }
    let mut finished = 0;
    while let Ok(ev) = events.try_recv() {
        if let RunEvent::ItemFinished { outcome, .. } = ev {
            assert!(matches!(outcome, ItemOutcome::Failed(_)));
            finished += 1;
        }
    }
    assert_eq!(finished, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_types_come_from_job_listener_types() {
    let server = MemServer::default();
    let recorder = Recorder::default();
    let made = Arc::new(Mutex::new(Vec::new()));
    let mut config = JobConfig::new("typed", 2);
    config.job_listener_types = vec!["recording".into()];
    let factory = {
        let recorder = recorder.clone();
        let made = Arc::clone(&made);
        move |c: &JobConfig| {
            made.lock().unwrap().push(c.job_name.clone());
            Arc::new(recorder.clone()) as Arc<dyn JobListener>
        }
    };
    let work = Work {
        instance: id(1).to_string(),
        ..Work::default()
    };
    let handle = builder(&server, 1)
        .listener_type("recording", factory)
        .job(config.clone(), work.clone())
        .build()
        .await
        .unwrap();
    handle.trigger("typed", None).await.unwrap();
    eventually(5, "the typed listener", || recorder.calls().len() >= 2).await;
    // Run-time additions resolve names too; an unknown one is refused with a clear error.
    let mut late = JobConfig::new("typed-late", 1);
    late.job_listener_types = vec!["recording".into()];
    handle.add_job(late, work.clone()).await.unwrap();
    let mut bad = JobConfig::new("typed-bad", 1);
    bad.job_listener_types = vec!["nope".into()];
    let err = handle.add_job(bad, work.clone()).await.unwrap_err();
    assert!(matches!(err, RuntimeError::Listener(_)), "{err}");
    assert!(err.to_string().contains("\"nope\""), "{err}");
    handle.shutdown().await.unwrap();
    assert_eq!(*made.lock().unwrap(), ["typed", "typed-late"]);
    let calls = recorder.calls();
    assert_eq!(calls[0].hook, ListenerHook::Before);
    assert_eq!(calls[0].items, [0, 1]);
    assert_eq!(calls[0].kind, RunKind::Trigger);

    // At build time: an unknown type, and a listener for a job that is not there.
    let err = builder(&server, 2)
        .job(config, work.clone())
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("\"recording\""), "{err}");
    let err = builder(&server, 2)
        .job(JobConfig::new("typed", 2), work)
        .listener("typo", Recorder::default())
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("\"typo\""), "{err}");
}

/// The fire (or trigger) of each once-hook call.
fn once_per_round(once: &Once) -> BTreeMap<(ListenerHook, String), Vec<Call>> {
    let mut by: BTreeMap<(ListenerHook, String), Vec<Call>> = BTreeMap::new();
    for c in once.calls.calls() {
        let key = if c.kind == RunKind::Trigger {
            "trigger".to_owned()
        } else {
            c.fire.to_rfc3339()
        };
        by.entry((c.hook, key)).or_default().push(c);
    }
    by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distribute_once_runs_once_per_fire_across_three_instances() {
    let server = MemServer::default();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let once = Once::default();
    let mut handles = Vec::new();
    let mut events = Vec::new();
    for n in 1..=3 {
        let work = Work {
            instance: id(n).to_string(),
            runs: Arc::clone(&runs),
            fail: BTreeSet::new(),
            work: Duration::from_millis(150),
        };
        let handle = builder(&server, n)
            .job(every_second("once", 6), work)
            .listener(
                "once",
                DistributeOnce::new(once.clone(), Duration::from_secs(3), Duration::from_secs(3)),
            )
            .build()
            .await
            .unwrap();
        events.push(handle.subscribe());
        handles.push(handle);
    }
    wait_for_plan(&server, "once", 6, 3).await;
    let settled = Utc::now();
    // Two whole fires more than a second after the plan settled and a second before now.
    eventually(120, "two whole fires after the plan settled", || {
        let edge = Utc::now() - chrono::Duration::milliseconds(1000);
        let mut by_fire: BTreeMap<DateTime<Utc>, BTreeSet<u32>> = BTreeMap::new();
        for r in runs.lock().unwrap().iter() {
            if r.fire > settled + chrono::Duration::milliseconds(1000) && r.fire < edge {
                by_fire.entry(r.fire).or_default().insert(r.item);
            }
        }
        by_fire.values().filter(|items| items.len() == 6).count() >= 2
    })
    .await;
    let stop = Utc::now();
    for h in &handles {
        h.shutdown().await.unwrap();
    }
    // The fires between the plan settling and the first shutdown (which takes items away
    // until the others re-shard).
    let window = |fire: &DateTime<Utc>| {
        *fire > settled + chrono::Duration::milliseconds(1000)
            && *fire < stop - chrono::Duration::milliseconds(1000)
    };

    let runs = runs.lock().unwrap().clone();
    let rounds = once_per_round(&once);
    // Never more than one once-hook per fire and hook, whatever happened while the
    // instances joined.
    for ((hook, fire), calls) in &rounds {
        assert_eq!(
            calls.len(),
            1,
            "{hook} of {fire} ran {} times: {calls:#?}",
            calls.len()
        );
    }
    // Every fire after the plan settled ran all six items over the three instances, with
    // one before-once ended before any of its items started and one after-once started
    // after all of them ended.
    let mut by_fire: BTreeMap<DateTime<Utc>, Vec<&ItemRun>> = BTreeMap::new();
    for r in &runs {
        by_fire.entry(r.fire).or_default().push(r);
    }
    let ended = once.ended.lock().unwrap().clone();
    let mut checked = 0;
    for (fire, items) in &by_fire {
        if !window(fire) {
            continue;
        }
        let who: BTreeSet<&str> = items.iter().map(|r| r.instance.as_str()).collect();
        let all: BTreeSet<u32> = items.iter().map(|r| r.item).collect();
        assert_eq!(all.len(), 6, "{fire}: {items:#?}");
        assert_eq!(who.len(), 3, "{fire}: {items:#?}");
        let key = fire.to_rfc3339();
        let before = rounds
            .get(&(ListenerHook::Before, key.clone()))
            .unwrap_or_else(|| panic!("no before-once for {fire}: {rounds:#?}"));
        let after = rounds
            .get(&(ListenerHook::After, key.clone()))
            .unwrap_or_else(|| panic!("no after-once for {fire}: {rounds:#?}"));
        let before_end = ended
            .iter()
            .find(|(h, k, _)| *h == ListenerHook::Before && *k == key)
            .map(|(_, _, at)| *at)
            .unwrap();
        for r in items {
            assert!(
                before_end <= r.start,
                "{r:?} started before the before-once ended"
            );
            assert!(
                r.end <= after[0].at,
                "{r:?} ended after the after-once began"
            );
        }
        // The once-hook ran on one of the instances, with its own items.
        assert!(who.contains(before[0].instance.as_str()));
        assert!(!before[0].items.is_empty());
        checked += 1;
    }
    assert!(checked >= 2, "only {checked} whole fires: {by_fire:#?}");
    // No round of those fires failed.
    for ev in &mut events {
        for (fire, _, hook, error) in failures_at(ev) {
            assert!(!window(&fire), "{fire} {hook}: {error}");
        }
    }
    // Nothing is left of the rounds but the (empty) directories.
    let left: Vec<String> = server
        .dump()
        .iter()
        .map(|n| n.path.to_string())
        .filter(|p| p.contains("/guarantee/") && p.matches('/').count() > 3)
        .collect();
    assert!(left.len() <= 6, "{left:#?}");
}

/// Blocks `before` on its first call, for `hold`.
struct Blocker {
    blocked: AtomicBool,
    hold: Duration,
}

#[async_trait]
impl JobListener for Blocker {
    async fn before(&self, _ctx: &ShardingContexts) -> Result<(), ListenerError> {
        if !self.blocked.swap(true, Ordering::SeqCst) {
            tokio::time::sleep(self.hold).await;
        }
        Ok(())
    }

    fn order(&self) -> i32 {
        0
    }
}

async fn three_with_once(
    server: &MemServer,
    job: &str,
    once: &Once,
    runs: &Arc<Mutex<Vec<ItemRun>>>,
    blocker: Option<Duration>,
) -> Vec<SchedulerHandle> {
    let mut handles = Vec::new();
    for n in 1..=3 {
        let work = Work {
            instance: id(n).to_string(),
            runs: Arc::clone(runs),
            fail: BTreeSet::new(),
            work: Duration::from_millis(50),
        };
        let mut b = builder(server, n)
            .job(JobConfig::new(job, 3), work)
            .listener(
                job,
                DistributeOnce::new(
                    once.clone(),
                    Duration::from_millis(1500),
                    Duration::from_millis(1500),
                ),
            );
        if let (3, Some(hold)) = (n, blocker) {
            // Instance 3 holds an item but is stuck in an earlier listener.
            b = b.listener(
                job,
                Blocker {
                    blocked: AtomicBool::new(false),
                    hold,
                },
            );
        }
        handles.push(b.build().await.unwrap());
    }
    wait_for_plan(server, job, 3, 3).await;
    handles
}

fn guarantee_items(server: &MemServer, job: &str) -> Vec<String> {
    server
        .dump()
        .iter()
        .map(|n| n.path.to_string())
        .filter(|p| {
            p.starts_with(&format!("/{job}/guarantee/started/"))
                || p.starts_with(&format!("/{job}/guarantee/completed/"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distribute_once_times_out_when_an_instance_never_arrives() {
    let server = MemServer::default();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let once = Once::default();
    let handles = three_with_once(
        &server,
        "late",
        &once,
        &runs,
        Some(Duration::from_millis(4000)),
    )
    .await;
    let mut events: Vec<_> = handles.iter().map(|h| h.subscribe()).collect();
    // A one-off run of every instance (as ElasticJob's OneOffJobBootstrap).
    for h in &handles {
        h.trigger("late", None).await.unwrap();
    }
    eventually(120, "every item ran", || runs.lock().unwrap().len() == 3).await;
    // Instance 3 arrives 4 s late: the others gave up after 1.5 s, and so does it.
    let mut failed = Vec::new();
    eventually(120, "every instance's after round ended", || {
        for (n, ev) in events.iter_mut().enumerate() {
            for f in failures(ev) {
                failed.push((n + 1, f));
            }
        }
        (1..=3).all(|n| {
            failed
                .iter()
                .any(|(i, (_, h, _))| *i == n && *h == ListenerHook::After)
        })
    })
    .await;
    assert!(
        once.calls.calls().is_empty(),
        "a once-hook ran: {:#?}",
        once.calls.calls()
    );
    for n in 1..=3 {
        for hook in [ListenerHook::Before, ListenerHook::After] {
            let errors: Vec<&ListenerError> = failed
                .iter()
                .filter(|(i, (_, h, _))| *i == n && *h == hook)
                .map(|(_, (_, _, e))| e)
                .collect();
            assert_eq!(errors.len(), 1, "instance {n} {hook}: {failed:#?}");
            assert!(
                matches!(
                    errors[0],
                    ListenerError::Timeout { .. } | ListenerError::RoundAbandoned { .. }
                ),
                "{errors:?}"
            );
        }
    }
    // The instance that arrived late timed out itself, in both rounds.
    assert!(failed.iter().any(|(i, (_, h, e))| *i == 3
        && *h == ListenerHook::Before
        && matches!(e, ListenerError::Timeout { after, .. } if *after == Duration::from_millis(1500))));
    // Every item still ran (LOG: a timed-out round does not stop the run).
    let items: BTreeSet<u32> = runs.lock().unwrap().iter().map(|r| r.item).collect();
    assert_eq!(items, BTreeSet::from([0, 1, 2]));
    // The timed-out rounds left nothing behind, so the next round completes normally.
    eventually(3, "the rounds are cleared", || {
        guarantee_items(&server, "late").is_empty()
    })
    .await;
    runs.lock().unwrap().clear();
    for h in &handles {
        h.trigger("late", None).await.unwrap();
    }
    eventually(120, "the second round", || {
        let rounds = once_per_round(&once);
        rounds.len() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for h in &handles {
        h.shutdown().await.unwrap();
    }
    let rounds = once_per_round(&once);
    assert_eq!(rounds.len(), 2, "{rounds:#?}");
    assert!(rounds.values().all(|c| c.len() == 1), "{rounds:#?}");
    assert_eq!(runs.lock().unwrap().len(), 3);
    for ev in &mut events {
        assert!(failures(ev).is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distribute_once_does_not_wait_for_disabled_items() {
    let server = MemServer::default();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let once = Once::default();
    let handles = three_with_once(&server, "partly", &once, &runs, None).await;
    let mut events: Vec<_> = handles.iter().map(|h| h.subscribe()).collect();
    // An operator disables item 1.
    let operator = server.connect(Duration::from_secs(3));
    let disabled = NodePath::new("/partly/sharding/1/disabled").unwrap();
    operator
        .create(&disabled, Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for h in &handles {
        h.trigger("partly", None).await.unwrap();
    }
    eventually(120, "both once-hooks", || once_per_round(&once).len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for h in &handles {
        h.shutdown().await.unwrap();
    }
    let items: BTreeSet<u32> = runs.lock().unwrap().iter().map(|r| r.item).collect();
    assert_eq!(items, BTreeSet::from([0, 2]));
    let rounds = once_per_round(&once);
    assert!(rounds.values().all(|c| c.len() == 1), "{rounds:#?}");
    for ev in &mut events {
        let failed = failures(ev);
        assert!(failed.is_empty(), "{failed:#?}");
    }
    assert!(guarantee_items(&server, "partly").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distribute_once_fails_at_once_when_the_claim_is_too_large() {
    let server = MemServer::default();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let once = Once::default();
    let mut handles = Vec::new();
    for n in 1..=2 {
        let work = Work {
            instance: id(n).to_string(),
            runs: Arc::clone(&runs),
            fail: BTreeSet::new(),
            work: Duration::from_millis(50),
        };
        let handle = builder(&server, n)
            .job(JobConfig::new("big", 10), work)
            .listener(
                "big",
                DistributeOnce::new(
                    once.clone(),
                    Duration::from_secs(30),
                    Duration::from_secs(30),
                ),
            )
            .build()
            .await
            .unwrap();
        handles.push(handle);
    }
    wait_for_plan(&server, "big", 10, 2).await;
    // Each instance's registration (five items: 7 compares) fits, and so does the machine's
    // claim of an item (9 compares when the claim seals the item's owner node,
    // `claim::owner`); the claim of the round, which checks all ten items (11), does not.
    server.with_store(|st, _| st.set_max_txn_ops(Some(9)));
    let mut events: Vec<_> = handles.iter().map(|h| h.subscribe()).collect();
    for h in &handles {
        h.trigger("big", None).await.unwrap();
    }
    // Both rounds of both instances fail long before their 30 s timeouts, saying why. (The
    // machine's claims are split to fit the limit too, so an instance may run its items in
    // several executions, each with its rounds.) The wait lasts until every execution that ran
    // an item has reported its `after` round: lifting the limit while a round is still to come
    // would let that round's claim through.
    let mut failed = Vec::new();
    let mut ran: BTreeMap<u32, (usize, ExecutionId)> = BTreeMap::new();
    eventually(120, "every round failed", || {
        for (n, ev) in events.iter_mut().enumerate() {
            while let Ok(ev) = ev.try_recv() {
                match ev {
                    RunEvent::ListenerFailed {
                        execution,
                        listener,
                        hook,
                        error,
                        ..
                    } => failed.push((n + 1, execution, (listener, hook, error))),
                    RunEvent::ItemFinished { run, .. } => {
                        ran.insert(run.item, (n + 1, run.execution));
                    }
                    _ => {}
                }
            }
        }
        let reported = |n: usize, x: Option<&ExecutionId>, hook: ListenerHook| {
            failed
                .iter()
                .any(|(i, e, (_, h, _))| *i == n && x.is_none_or(|x| x == e) && *h == hook)
        };
        ran.len() == 10
            && ran
                .values()
                .all(|(n, x)| reported(*n, Some(x), ListenerHook::After))
            && (1..=2).all(|n| {
                [ListenerHook::Before, ListenerHook::After]
                    .into_iter()
                    .all(|hook| reported(n, None, hook))
            })
    })
    .await;
    // Without the limit, so that the instances can leave.
    server.with_store(|st, _| st.set_max_txn_ops(None));
    for h in &handles {
        h.shutdown().await.unwrap();
    }
    for (n, _, (_, hook, e)) in &failed {
        assert!(
            matches!(e, ListenerError::Registry(RegistryError::TooLarge(_))),
            "instance {n} {hook}: {e}"
        );
    }
    assert!(once.calls.calls().is_empty(), "{:#?}", once.calls.calls());
}

/// Never returns from `before`, and ignores cancellation.
struct Hang;

#[async_trait]
impl JobListener for Hang {
    async fn before(&self, _ctx: &ShardingContexts) -> Result<(), ListenerError> {
        std::future::pending().await
    }

    fn order(&self) -> i32 {
        0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_listener_is_dropped_when_the_run_is_cancelled() {
    let server = MemServer::default();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder::default();
    let work = Work {
        instance: id(1).to_string(),
        runs: Arc::clone(&runs),
        ..Work::default()
    };
    let handle = builder(&server, 1)
        .options(|o| o.shutdown_grace = Duration::from_millis(300))
        .cancel_timeout(Duration::from_millis(300))
        .job(JobConfig::new("hung", 2), work)
        .listener("hung", Hang)
        .listener("hung", recorder.clone())
        .build()
        .await
        .unwrap();
    let mut events = handle.subscribe();
    handle.trigger("hung", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(recorder.calls().is_empty());
    // The shutdown cancels the run after its grace; the hanging hook is dropped after the
    // cancel timeout, the items never start, the after hooks still run.
    tokio::time::timeout(Duration::from_secs(5), handle.shutdown())
        .await
        .expect("the shutdown hung")
        .unwrap();
    assert!(runs.lock().unwrap().is_empty());
    let failed = failures(&mut events);
    assert!(
        failed.iter().any(|(l, h, e)| l.ends_with("Hang")
            && *h == ListenerHook::Before
            && matches!(e, ListenerError::Stopped(_))),
        "{failed:#?}"
    );
    let calls = recorder.calls();
    // The recorder comes after the hanging listener: its `before` is called once the hanging
    // one is dropped (the run is cancelled by then), and its `after` sees cancelled items.
    let after = calls
        .iter()
        .find(|c| c.hook == ListenerHook::After)
        .unwrap();
    let outcomes = after.outcomes.as_ref().unwrap();
    assert_eq!(outcomes.len(), 2);
    assert!(
        outcomes.values().all(|o| *o == ItemOutcome::Cancelled),
        "{outcomes:?}"
    );
}
