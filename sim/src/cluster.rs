//! A deterministic cluster: several real core machines over one in-memory store, on virtual
//! time. The ground the simulator stands on, and what the core's behaviour tests drive by hand.
//!
//! Everything runs on one thread in one order: registry requests are applied to the store when
//! a machine emits them and answered after [`Cluster::latency`]; watch events are delivered as
//! the store releases them; executions last what [`Cluster::duration`] says and end early when
//! cancelled (after [`Cluster::cancel_delay`]), unless their job ignores cancellation.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use shardjob_backend_mem::{Store, WatchId};
use shardjob_core::machine::{
    Command, Execution, ExecutionId, ItemOutcome, JobSpec, Machine, MachineEvent, MachineOptions,
    Now,
};
use shardjob_core::registry::{
    self, NodePath, RegistryEvent, RegistryOp, RegistryReply, RequestId, SessionEvent, SessionId,
};
use shardjob_core::{InstanceId, JobConfig};

/// One start or end of an item run, as the cluster saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// Which node ran it.
    pub node: usize,
    /// The job.
    pub job: String,
    /// The item.
    pub item: u32,
    /// The scheduled fire (epoch ms).
    pub fire: i64,
    /// Why it ran.
    pub kind: shardjob_core::machine::record::RunKind,
    /// Its fencing token.
    pub token: u64,
    /// Virtual ms it started.
    pub start: u64,
    /// Virtual ms it ended, once it has.
    pub end: Option<u64>,
    /// Whether it was cancelled.
    pub cancelled: bool,
}

/// How long a run of (job, item) lasts, ms.
pub type RunDuration = Box<dyn Fn(&str, u32) -> u64>;

/// One instance of the cluster.
#[derive(Debug)]
pub struct Node {
    /// The real core machine.
    pub machine: Machine,
    /// Its live session, if any.
    pub session: Option<SessionId>,
    watch: Option<WatchId>,
    /// Whether the process runs (false after a crash, until restarted).
    pub up: bool,
    /// Whether the node is cut off from the registry.
    pub partitioned: bool,
    replies: Vec<(u64, RequestId, RegistryReply)>,
    running: BTreeMap<ExecutionId, Running>,
    /// Events the machine reported, with their virtual time.
    pub events: Vec<(u64, MachineEvent)>,
}

#[derive(Debug)]
struct Running {
    exec: Execution,
    ends: u64,
    cancelled: bool,
    runs: Vec<usize>,
}

