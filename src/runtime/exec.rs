//! One execution: the job's listeners' `before`, then its items as tasks (at most as many at
//! once as the job's executor strategy allows, each through the job's error handler), then
//! the listeners' `after`; the outcomes go back to the driver.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::Utc;
use futures_util::FutureExt;
use shardjob_core::config::ErrorHandlerType;
use shardjob_core::machine::{Execution, ExecutionId, ItemOutcome};
use shardjob_core::{InstanceId, JobConfig};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{ItemRunInfo, RunEvent};
use crate::jobs::{CancelSignal, Job, JobError, ReshardingFlag, ShardingContext};
use crate::listeners::{Guarantee, JobListener, ListenerError, ListenerHook, ShardingContexts};
use crate::notify::{Failure, Notifier};

/// The runs told to start whose task has not had a thread yet. While there are any, the
/// driver puts its own bookkeeping off (see the driver's run loop), and runs whose body has
/// ended put off their report: a thousand runs fired at the same instant start before the
/// first of them is recorded as finished.
#[derive(Debug, Clone, Default)]
pub(crate) struct Starting(Arc<StartCount>);

#[derive(Debug, Default)]
struct StartCount {
    count: AtomicUsize,
    /// Told when the count falls to zero, or when the driver stops waiting for it.
    drained: Notify,
}

impl Starting {
    /// Counts one more run told to start, until the pass is dropped. `watched`: whether
    /// anyone subscribes to the scheduler's events at the start.
    pub(crate) fn pass(&self, watched: bool) -> StartPass {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        StartPass {
            count: Arc::clone(&self.0),
            watched,
        }
    }

    /// Whether some run told to start has not had a thread yet.
    pub(crate) fn pending(&self) -> bool {
        self.0.count.load(Ordering::SeqCst) > 0
    }

    /// Waits until no run told to start is waiting for a thread, or until the driver
    /// [releases](Self::release) the waiting runs.
    async fn drained(&self) {
        // Registered before the count is read: a wake after the read is not missed.
        let notified = self.0.drained.notified();
        if self.pending() {
            notified.await;
        }
    }

    /// Lets every run waiting in [`drained`](Self::drained) go on: the driver stops waiting
    /// for a run that is not getting a thread.
    pub(crate) fn release(&self) {
        self.0.drained.notify_waiters();
    }
}

/// One run told to start: the run's task drops it as soon as it runs. A task aborted before
/// (or a signal that never reached it) drops it too.
#[derive(Debug)]
pub(crate) struct StartPass {
    count: Arc<StartCount>,
    /// Whether anyone subscribed to the scheduler's events when the run was told to start:
    /// the driver looks once for a whole batch of starts, and a run that nobody watches
    /// builds no events (the channel's lock is shared by every run).
    watched: bool,
}

impl Drop for StartPass {
    fn drop(&mut self) {
        if self.count.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.count.drained.notify_waiters();
        }
    }
}

/// An execution's end, for the driver.
pub(crate) struct Finished {
    pub id: ExecutionId,
    pub outcomes: BTreeMap<u32, ItemOutcome>,
    /// What the run leaves behind, freed by the driver (see [`Leftovers`]).
    pub leftovers: Option<Leftovers>,
}

/// What a run leaves behind when it ends: its execution, its item's context, its shares of
/// the job's state. The driver frees them with the run's outcomes, in its bookkeeping after
/// the runs of an instant have started. Freed in the run's own task they would cost the runs
/// that wait for the same thread: about a sixth of the start-up of each of 1,000 runs fired
/// together (`examples/lateness`), with glibc's malloc.
pub(crate) struct Leftovers {
    _execution: Execution,
    _single: Option<(ShardingContext, ItemRunInfo)>,
    _shared: Arc<Shared>,
    _props: Arc<BTreeMap<String, String>>,
    _config: Arc<JobConfig>,
    _cancel: CancelSignal,
    _resharding: ReshardingFlag,
    _instance: InstanceId,
    _listeners: Arc<[Arc<dyn JobListener>]>,
}

