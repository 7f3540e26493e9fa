//! The inside of one simulated ElasticJob JVM: its threads as futures on a tiny deterministic
//! executor, and the state they share.
//!
//! ElasticJob's code blocks: a registry call waits for its answer, a wait loop sleeps 100 ms,
//! a latch waits for its turn. Each Java thread of the model (a job's Quartz worker, its
//! listener thread, the connection-state thread, the reconcile thread, start-up and shutdown)
//! is an `async` function that awaits where Java blocks. The executor polls every task of the
//! JVM in spawn order, again and again until none of them changes the shared [`State`]; the
//! cluster then carries out what the tasks asked for ([`Out`]: requests, runs to start, timeline
//! lines) and hands back what came (replies, events, ended runs, the time). No thread, no
//! clock, no randomness: the same inputs give the same outputs.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use shardjob_core::InstanceId;
use shardjob_core::registry::{RegistryError, RegistryOp, RegistryReply, RequestId};

use super::view::{Cache, CacheEvent};
use super::{JavaJob, Source};

/// A task: one Java thread of the JVM.
pub(crate) type Task = Pin<Box<dyn Future<Output = ()>>>;

/// What the JVM asks of the world, drained by the cluster after each round of polling.
#[derive(Debug)]
pub(crate) enum Out {
    /// A registry request. `ends`: the runs (run id, item) whose end this request commits if
    /// it applies (the deletion of their `running` node when they completed).
    Request {
        id: RequestId,
        op: RegistryOp,
        ends: Vec<(u64, u32)>,
    },
    /// Items start running: one run, its items with the revision of their `running` node's
    /// write (if the JVM wrote one and heard back), why it runs.
    Start {
        run: u64,
        job: String,
        items: Vec<(u32, Option<u64>)>,
        why: RunWhy,
        /// Whether the run wrote `running` nodes (monitorExecution on): if not, nothing in the
        /// registry records its end, and its end counts as committed when it ends.
        marked: bool,
        /// The job parameter of the run's context.
        parameter: String,
    },
    /// This JVM's Quartz missed a fire of these items (a collapse, or a fire whose item was
    /// running): the world's record of which fire a later MISFIRE run replays.
    Missed {
        job: String,
        items: Vec<u32>,
        fire: i64,
    },
    /// A line for the timeline (and the trace).
    Note(String),
    /// The JVM has finished its graceful shutdown: its session is closed, the process ends.
    Close,
}

/// Why a run of the JVM runs (ElasticJob's own word is `NORMAL_TRIGGER` or `MISFIRE`; the
/// model knows more, for the record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunWhy {
    /// The normal run of a fire (a cron fire, or a one-off trigger that found no failover
    /// item of this instance).
    Normal(Source),
    /// A failover run: the context held only items whose `failover` node names this instance.
    Failover(Source),
    /// The misfire loop's run of the same context after a run of `Source`.
    Misfire(Source),
}

/// The connection state the JVM's Curator client reports to its listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnEvent {
    /// `SUSPENDED` or `LOST` (ElasticJob's `UNAVAILABLE`).
    Unavailable,
    /// `RECONNECTED`: the same session back, or a new one after an expiry.
    Reconnected,
}

/// The Quartz scheduler of one job.
#[derive(Debug, Clone, Default)]
pub(crate) struct Quartz {
    /// Whether the scheduler has been started (`schedule()`).
    pub(crate) started: bool,
    /// Shut down: no more fires (graceful: after the fire in progress).
    pub(crate) down: bool,
    /// Paused (`pauseAll`, while the registry connection is lost).
    pub(crate) paused: bool,
    /// The cron trigger: its expression as written, the parsed one.
    pub(crate) cron: Option<String>,
    /// The cron trigger's next fire time (epoch ms, by this JVM's clock).
    pub(crate) next: Option<i64>,
    /// Whether the cron trigger has fired (Quartz's `previousFireTime != null`).
    pub(crate) fired: bool,
    /// One-off triggers waiting (`triggerJob`), by the time they were added.
    pub(crate) triggers: VecDeque<i64>,
    /// Whether the worker thread runs a fire now.
    pub(crate) busy: bool,
    /// Bumped on every change of the trigger (a reschedule), so that a waiting worker looks
    /// again.
    pub(crate) version: u64,
}