/// Several machines over one store.
pub struct Cluster {
    /// The shared registry store.
    pub store: Store,
    /// Virtual time, ms.
    pub now: u64,
    /// The wall-clock time at virtual 0.
    pub wall_origin: DateTime<Utc>,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Every item run seen.
    pub runs: Vec<RunRecord>,
    /// Registry round-trip latency, ms.
    pub latency: u64,
    /// How long a run of (job, item) lasts, ms.
    pub duration: RunDuration,
    /// How long a cancelled run takes to stop, ms.
    pub cancel_delay: u64,
    /// Jobs whose runs ignore cancellation.
    pub ignore_cancel: BTreeSet<String>,
    /// The session timeout of every node.
    pub session_timeout: Duration,
    /// Registry requests sent, per node.
    pub requests: Vec<u64>,
    /// Transactions sent, per node.
    pub transactions: Vec<u64>,
    operator: Option<SessionId>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("now", &self.now)
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl Cluster {
    /// An empty cluster starting at 2026-11-22 06:00:00 UTC with 1 ms registry latency, runs
    /// of 100 ms and a 3 s session timeout.
    pub fn new() -> Self {
        Self {
            store: Store::new(),
            now: 0,
            wall_origin: Utc
                .with_ymd_and_hms(2026, 11, 22, 6, 0, 0)
                .single()
                .unwrap_or_default(),
            nodes: Vec::new(),
            runs: Vec::new(),
            latency: 1,
            duration: Box::new(|_, _| 100),
            cancel_delay: 10,
            ignore_cancel: BTreeSet::new(),
            session_timeout: Duration::from_secs(3),
            requests: Vec::new(),
            transactions: Vec::new(),
            operator: None,
        }
    }

    /// The machine's view of now.
    pub fn time(&self) -> Now {
        Now {
            mono: self.now,
            wall: self.wall_origin + chrono::Duration::milliseconds(self.now as i64),
        }
    }

    fn store_now(&self) -> Duration {
        Duration::from_millis(self.now)
    }

    /// Adds a node with the given jobs and connects it. Returns its index.
    pub fn add_node(&mut self, id: &str, jobs: &[JobConfig]) -> usize {
        let opts = MachineOptions::new(InstanceId::new(id).unwrap_or_else(|e| panic!("{e}")));
        self.add_node_with(opts, jobs)
    }

    /// Adds a node with options.
    pub fn add_node_with(&mut self, opts: MachineOptions, jobs: &[JobConfig]) -> usize {
        let mut machine = Machine::new(opts);
        let now = self.time();
        for config in jobs {
            let spec = JobSpec {
                config: config.clone(),
                job_type: "SIMPLE".into(),
            };
            machine.add_job(spec, now).unwrap_or_else(|e| panic!("{e}"));
        }
        self.nodes.push(Node {
            machine,
            session: None,
            watch: None,
            up: true,
            partitioned: false,
            replies: Vec::new(),
            running: BTreeMap::new(),
            events: Vec::new(),
        });
        self.requests.push(0);
        self.transactions.push(0);
        let n = self.nodes.len() - 1;
        self.connect(n);
        n
    }

    fn connect(&mut self, n: usize) {
        let now = self.store_now();
        let info = self.store.open_session(self.session_timeout, now);
        let watch = self.store.watch(info.id, &NodePath::root(), now).ok();
        let node = &mut self.nodes[n];
        node.session = Some(info.id);
        node.watch = watch;
        let t = self.time();
        self.nodes[n]
            .machine
            .handle_registry_event(RegistryEvent::Session(SessionEvent::Connected(info)), t);
        self.pump(n);
    }

    /// Crashes a node: it stops at once without closing its session, which expires after its
    /// timeout. Its runs are gone (not reported).
    pub fn crash(&mut self, n: usize) {
        let now = self.store_now();
        let node = &mut self.nodes[n];
        node.up = false;
        node.replies.clear();
        let ids: Vec<ExecutionId> = node.running.keys().copied().collect();
        for id in ids {
            if let Some(r) = node.running.remove(&id) {
                for i in r.runs {
                    self.runs[i].end = Some(self.now);
                    self.runs[i].cancelled = true;
                }
            }
        }
        if let Some(s) = self.nodes[n].session {
            self.store.kill(s, now);
        }
    }

    /// Cuts a node off from the registry (both ways).
    pub fn partition(&mut self, n: usize) {
        let now = self.store_now();
        self.nodes[n].partitioned = true;
        if let Some(s) = self.nodes[n].session {
            self.store.suspend(s, now);
        }
    }

    /// Heals a node's partition.
    pub fn heal(&mut self, n: usize) {
        let now = self.store_now();
        self.nodes[n].partitioned = false;
        if let Some(s) = self.nodes[n].session {
            self.store.resume(s, now);
            if !self.store.is_alive(s) {
                self.renew(n);
            }
        }
    }

    fn renew(&mut self, n: usize) {
        let now = self.store_now();
        let Some(old) = self.nodes[n].session else {
            return;
        };
        if let Some(info) = self.store.reconnect(old, now) {
            self.nodes[n].session = Some(info.id);
        }
    }

    /// Operator command on a node's machine.
    pub fn trigger(&mut self, n: usize, job: &str) {
        let t = self.time();
        self.nodes[n]
            .machine
            .trigger(job, None, t)
            .unwrap_or_else(|e| panic!("{e}"));
        self.pump(n);
    }

    /// Starts a graceful shutdown of a node.
    pub fn shutdown(&mut self, n: usize) {
        let t = self.time();
        self.nodes[n].machine.shutdown(t);
        self.pump(n);
    }

    /// Carries out a node's commands until it has none.
    fn pump(&mut self, n: usize) {
        while let Some(cmd) = self.nodes[n].machine.poll_command() {
            if !self.nodes[n].up {
                continue;
            }
            match cmd {
                Command::Registry { id, op } => {
                    self.requests[n] += 1;
                    if matches!(op, RegistryOp::Transact(_)) {
                        self.transactions[n] += 1;
                    }
                    let reply = self.execute(n, op);
                    let at = self.now + self.latency;
                    self.nodes[n].replies.push((at, id, reply));
                }
                Command::Start(exec) => {
                    let mut runs = Vec::new();
                    let mut longest = 0;
                    for item in &exec.items {
                        longest = longest.max((self.duration)(&exec.job_name, item.item));
                        runs.push(self.runs.len());
                        self.runs.push(RunRecord {
                            node: n,
                            job: exec.job_name.clone(),
                            item: item.item,
                            fire: exec.fire_time.timestamp_millis(),
                            kind: exec.kind,
                            token: item.fencing_token.0,
                            start: self.now,
                            end: None,
                            cancelled: false,
                        });
                    }
                    let ends = self.now + longest;
                    self.nodes[n].running.insert(
                        exec.id,
                        Running {
                            exec,
                            ends,
                            cancelled: false,
                            runs,
                        },
                    );
                }
                Command::Cancel { id, .. } => {
                    let now = self.now;
                    let delay = self.cancel_delay;
                    if let Some(r) = self.nodes[n].running.get_mut(&id) {
                        if !self.ignore_cancel.contains(&r.exec.job_name) {
                            r.cancelled = true;
                            r.ends = r.ends.min(now + delay);
                        }
                    }
                }
                Command::CloseSession => {
                    let now = self.store_now();
                    if let Some(s) = self.nodes[n].session.take() {
                        let _ = self.store.close_session(s, now);
                    }
                    self.nodes[n].up = false;
                }
                Command::Event(e) => {
                    let now = self.now;
                    self.nodes[n].events.push((now, e));
                }
            }
        }
    }

    fn execute(&mut self, n: usize, op: RegistryOp) -> RegistryReply {
        let now = self.store_now();
        let Some(s) = self.nodes[n].session else {
            return RegistryReply::Failed(registry::RegistryError::ConnectionLoss);
        };
        let result = match op {
            RegistryOp::Get(p) => self.store.get(s, &p, now).map(RegistryReply::Node),
            RegistryOp::Children(p) => self.store.children(s, &p, now).map(RegistryReply::Children),
            RegistryOp::GetTree(p) => self.store.get_tree(s, &p, now).map(RegistryReply::Tree),
            RegistryOp::Transact(ops) => self
                .store
                .transact(s, ops, now)
                .map(RegistryReply::Transacted),
        };
        result.unwrap_or_else(RegistryReply::Failed)
    }

    /// Runs the cluster until virtual time `until` (ms), processing everything due.
    pub fn run_until(&mut self, until: u64) {
        loop {
            // Everything due now, in a fixed order: watch events, replies, run ends, timeouts.
            let mut progressed = true;
            while progressed {
                progressed = false;
                self.store.advance_to(self.store_now());
                for n in 0..self.nodes.len() {
                    progressed |= self.step_node(n);
                }
            }
            let next = self.next_time();
            match next {
                Some(t) if t <= until => self.now = t.max(self.now),
                _ => {
                    self.now = until.max(self.now);
                    self.store.advance_to(self.store_now());
                    let mut again = true;
                    while again {
                        again = false;
                        for n in 0..self.nodes.len() {
                            again |= self.step_node(n);
                        }
                    }
                    return;
                }
            }
        }
    }

    /// Runs for `ms` more milliseconds.
    pub fn run_for(&mut self, ms: u64) {
        let until = self.now + ms;
        self.run_until(until);
    }

    fn step_node(&mut self, n: usize) -> bool {
        if !self.nodes[n].up {
            return false;
        }
        let mut progressed = false;
        let now = self.now;
        // Watch events.
        if let Some(w) = self.nodes[n].watch {
            let events = self.store.take_events(w, self.store_now());
            for ev in events {
                progressed = true;
                let renew = matches!(ev, RegistryEvent::Session(SessionEvent::Expired(_)));
                if let RegistryEvent::Session(SessionEvent::Connected(info)) = &ev {
                    self.nodes[n].session = Some(info.id);
                }
                let t = self.time();
                self.nodes[n].machine.handle_registry_event(ev, t);
                self.pump(n);
                if renew && !self.nodes[n].partitioned {
                    self.renew(n);
                }
            }
        }
        // Replies.
        let due: Vec<(u64, RequestId, RegistryReply)> = {
            let node = &mut self.nodes[n];
            let (due, rest): (Vec<_>, Vec<_>) = node.replies.drain(..).partition(|r| r.0 <= now);
            node.replies = rest;
            due
        };
        for (_, id, reply) in due {
            progressed = true;
            let reply = if self.nodes[n].partitioned {
                RegistryReply::Failed(registry::RegistryError::ConnectionLoss)
            } else {
                reply
            };
            let t = self.time();
            self.nodes[n].machine.handle_registry_reply(id, reply, t);
            self.pump(n);
        }
        // Runs that end.
        let ended: Vec<ExecutionId> = self.nodes[n]
            .running
            .iter()
            .filter(|(_, r)| r.ends <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in ended {
            progressed = true;
            let Some(r) = self.nodes[n].running.remove(&id) else {
                continue;
            };
            let mut outcomes = BTreeMap::new();
            for (k, item) in r.exec.items.iter().enumerate() {
                let outcome = if r.cancelled {
                    ItemOutcome::Cancelled
                } else {
                    ItemOutcome::Succeeded
                };
                outcomes.insert(item.item, outcome);
                if let Some(&i) = r.runs.get(k) {
                    self.runs[i].end = Some(now);
                    self.runs[i].cancelled = r.cancelled;
                }
            }
            let t = self.time();
            self.nodes[n]
                .machine
                .handle_execution_finished(id, outcomes, t);
            self.pump(n);
        }
        // Timeouts.
        if self.nodes[n]
            .machine
            .poll_timeout()
            .is_some_and(|t| t <= now)
        {
            progressed = true;
            let t = self.time();
            self.nodes[n].machine.handle_timeout(t);
            self.pump(n);
            // A timeout that stays due would spin: step past it.
            if self.nodes[n]
                .machine
                .poll_timeout()
                .is_some_and(|t| t <= now)
            {
                progressed = false;
            }
        }
        progressed
    }

    fn next_time(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut at = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        for node in self.nodes.iter().filter(|n| n.up) {
            if let Some(t) = node.machine.poll_timeout() {
                at(t.max(self.now + 1));
            }
            for r in &node.replies {
                at(r.0);
            }
            for r in node.running.values() {
                at(r.ends);
            }
        }
        if let Some(d) = self.store.next_deadline() {
            at(u64::try_from(d.as_millis())
                .unwrap_or(u64::MAX)
                .max(self.now + 1));
        }
        next
    }

    /// The current owner of each item of a job, from the store.
    pub fn owners(&self, job: &str) -> BTreeMap<u32, String> {
        let mut out = BTreeMap::new();
        let Ok(root) = NodePath::new(format!("/{job}/sharding")) else {
            return out;
        };
        for node in self.store.tree(&root) {
            let segs: Vec<&str> = node.path.segments().collect();
            if segs.len() == 4 && segs[3] == "instance" {
                if let Ok(item) = segs[2].parse() {
                    out.insert(item, String::from_utf8_lossy(&node.data).into_owned());
                }
            }
        }
        out
    }

    /// Writes a node as an operator would (creating it if missing), from a session of its own.
    pub fn operator_write(&mut self, path: &str, data: &[u8]) {
        let now = self.store_now();
        let path = NodePath::new(path).unwrap_or_else(|e| panic!("{e}"));
        let session = *self
            .operator
            .get_or_insert_with(|| self.store.open_session(Duration::from_secs(3600), now).id);
        let result = match self.store.node(&path) {
            Some(_) => self
                .store
                .set(session, &path, data.to_vec(), None, now)
                .map(|_| ()),
            None => self
                .store
                .create(
                    session,
                    &path,
                    data.to_vec(),
                    registry::CreateMode::Persistent,
                    now,
                )
                .map(|_| ()),
        };
        result.unwrap_or_else(|e| panic!("operator write of {path}: {e}"));
    }

    /// The data of a node in the store, as text.
    pub fn read(&self, path: &str) -> Option<String> {
        let node = self.store.node(&NodePath::new(path).ok()?)?;
        Some(String::from_utf8_lossy(&node.data).into_owned())
    }

    /// Whether a node exists in the store.
    pub fn exists(&self, path: &str) -> bool {
        NodePath::new(path)
            .ok()
            .and_then(|p| self.store.node(&p))
            .is_some()
    }

    /// Runs of a job, in start order.
    pub fn runs_of(&self, job: &str) -> Vec<&RunRecord> {
        self.runs.iter().filter(|r| r.job == job).collect()
    }

    /// Panics if two runs of the same (job, item) overlap in time, or a (job, item, fire)
    /// started twice without the first having been cut short.
    pub fn assert_no_overlap(&self) {
        for (a, ra) in self.runs.iter().enumerate() {
            for rb in self.runs.iter().skip(a + 1) {
                if ra.job != rb.job || ra.item != rb.item {
                    continue;
                }
                let a_end = ra.end.unwrap_or(u64::MAX);
                let b_end = rb.end.unwrap_or(u64::MAX);
                let overlap = ra.start < b_end && rb.start < a_end;
                assert!(!overlap, "overlapping runs:\n{ra:?}\n{rb:?}");
                assert!(
                    ra.token < rb.token || rb.start < ra.start,
                    "tokens must grow: {ra:?} {rb:?}"
                );
            }
        }
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}