pub(crate) struct ExecutionTask {
    pub execution: Execution,
    pub job: Arc<dyn Job>,
    pub config: Arc<JobConfig>,
    pub limiter: Arc<Semaphore>,
    pub resharding: ReshardingFlag,
    pub cancel: CancelSignal,
    pub cancel_timeout: Duration,
    pub instance: InstanceId,
    pub events: super::events::EventOut,
    pub finished: mpsc::UnboundedSender<Box<Finished>>,
    /// Whether to warn that the job's error handler is not built in (once per job).
    pub warn_handler: bool,
    /// The job's notifier (`EMAIL`, `WECHAT`, `DINGTALK` error handlers).
    pub notifier: Option<Notifier>,
    /// The job's listeners, in calling order.
    pub listeners: Arc<[Arc<dyn JobListener>]>,
    /// Registry access for distribute-once listeners.
    pub guarantee: Option<Arc<Guarantee>>,
    /// For a run prepared ahead of its fire: the start signal to wait for once it is set up.
    /// A dropped sender means the run never starts; nothing is reported then.
    pub go: Option<oneshot::Receiver<StartPass>>,
    /// For a run started at once: its pass, dropped when the task first runs.
    pub pass: Option<StartPass>,
    /// The driver's count of runs told to start: while it is not zero, a run whose body has
    /// ended lets them start before it reports its end.
    pub starting: Starting,
}

/// What every item task of one execution shares.
struct Shared {
    job: Arc<dyn Job>,
    limiter: Arc<Semaphore>,
    handler: ErrorHandlerType,
    events: super::events::EventOut,
    /// Set by a failing item when the error handler is `THROW`: items not started yet fail.
    thrown: AtomicBool,
    /// The job's notifier, told of each failure (it never waits).
    notifier: Option<Notifier>,
    /// Whether the run's item events have a subscriber (see [`StartPass`]).
    watched: AtomicBool,
}