/// One job of the JVM: ElasticJob's `JobRegistry` entries for it, its cache, its queues.
#[derive(Debug)]
pub(crate) struct JobState {
    /// The job as this instance was given it (its local configuration, its type name).
    pub(crate) spec: JavaJob,
    /// The Curator cache of the job's subtree.
    pub(crate) cache: Cache,
    /// Events for the job's listener thread, in order.
    pub(crate) events: VecDeque<CacheEvent>,
    /// Whether the listeners are registered (events are queued for them).
    pub(crate) listening: bool,
    /// Bumped by every event under a latch directory of the job, and by every (re)connection:
    /// a latch waiter looks again.
    pub(crate) latch_events: u64,
    /// `JobRegistry.isJobRunning`.
    pub(crate) running: bool,
    /// `JobRegistry.isShutdown`: never registered, or shut down.
    pub(crate) shutdown: bool,
    /// `JobRegistry.getCurrentShardingTotalCount`.
    pub(crate) total: u32,
    /// The job's scheduler.
    pub(crate) quartz: Quartz,
    /// When the reconcile last acted (virtual ms).
    pub(crate) reconciled_at: u64,
    /// Whether a graceful shutdown of this job has finished (leader and instance nodes
    /// removed).
    pub(crate) left: bool,
}

impl JobState {
    pub(crate) fn new(spec: JavaJob) -> Self {
        Self {
            spec,
            cache: Cache::default(),
            events: VecDeque::new(),
            listening: false,
            latch_events: 0,
            running: false,
            shutdown: true,
            total: 0,
            quartz: Quartz::default(),
            reconciled_at: 0,
            left: false,
        }
    }
}

/// What the tasks of one JVM share.
pub(crate) struct State {
    /// The instance id (`ip@-@pid`).
    pub(crate) id: InstanceId,
    /// Virtual ms (the JVM's `System.nanoTime`).
    pub(crate) now: u64,
    /// The JVM's wall clock, epoch ms (skew included).
    pub(crate) wall: i64,
    /// The world's wall time at virtual 0, epoch ms (for the timeline's words only).
    pub(crate) origin: i64,
    next_request: u64,
    next_run: u64,
    /// Requests, runs and notes for the cluster.
    pub(crate) out: Vec<Out>,
    replies: BTreeMap<u64, RegistryReply>,
    /// The earliest virtual ms a pending sleep wants to wake at, gathered at each poll.
    pub(crate) wake: Option<u64>,
    /// Bumped by every change a task makes: the executor polls again until it stays.
    tick: u64,
    /// Connection-state changes waiting for the connection-state thread.
    pub(crate) conn_events: VecDeque<ConnEvent>,
    /// The jobs, by name.
    pub(crate) jobs: BTreeMap<String, JobState>,
    /// Runs the cluster reported ended.
    pub(crate) ended: BTreeSet<u64>,
    spawned: Vec<Task>,
    /// Counter for unique latch node names.
    pub(crate) latch_seq: u64,
    /// A graceful shutdown was asked for.
    pub(crate) stopping: bool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("id", &self.id)
            .field("now", &self.now)
            .field("jobs", &self.jobs.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl State {
    fn new(id: InstanceId) -> Self {
        Self {
            id,
            now: 0,
            wall: 0,
            origin: 0,
            next_request: 0,
            next_run: 0,
            out: Vec::new(),
            replies: BTreeMap::new(),
            wake: None,
            tick: 0,
            conn_events: VecDeque::new(),
            jobs: BTreeMap::new(),
            ended: BTreeSet::new(),
            spawned: Vec::new(),
            latch_seq: 0,
            stopping: false,
        }
    }

    /// A reply arrived.
    pub(crate) fn reply(&mut self, id: RequestId, reply: RegistryReply) {
        self.replies.insert(id.0, reply);
        self.tick += 1;
    }

    /// Marks a change made from outside the tasks (an event, a reply, a fault).
    pub(crate) fn touch(&mut self) {
        self.tick += 1;
    }

    fn want_wake(&mut self, at: u64) {
        self.wake = Some(self.wake.map_or(at, |w| w.min(at)));
    }

    /// The next run id.
    pub(crate) fn new_run(&mut self) -> u64 {
        self.next_run += 1;
        self.next_run
    }
}

/// A handle on the JVM's shared state, held by each task.
#[derive(Clone, Debug)]
pub(crate) struct Jvm(Rc<RefCell<State>>);

/// How many times Curator retries an operation that lost its connection
/// (`ExponentialBackoffRetry(1000, 3)`, ElasticJob's defaults), and how long it sleeps before
/// each retry, ms (Curator draws `1000 × random(1..2^n)` capped at 3 s; the model takes the
/// bottom of each draw).
const RETRY_SLEEPS: [u64; 3] = [1_000, 2_000, 3_000];

impl Jvm {
    /// A JVM with no job and no task.
    pub(crate) fn new(id: InstanceId) -> Self {
        Self(Rc::new(RefCell::new(State::new(id))))
    }

    /// Reads the shared state.
    pub(crate) fn get<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.0.borrow())
    }