impl ExecutionTask {
    pub(crate) async fn run(self) {
        let mut watched = self.pass.as_ref().is_some_and(|p| p.watched);
        drop(self.pass);
        let exec = self.execution;
        let handler = self.config.job_error_handler_type;
        if self.warn_handler
            && !matches!(
                handler,
                ErrorHandlerType::Log
                    | ErrorHandlerType::Throw
                    | ErrorHandlerType::Ignore
                    | ErrorHandlerType::Email
                    | ErrorHandlerType::Wechat
                    | ErrorHandlerType::Dingtalk
            )
        {
            tracing::warn!(
                job = %exec.job_name,
                "error handler {handler} is not built in yet: failures are logged (LOG)"
            );
        }
        let shared = Arc::new(Shared {
            job: self.job,
            limiter: self.limiter,
            handler,
            events: self.events,
            thrown: AtomicBool::new(false),
            notifier: self.notifier,
            watched: AtomicBool::new(false),
        });
        let props = Arc::new(self.config.props.clone());
        // Items take the job's executor slots in ascending order (a FIFO queue, as
        // ElasticJob's pool); each runs as a task of its own once it has one.
        let mut queue = VecDeque::new();
        for item in &exec.items {
            let ctx = ShardingContext {
                job_name: exec.job_name.clone(),
                task_id: exec.task_id.clone(),
                sharding_total_count: exec.sharding_total_count,
                job_parameter: exec.job_parameter.clone(),
                sharding_item: item.item,
                sharding_parameter: item.parameter.clone(),
                fire_time: exec.fire_time,
                kind: exec.kind,
                fencing_token: item.fencing_token.0,
                props: Arc::clone(&props),
                cancel: self.cancel.clone(),
                resharding: self.resharding.clone(),
            };
            let info = ItemRunInfo {
                instance: self.instance.clone(),
                job: exec.job_name.clone(),
                item: item.item,
                execution: exec.id,
                fire_time: exec.fire_time,
                kind: exec.kind,
                fencing_token: item.fencing_token.0,
                task_id: exec.task_id.clone(),
            };
            queue.push_back((ctx, info));
        }

        // Once the run is cancelled, its `before` hooks and items together have the cancel
        // timeout to end; its `after` hooks together have another.
        let stop_run = OnceLock::new();
        let stop_after = OnceLock::new();
        // The listeners' view of the run is set up before the signal too.
        let group = (!self.listeners.is_empty()).then(|| {
            Arc::new(ShardingContexts {
                job_name: exec.job_name.clone(),
                task_id: exec.task_id.clone(),
                sharding_total_count: exec.sharding_total_count,
                job_parameter: exec.job_parameter.clone(),
                sharding_item_parameters: exec
                    .items
                    .iter()
                    .map(|i| (i.item, i.parameter.clone()))
                    .collect(),
                fencing_tokens: exec
                    .items
                    .iter()
                    .map(|i| (i.item, i.fencing_token.0))
                    .collect(),
                instance_id: self.instance.to_string(),
                execution: exec.id,
                fire_time: exec.fire_time,
                kind: exec.kind,
                props: Arc::clone(&props),
                cancel: self.cancel.clone(),
                guarantee: self.guarantee.clone(),
            })
        });
        // Allocated before the signal, so that the run's end allocates nothing: its message,
        // and its outcome's entry (the only item of most runs; every way the run ends
        // overwrites it, and a failure is the safe side should one ever not). The
        // message is boxed so that the channel's blocks stay small: blocks of 32 whole
        // messages would take over a kilobyte each, and glibc's malloc consolidates its free
        // lists on every such request, in the middle of a thousand runs that end together.
        let mut finished = Box::new(Finished {
            id: exec.id,
            outcomes: BTreeMap::new(),
            leftovers: None,
        });
        let mut outcomes = BTreeMap::new();
        if let [only] = exec.items.as_slice() {
            let unreported = "the run ended without an outcome for this item".to_owned();
            outcomes.insert(only.item, ItemOutcome::Failed(unreported));
        }
        if let Some(go) = self.go {
            match go.await {
                Ok(pass) => watched = pass.watched,
                Err(_) => return,
            }
        }
        shared.watched.store(watched, Ordering::Relaxed);
        if let Some(group) = &group {
            let mut thrown_by = None;
            for listener in self.listeners.iter() {
                let result = call_hook(listener, group, None, &stop_run, self.cancel_timeout).await;
                if let Err(e) = result {
                    let name = listener.name();
                    if listener_failed(&shared, group, &name, ListenerHook::Before, e) {
                        thrown_by.get_or_insert(name);
                    }
                }
            }
            if let Some(name) = thrown_by {
                // THROW: a failing `before` ends the run before its items start.
                let why = format!(
                    "not run: listener {name} failed before the run and the error handler is THROW"
                );
                for (_, info) in queue.drain(..) {
                    let item = info.item;
                    let outcome = ItemOutcome::Failed(why.clone());
                    not_run(&shared, info, outcome.clone(), JobError::failed(&why));
                    outcomes.insert(item, outcome);
                }
            }
        }

        // One item (the common case): it runs in this task, which saves a task and a hop
        // between threads at the fire. Otherwise each item is a task of its own.
        let mut single = None;
        if queue.len() == 1 {
            if let Some((ctx, info)) = queue.pop_front() {
                let item = info.item;
                let outcome = run_single(
                    &ctx,
                    &info,
                    &shared,
                    &self.cancel,
                    &stop_run,
                    self.cancel_timeout,
                )
                .await;
                outcomes.insert(item, outcome);
                single = Some((ctx, info));
            }
        }
        // Several items: each a task of its own, as the executor allows (a `JoinSet` costs an
        // allocation, so a run of one item makes none).
        if !queue.is_empty() {
            let mut set = JoinSet::new();
            let mut tasks = HashMap::new();
            let mut infos = BTreeMap::new();
            let mut hard_stop: Option<Instant> = None;
            let mut aborted = false;
            while !queue.is_empty() || !set.is_empty() {
                tokio::select! {
                    permit = Arc::clone(&shared.limiter).acquire_owned(), if !queue.is_empty() => {
                        let Some((ctx, info)) = queue.pop_front() else { continue };
                        let item = info.item;
                        if shared.thrown.load(Ordering::Relaxed) {
                            let why = "not run: another item of this run failed and the error \
                                       handler is THROW";
                            let outcome = ItemOutcome::Failed(why.to_owned());
                            not_run(&shared, info, outcome.clone(), JobError::failed(why));
                            outcomes.insert(item, outcome);
                            continue;
                        }
                        // A closed semaphore is never made here; run without a slot if it were.
                        let permit = permit.ok();
                        infos.insert(item, info.clone());
                        let shared = Arc::clone(&shared);
                        let handle =
                            set.spawn(async move { run_item(&ctx, &info, permit, shared).await });
                        tasks.insert(handle.id(), item);
                    }
                    next = set.join_next_with_id(), if !set.is_empty() => match next {
                        None => {}
                        Some(Ok((id, outcome))) => {
                            if let Some(item) = tasks.get(&id) {
                                outcomes.insert(*item, outcome);
                            }
                        }
                        Some(Err(e)) => {
                            let Some(&item) = tasks.get(&e.id()) else { continue };
                            let (outcome, error) = if e.is_panic() {
                                panicked(&exec.job_name, item, e.into_panic())
                            } else {
                                stopped(&exec.job_name, item, self.cancel_timeout)
                            };
                            if let Some(run) = infos.get(&item) {
                                not_run(&shared, run.clone(), outcome.clone(), error);
                            }
                            outcomes.insert(item, outcome);
                        }
                    },
                    _ = self.cancel.cancelled(), if hard_stop.is_none() => {
                        hard_stop = Some(*stop_run.get_or_init(|| Instant::now() + self.cancel_timeout));
                        // Items that have no slot yet never start.
                        for (_, info) in queue.drain(..) {
                            let item = info.item;
                            not_run(&shared, info, ItemOutcome::Cancelled, JobError::Cancelled);
                            outcomes.insert(item, ItemOutcome::Cancelled);
                        }
                    }
                    () = sleep_until(hard_stop), if hard_stop.is_some() && !aborted => {
                        aborted = true;
                        set.abort_all();
                    }
                }
            }
        }
        // Other runs of the same instant still wait for a thread: they start first, and this
        // run's end (its after hooks and its report) waits for them (about half of a run's
        // cost on a worker comes after its body).
        self.starting.drained().await;
        if let Some(group) = &group {
            let done = Arc::new(outcomes.clone());
            for listener in self.listeners.iter() {
                let result = call_hook(
                    listener,
                    group,
                    Some(&done),
                    &stop_after,
                    self.cancel_timeout,
                )
                .await;
                if let Err(e) = result {
                    listener_failed(&shared, group, &listener.name(), ListenerHook::After, e);
                }
            }
        }
        let leftovers = Leftovers {
            _execution: exec,
            _single: single,
            _shared: shared,
            _props: props,
            _config: self.config,
            _cancel: self.cancel,
            _resharding: self.resharding,
            _instance: self.instance,
            _listeners: self.listeners,
        };
        finished.outcomes = outcomes;
        finished.leftovers = Some(leftovers);
        let _ = self.finished.send(finished);
    }
}

/// Aborts a spawned task when dropped (the execution's own task may be aborted).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Calls one listener hook (`before` without outcomes, `after` with them) as a task of its
/// own, so that a panic is caught; once the run is cancelled, the hook is dropped at `stop`
/// (set to the cancel timeout from the first hook or item that saw the cancellation).
async fn call_hook(
    listener: &Arc<dyn JobListener>,
    ctx: &Arc<ShardingContexts>,
    outcomes: Option<&Arc<BTreeMap<u32, ItemOutcome>>>,
    stop: &OnceLock<Instant>,
    cancel_timeout: Duration,
) -> Result<(), ListenerError> {
    let (l, c, o) = (Arc::clone(listener), Arc::clone(ctx), outcomes.cloned());
    let mut task = AbortOnDrop(tokio::spawn(async move {
        match o {
            None => l.before(&c).await,
            Some(o) => l.after(&c, &o).await,
        }
    }));
    let joined = tokio::select! {
        r = &mut task.0 => r,
        _ = ctx.cancel.cancelled() => {
            let at = *stop.get_or_init(|| Instant::now() + cancel_timeout);
            match tokio::time::timeout_at(at, &mut task.0).await {
                Ok(r) => r,
                Err(_) => return Err(ListenerError::Stopped(cancel_timeout)),
            }
        }
    };
    match joined {
        Ok(result) => result,
        Err(e) if e.is_panic() => Err(ListenerError::Panicked(panic_message(e.into_panic()))),
        Err(_) => Err(ListenerError::Stopped(cancel_timeout)),
    }
}