    /// Changes the shared state (the executor polls again).
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.0.borrow_mut();
        s.tick += 1;
        f(&mut s)
    }

    /// Changes the shared state from outside the tasks.
    pub(crate) fn state(&self) -> std::cell::RefMut<'_, State> {
        self.0.borrow_mut()
    }

    /// The instance id.
    pub(crate) fn id(&self) -> InstanceId {
        self.get(|s| s.id.clone())
    }

    /// Reads one job's state; `None` if the JVM does not host it.
    pub(crate) fn job<T>(&self, job: &str, f: impl FnOnce(&JobState) -> T) -> Option<T> {
        self.get(|s| s.jobs.get(job).map(f))
    }

    /// Changes one job's state; `None` if the JVM does not host it.
    pub(crate) fn job_mut<T>(&self, job: &str, f: impl FnOnce(&mut JobState) -> T) -> Option<T> {
        self.with(|s| s.jobs.get_mut(job).map(f))
    }

    /// A fire time (epoch ms) in the timeline's words.
    pub(crate) fn fire_words(&self, fire: i64) -> String {
        crate::timeline::fire(fire, self.get(|s| s.origin))
    }

    /// A line for the timeline.
    pub(crate) fn note(&self, text: String) {
        self.with(|s| s.out.push(Out::Note(text)));
    }

    /// Starts a task.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.with(|s| s.spawned.push(Box::pin(task)));
    }

    /// Waits until `ready` gives a value.
    pub(crate) async fn until<T>(&self, mut ready: impl FnMut(&State) -> Option<T>) -> T {
        poll_fn(|_| match ready(&self.0.borrow()) {
            Some(v) => Poll::Ready(v),
            None => Poll::Pending,
        })
        .await
    }

    /// Sleeps `ms` virtual ms (a Java `Thread.sleep`; a paused JVM wakes when it resumes).
    pub(crate) async fn sleep(&self, ms: u64) {
        let at = self.get(|s| s.now) + ms;
        poll_fn(|_| {
            let mut s = self.0.borrow_mut();
            if s.now >= at {
                Poll::Ready(())
            } else {
                s.want_wake(at);
                Poll::Pending
            }
        })
        .await
    }

    /// Sends one request and waits for its answer, once.
    pub(crate) async fn call_once(&self, op: RegistryOp, ends: Vec<(u64, u32)>) -> RegistryReply {
        let id = self.with(|s| {
            s.next_request += 1;
            let id = RequestId(s.next_request);
            s.out.push(Out::Request { id, op, ends });
            id
        });
        self.until(|s| s.replies.contains_key(&id.0).then_some(()))
            .await;
        self.with(|s| s.replies.remove(&id.0))
            .unwrap_or(RegistryReply::Failed(RegistryError::ConnectionLoss))
    }

    /// Sends one request as Curator does: an answer that says the connection was lost (or a
    /// timeout, or a session that expired under it) is retried after a backoff, three times.
    pub(crate) async fn call(&self, op: RegistryOp) -> RegistryReply {
        self.call_ending(op, Vec::new()).await
    }

    /// [`Jvm::call`] of a request that commits the end of runs (see [`Out::Request`]).
    pub(crate) async fn call_ending(&self, op: RegistryOp, ends: Vec<(u64, u32)>) -> RegistryReply {
        let mut tries = 0;
        loop {
            let reply = self.call_once(op.clone(), ends.clone()).await;
            let lost = matches!(
                reply,
                RegistryReply::Failed(
                    RegistryError::ConnectionLoss
                        | RegistryError::Timeout
                        | RegistryError::SessionExpired
                )
            );
            match RETRY_SLEEPS.get(tries) {
                Some(ms) if lost => {
                    tries += 1;
                    self.sleep(*ms).await;
                }
                _ => return reply,
            }
        }
    }
}