/// A listener hook failed: the job's error handler decides how it is logged (and `THROW`
/// whether the run goes on: the return value); subscribers are told in any case.
fn listener_failed(
    shared: &Shared,
    ctx: &ShardingContexts,
    listener: &str,
    hook: ListenerHook,
    error: ListenerError,
) -> bool {
    let job = &ctx.job_name;
    let fire = ctx.fire_time;
    let thrown = match shared.handler {
        // The run was cancelled (shutdown, session trouble): not the listener's fault.
        _ if error == ListenerError::Cancelled => {
            tracing::warn!(%job, %fire, listener, %hook, "listener gave up: the run was cancelled");
            false
        }
        ErrorHandlerType::Ignore => {
            tracing::debug!(%job, %fire, listener, %hook, "listener failed (ignored): {error}");
            false
        }
        ErrorHandlerType::Throw if hook == ListenerHook::Before => {
            tracing::error!(
                %job, %fire, listener, %hook,
                "listener failed (THROW: the run's items are not started): {error}"
            );
            true
        }
        _ => {
            tracing::error!(%job, %fire, listener, %hook, "listener failed: {error}");
            if let Some(n) = &shared.notifier {
                n.failed(Failure {
                    item: None,
                    fire_time: fire,
                    error: format!("listener {listener} failed {hook}: {error}"),
                });
            }
            false
        }
    };
    shared.events.send(RunEvent::ListenerFailed {
        job: job.clone(),
        execution: ctx.execution,
        fire_time: fire,
        listener: listener.to_owned(),
        hook,
        error,
    });
    thrown
}

/// Runs the only item of an execution within the execution's task: it waits for a slot of
/// the job's executor, then runs as [`run_item`] does, with a panic caught and, once the run
/// is cancelled, stopped after the cancel timeout, as a task of its own would be.
async fn run_single(
    ctx: &ShardingContext,
    info: &ItemRunInfo,
    shared: &Arc<Shared>,
    cancel: &CancelSignal,
    stop: &OnceLock<Instant>,
    cancel_timeout: Duration,
) -> ItemOutcome {
    // A free slot is taken at once (the common case): nothing waits on the cancel signal.
    let permit = match Arc::clone(&shared.limiter).try_acquire_owned() {
        Ok(permit) => Some(permit),
        Err(_) => tokio::select! {
            permit = Arc::clone(&shared.limiter).acquire_owned() => permit.ok(),
            _ = cancel.cancelled() => {
                // Cancelled before it had a slot: it never starts.
                stop.get_or_init(|| Instant::now() + cancel_timeout);
                not_run(shared, info.clone(), ItemOutcome::Cancelled, JobError::Cancelled);
                return ItemOutcome::Cancelled;
            }
        },
    };
    let result = {
        let mut body = std::pin::pin!(
            std::panic::AssertUnwindSafe(run_item(ctx, info, permit, Arc::clone(shared)))
                .catch_unwind()
        );
        // The body first: one that ends in its first poll never waits on the cancel signal.
        tokio::select! {
            biased;
            r = &mut body => Some(r),
            _ = cancel.cancelled() => {
                let at = *stop.get_or_init(|| Instant::now() + cancel_timeout);
                tokio::time::timeout_at(at, &mut body).await.ok()
            }
        }
    };
    let (outcome, error) = match result {
        Some(Ok(outcome)) => return outcome,
        Some(Err(payload)) => panicked(&info.job, info.item, payload),
        None => stopped(&info.job, info.item, cancel_timeout),
    };
    not_run(shared, info.clone(), outcome.clone(), error);
    outcome
}

/// The outcome of an item whose body panicked (logged).
fn panicked(
    job: &str,
    item: u32,
    payload: Box<dyn std::any::Any + Send>,
) -> (ItemOutcome, JobError) {
    let why = panic_message(payload);
    tracing::error!(%job, item, "job body panicked: {why}");
    (
        ItemOutcome::Failed(format!("panicked: {why}")),
        JobError::Panicked(why),
    )
}

/// The outcome of an item stopped because it ignored its cancellation (logged).
fn stopped(job: &str, item: u32, cancel_timeout: Duration) -> (ItemOutcome, JobError) {
    let why = format!(
        "ignored its cancellation for {} ms and was stopped",
        cancel_timeout.as_millis()
    );
    tracing::warn!(%job, item, "item {why}");
    (ItemOutcome::Cancelled, JobError::Failed(why))
}

/// Reports an item that ended without its body running to its end.
fn not_run(shared: &Shared, run: ItemRunInfo, outcome: ItemOutcome, error: JobError) {
    shared.events.send(RunEvent::ItemFinished {
        run,
        outcome,
        error: Some(error),
        output: None,
        elapsed: Duration::ZERO,
    });
}