/// The executor: the JVM's tasks, polled in spawn order.
#[derive(Default)]
pub(crate) struct Tasks {
    tasks: Vec<Task>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} tasks", self.tasks.len())
    }
}

impl Tasks {
    /// Polls every task until a whole round changes nothing. Returns the earliest wake a
    /// sleeping task wants, and whether the tasks settled (a task that changes the state at
    /// every poll without ever waiting is a bug of the model: polling stops after 100,000
    /// rounds).
    pub(crate) fn run(&mut self, jvm: &Jvm) -> (Option<u64>, bool) {
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..100_000 {
            let before = {
                let mut s = jvm.state();
                s.wake = None;
                s.tick
            };
            let mut k = 0;
            while k < self.tasks.len() {
                if self.tasks[k].as_mut().poll(&mut cx).is_ready() {
                    drop(self.tasks.remove(k));
                } else {
                    k += 1;
                }
            }
            let spawned = std::mem::take(&mut jvm.state().spawned);
            let quiet = spawned.is_empty() && jvm.get(|s| s.tick) == before;
            self.tasks.extend(spawned);
            if quiet {
                return (jvm.get(|s| s.wake), true);
            }
        }
        (jvm.get(|s| s.wake), false)
    }

    /// Drops every task (the process is gone).
    pub(crate) fn clear(&mut self) {
        self.tasks.clear();
    }

    /// How many tasks there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jvm() -> Jvm {
        Jvm::new(InstanceId::new("10.0.0.9@-@9").expect("a valid id"))
    }

    #[test]
    fn a_sleeping_task_wakes_at_its_time_and_a_call_waits_for_its_reply() {
        let j = jvm();
        let mut tasks = Tasks::default();
        let done = Rc::new(RefCell::new(Vec::new()));
        let (a, d) = (j.clone(), Rc::clone(&done));
        j.spawn(async move {
            a.sleep(100).await;
            d.borrow_mut().push("slept");
            let reply = a
                .call(RegistryOp::Get(shardjob_core::registry::NodePath::root()))
                .await;
            d.borrow_mut()
                .push(if matches!(reply, RegistryReply::Node(None)) {
                    "answered"
                } else {
                    "?"
                });
        });
        assert_eq!(tasks.run(&j), (Some(100), true));
        j.state().now = 99;
        assert_eq!(tasks.run(&j), (Some(100), true));
        j.state().now = 100;
        assert_eq!(tasks.run(&j), (None, true));
        assert_eq!(*done.borrow(), vec!["slept"]);
        let out = std::mem::take(&mut j.state().out);
        let Some(Out::Request { id, .. }) = out.first() else {
            panic!("no request: {out:?}")
        };
        j.state().reply(*id, RegistryReply::Node(None));
        tasks.run(&j);
        assert_eq!(*done.borrow(), vec!["slept", "answered"]);
        assert_eq!(tasks.len(), 0);
    }

    #[test]
    fn a_lost_connection_is_retried_three_times_after_backoffs() {
        let j = jvm();
        let mut tasks = Tasks::default();
        let result = Rc::new(RefCell::new(None));
        let (a, r) = (j.clone(), Rc::clone(&result));
        j.spawn(async move {
            let reply = a
                .call(RegistryOp::Get(shardjob_core::registry::NodePath::root()))
                .await;
            *r.borrow_mut() = Some(reply);
        });
        let mut sent = 0;
        for wait in [1_000, 2_000, 3_000] {
            tasks.run(&j);
            let out = std::mem::take(&mut j.state().out);
            let Some(Out::Request { id, .. }) = out.first() else {
                panic!("no request")
            };
            sent += 1;
            j.state()
                .reply(*id, RegistryReply::Failed(RegistryError::ConnectionLoss));
            let wake = tasks.run(&j).0.expect("a backoff");
            let now = j.get(|s| s.now);
            assert_eq!(wake, now + wait);
            j.state().now = wake;
        }
        tasks.run(&j);
        let out = std::mem::take(&mut j.state().out);
        let Some(Out::Request { id, .. }) = out.first() else {
            panic!("no fourth request")
        };
        sent += 1;
        j.state()
            .reply(*id, RegistryReply::Failed(RegistryError::ConnectionLoss));
        tasks.run(&j);
        assert_eq!(sent, 4);
        assert!(matches!(
            *result.borrow(),
            Some(RegistryReply::Failed(RegistryError::ConnectionLoss))
        ));
    }
}