async fn run_item(
    ctx: &ShardingContext,
    run: &ItemRunInfo,
    permit: Option<OwnedSemaphorePermit>,
    shared: Arc<Shared>,
) -> ItemOutcome {
    if ctx.cancel.is_cancelled() {
        not_run(
            &shared,
            run.clone(),
            ItemOutcome::Cancelled,
            JobError::Cancelled,
        );
        return ItemOutcome::Cancelled;
    }
    let started = Utc::now();
    let lateness = (started - ctx.fire_time).num_milliseconds();
    tracing::debug!(
        job = %ctx.job_name, item = ctx.sharding_item, fire = %ctx.fire_time,
        kind = ?ctx.kind, token = ctx.fencing_token, lateness_ms = lateness, "item started"
    );
    // Nobody listening: the events are not even built (this is on the way to the body's
    // start). A subscriber that comes during the run sees neither of its events.
    let watched = shared.watched.load(Ordering::Relaxed);
    if watched {
        shared.events.send(RunEvent::ItemStarted {
            run: run.clone(),
            at: started,
        });
    }
    let t0 = Instant::now();
    let result = shared.job.execute_item(ctx).await;
    let elapsed = t0.elapsed();
    let (outcome, error, output) = match result {
        Ok(output) => {
            tracing::info!(
                job = %ctx.job_name, item = ctx.sharding_item, fire = %ctx.fire_time,
                kind = ?ctx.kind, token = ctx.fencing_token, elapsed_ms = elapsed.as_millis() as u64,
                "item succeeded"
            );
            if let Some(out) = &output {
                log_output(ctx, out);
            }
            (ItemOutcome::Succeeded, None, output)
        }
        Err(e) if matches!(e, JobError::Cancelled) || ctx.cancel.is_cancelled() => {
            tracing::warn!(
                job = %ctx.job_name, item = ctx.sharding_item, fire = %ctx.fire_time,
                token = ctx.fencing_token, reason = ?ctx.cancel.reason(), "item cancelled"
            );
            let output = e.output().cloned();
            (ItemOutcome::Cancelled, Some(e), output)
        }
        Err(e) => {
            if let Some(out) = e.output() {
                log_output(ctx, out);
            }
            handle_error(&shared, ctx, &e);
            let output = e.output().cloned();
            (ItemOutcome::Failed(e.to_string()), Some(e), output)
        }
    };
    // The slot is released only now, so that a THROW above is seen by the items waiting for
    // it.
    drop(permit);
    if watched {
        shared.events.send(RunEvent::ItemFinished {
            run: run.clone(),
            outcome: outcome.clone(),
            error,
            output,
            elapsed,
        });
    }
    outcome
}

/// The most lines of one stream of one run that are logged.
const MAX_LOGGED_LINES: usize = 100;
/// The most bytes of one output line that are logged.
const MAX_LINE_BYTES: usize = 1024;

/// Logs what an item printed (a script's stdout and stderr, an HTTP job's response), line by
/// line at INFO with the job and the item, at most [`MAX_LOGGED_LINES`] lines of
/// [`MAX_LINE_BYTES`] bytes per stream and run; each cut is said.
fn log_output(ctx: &ShardingContext, out: &crate::jobs::CapturedOutput) {
    for (stream, text, dropped) in [
        ("stdout", &out.stdout, out.stdout_truncated),
        ("stderr", &out.stderr, out.stderr_truncated),
    ] {
        let lines = output_lines(text, dropped);
        for line in lines {
            tracing::info!(job = %ctx.job_name, item = ctx.sharding_item, stream, "{line}");
        }
    }
}

/// The lines of one captured stream as logged: capped, with the cuts said.
fn output_lines(text: &str, dropped_front: u64) -> Vec<String> {
    let mut out = Vec::new();
    if dropped_front > 0 {
        out.push(format!(
            "[the first {dropped_front} bytes are not kept (the job's output limit)]"
        ));
    }
    let all: Vec<&str> = text.lines().collect();
    // The end of the output is what tells most (an error, a summary): it is kept.
    let skip = all.len().saturating_sub(MAX_LOGGED_LINES);
    if skip > 0 {
        out.push(format!(
            "[{skip} lines not logged; the last {MAX_LOGGED_LINES} follow]"
        ));
    }
    for line in &all[skip..] {
        if line.len() > MAX_LINE_BYTES {
            let mut cut = MAX_LINE_BYTES;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            out.push(format!(
                "{} [line cut: {} more bytes]",
                &line[..cut],
                line.len() - cut
            ));
        } else {
            out.push((*line).to_owned());
        }
    }
    out
}

/// The job's error handler: `LOG` logs the failure as an error; `IGNORE` only at debug level;
/// `THROW` logs it and fails the items of the same run that have not started yet (the
/// failure escapes the run, as ElasticJob's rethrow ends its execution). Every failed item is
/// reported as failed to the machine and to subscribers whatever the handler. `EMAIL`,
/// `WECHAT` and `DINGTALK` log like `LOG` and hand the failure to the job's notifier
/// ([`crate::notify`]), which sends off the run's path; `WEBHOOK` (not built in yet) logs
/// like `LOG`.
fn handle_error(shared: &Shared, ctx: &ShardingContext, error: &JobError) {
    match shared.handler {
        ErrorHandlerType::Ignore => tracing::debug!(
            job = %ctx.job_name, item = ctx.sharding_item, fire = %ctx.fire_time,
            token = ctx.fencing_token, "item failed (ignored): {error}"
        ),
        ErrorHandlerType::Throw => {
            shared.thrown.store(true, Ordering::Relaxed);
            tracing::error!(
                job = %ctx.job_name, item = ctx.sharding_item, fire = %ctx.fire_time,
                token = ctx.fencing_token, "item failed (THROW: the rest of the run is not started): {error}"
            );
        }
        _ => {
            tracing::error!(
                job = %ctx.job_name, item = ctx.sharding_item, fire = %ctx.fire_time,
                token = ctx.fencing_token, "item failed: {error}"
            );
            if let Some(n) = &shared.notifier {
                n.failed(Failure {
                    item: Some(ctx.sharding_item),
                    fire_time: ctx.fire_time,
                    error: error.to_string(),
                });
            }
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-text panic payload".to_owned()
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_are_capped_and_say_so() {
        assert_eq!(output_lines("a\nb\n", 0), vec!["a", "b"]);
        assert!(output_lines("", 0).is_empty());
        let long = "é".repeat(MAX_LINE_BYTES);
        let lines = output_lines(&long, 0);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].ends_with(&format!("[line cut: {} more bytes]", MAX_LINE_BYTES)));
        let many: String = (0..250).map(|i| format!("{i}\n")).collect();
        let lines = output_lines(&many, 7);
        assert_eq!(lines.len(), MAX_LOGGED_LINES + 2);
        assert!(lines[0].contains("first 7 bytes"));
        assert!(lines[1].contains("150 lines not logged"));
        assert_eq!(lines[2], "150");
        assert_eq!(lines.last().map(String::as_str), Some("249"));
    }

    #[test]
    fn a_start_pass_counts_until_the_run_takes_it_or_it_is_lost() {
        let starting = Starting::default();
        assert!(!starting.pending());

        // Taken by the run's task.
        let (go, wait) = oneshot::channel();
        assert!(go.send(starting.pass(false)).is_ok());
        assert!(starting.pending());
        let pass = wait.blocking_recv();
        assert!(starting.pending(), "counted until the task drops it");
        drop(pass);
        assert!(!starting.pending());

        // The run was discarded before the signal: the pass comes back and is dropped.
        let (go, wait) = oneshot::channel::<StartPass>();
        drop(wait);
        drop(go.send(starting.pass(false)));
        assert!(!starting.pending());

        // The run was aborted with the signal in its channel.
        let (go, wait) = oneshot::channel();
        assert!(go.send(starting.pass(false)).is_ok());
        let other = starting.pass(true);
        drop(wait);
        assert!(starting.pending(), "the other pass is still out");
        drop(other);
        assert!(!starting.pending());
    }

    #[tokio::test]
    async fn an_ended_run_reports_once_the_runs_told_to_start_have_started() {
        let starting = Starting::default();
        // Nothing is starting: no wait.
        starting.drained().await;

        let first = starting.pass(false);
        let second = starting.pass(false);
        let waiter = tokio::spawn({
            let starting = starting.clone();
            async move { starting.drained().await }
        });
        tokio::task::yield_now().await;
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one run is still starting");
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken when the last pass is dropped")
            .expect("the waiter does not panic");

        // A run that never gets a thread: the driver lets the waiters go.
        let stuck = starting.pass(false);
        let waiter = tokio::spawn({
            let starting = starting.clone();
            async move { starting.drained().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        starting.release();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("released by the driver")
            .expect("the waiter does not panic");
        drop(stuck);
    }
}
