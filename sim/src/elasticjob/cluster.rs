//! The cluster's side of its ElasticJob nodes ([`JavaNode`]): adding one, its requests and
//! replies on the same wire as the shardjob nodes' (the same latency, races, lost replies and
//! cut-offs), its watch events, its runs in the run log, its faults. Kept apart from the
//! shardjob nodes: a world without ElasticJob nodes draws, does and hashes what it did before
//! they existed. The methods that take an ElasticJob node's index `j` panic on an index that
//! [`Cluster::add_elasticjob_node`] did not return, as slice indexing does.

use std::time::Duration;

use shardjob_core::InstanceId;
use shardjob_core::layout::{ItemLeaf, JobNode};
use shardjob_core::machine::record::{ItemRecord, RunKind};
use shardjob_core::registry::{
    NodePath, RegistryError, RegistryEvent, RegistryOp, RegistryReply, RequestId, SessionEvent,
    SessionId, TxnOp,
};

use super::jvm::{ConnEvent, Out, RunWhy};
use super::view::relative;
use super::{JavaItem, JavaJob, JavaNode, JavaRun, Source};
use crate::cluster::{Cluster, ClusterError, ClusterStart, JavaSharding, RunRecord};
use crate::network::InFlight;
use crate::node::{Link, Process};
use crate::timeline;

impl Cluster {
    /// Adds an ElasticJob 3.0.4 instance (one JVM) hosting `jobs`, and starts it: it opens
    /// its session and starts each job as ElasticJob does (see [`crate::elasticjob`]).
    /// Returns its index in [`Cluster::java`], or why it cannot be added (an invalid id, a
    /// job named twice, a job without a cron or whose configuration does not validate), in
    /// which case the cluster is left as it was.
    pub fn add_elasticjob_node(
        &mut self,
        id: &str,
        jobs: &[JavaJob],
    ) -> Result<usize, ClusterError> {
        let id = InstanceId::new(id).map_err(|e| ClusterError::InstanceId {
            id: id.to_owned(),
            why: e.to_string(),
        })?;
        let refuse = |job: &str, why: String| ClusterError::ElasticJob {
            node: id.to_string(),
            job: job.to_owned(),
            why,
        };
        let mut names = std::collections::BTreeSet::new();
        for job in jobs {
            let name = &job.config.job_name;
            if !names.insert(name.clone()) {
                return Err(refuse(name, "the job is named twice".into()));
            }
            job.config
                .validate()
                .map_err(|e| refuse(name, e.to_string()))?;
            if job.config.cron.is_none() {
                return Err(refuse(
                    name,
                    "a scheduled ElasticJob job needs a cron".into(),
                ));
            }
            if job.type_name.trim().is_empty() {
                return Err(refuse(name, "the job type name is empty".into()));
            }
        }
        let j = self.java.len();
        self.java.push(JavaNode::new(id.clone(), jobs));
        self.java[j].jvm.state().origin = self.wall_origin.timestamp_millis();
        self.note(("java-join", j), || format!("elasticjob {j} ({id}) starts"));
        self.connect_java(j);
        Ok(j)
    }

    /// ElasticJob node `j`'s view of now.
    fn java_time(&self, j: usize) -> (u64, i64) {
        let skew = self.java.get(j).map_or(0, |n| n.skew);
        let wall = self.wall_origin.timestamp_millis() + self.now as i64 + skew;
        (self.now, wall)
    }

    fn connect_java(&mut self, j: usize) {
        let now = Duration::from_millis(self.now);
        let info = self.store.open_session(self.session_timeout, now);
        let watch = self.store.watch(info.id, &NodePath::root(), now).ok();
        if let Some(w) = watch {
            if self.watch_delay > 0 {
                self.store
                    .set_watch_latency(w, Duration::from_millis(self.watch_delay));
            }
        }
        let node = &mut self.java[j];
        node.session = Some(info.id);
        node.watch = watch;
        node.connected_once = true;
        let jvm = node.jvm.clone();
        let main = jvm.clone();
        jvm.spawn(async move { main.main().await });
        self.poll_java(j);
    }

    /// Crashes ElasticJob node `j` (`kill -9`): it stops at once; its session expires after
    /// its timeout (its ephemeral nodes go then, its persistent `running` nodes stay). Its
    /// runs stop with it.
    pub fn crash_java(&mut self, j: usize) {
        let now = Duration::from_millis(self.now);
        self.note(("java-crash", j), || format!("elasticjob {j} is killed"));
        let node = &mut self.java[j];
        node.set_process(Process::Crashed);
        node.replies.clear();
        node.inbox.clear();
        node.tasks.clear();
        node.wake = None;
        self.network.drop_java(j);
        let runs = std::mem::take(&mut self.java[j].runs);
        for run in runs.into_values() {
            for item in run.items.iter().filter(|i| !i.ended) {
                let r = &mut self.runs[item.record];
                r.end = Some(self.now);
                r.cancelled = true;
                r.crashed = true;
            }
        }
        if let Some(s) = self.java[j].session {
            self.store.kill(s, now);
        }
    }

    /// Stops ElasticJob node `j` gracefully (SIGTERM): each job's fire in progress ends, its
    /// leader node (if it leads) and its instance node are removed, then its session closes.
    pub fn stop_java(&mut self, j: usize) {
        if !self.java[j].up() || self.java[j].stop_requested {
            return;
        }
        self.note(("java-stop", j), || {
            format!("elasticjob {j}: graceful stop")
        });
        self.java[j].stop_requested = true;
        let jvm = self.java[j].jvm.clone();
        jvm.with(|s| s.stopping = true);
        let me = jvm.clone();
        jvm.spawn(async move { me.graceful_stop().await });
        self.poll_java(j);
    }

    /// Cuts ElasticJob node `j` off from the registry (both ways).
    pub fn partition_java(&mut self, j: usize) {
        let now = Duration::from_millis(self.now);
        self.note(("java-partition", j), || {
            format!("elasticjob {j} is cut off")
        });
        let deaf = self.java[j].deaf();
        self.java[j].set_link(Link::Partitioned { deaf });
        if let Some(s) = self.java[j].session {
            self.store.suspend(s, now);
        }
    }

    /// Makes ElasticJob node `j` deaf: its requests reach the registry, nothing comes back.
    pub fn deafen_java(&mut self, j: usize) {
        self.note(("java-deaf", j), || format!("elasticjob {j} hears nothing"));
        let link = match self.java[j].link() {
            Link::Connected | Link::Deaf => Link::Deaf,
            Link::Partitioned { .. } => Link::Partitioned { deaf: true },
        };
        self.java[j].set_link(link);
        if let Some(w) = self.java[j].watch {
            self.store.hold_watch(w);
        }
    }

    /// Heals ElasticJob node `j`'s partition (and deafness); an expired session is renewed
    /// (Curator opens a new one).
    pub fn heal_java(&mut self, j: usize) {
        let now = Duration::from_millis(self.now);
        self.note(("java-heal", j), || {
            format!("elasticjob {j} is reconnected")
        });
        let (deaf, partitioned) = (self.java[j].deaf(), self.java[j].partitioned());
        self.java[j].set_link(Link::Connected);
        if deaf {
            if let Some(w) = self.java[j].watch {
                self.store.release_watch(w);
            }
        }
        if !partitioned {
            return;
        }
        if let Some(s) = self.java[j].session {
            self.store.resume(s, now);
            if !self.store.is_alive(s) {
                self.renew_java(j);
            }
        }
    }

    /// Pauses ElasticJob node `j`'s whole process (a stop-the-world pause).
    pub fn pause_java(&mut self, j: usize) {
        let now = Duration::from_millis(self.now);
        if !self.java[j].active() {
            return;
        }
        self.note(("java-pause", j), || format!("elasticjob {j} pauses"));
        let since = self.now;
        self.java[j].set_process(Process::Paused { since });
        if let Some(s) = self.java[j].session {
            if !self.java[j].partitioned() {
                self.store.suspend(s, now);
            }
        }
    }

    /// Ends ElasticJob node `j`'s pause: its runs resume where they were.
    pub fn unpause_java(&mut self, j: usize) {
        let Some(since) = self.java[j].paused() else {
            return;
        };
        self.java[j].set_process(Process::Up);
        let now = Duration::from_millis(self.now);
        let frozen = self.now - since;
        self.note(("java-unpause", j), || {
            format!("elasticjob {j} resumes after {frozen} ms")
        });
        let resumed = self.now;
        for run in self.java[j].runs.values_mut() {
            for item in run.items.iter_mut().filter(|i| !i.ended) {
                item.ends += frozen;
                self.runs[item.record].resumed = Some(resumed);
            }
        }
        for reply in &mut self.java[j].replies {
            reply.0 = reply.0.max(resumed);
        }
        if !self.java[j].partitioned() {
            if let Some(s) = self.java[j].session {
                self.store.resume(s, now);
                if !self.store.is_alive(s) {
                    self.renew_java(j);
                }
            }
        }
        self.poll_java(j);
    }

    /// Sets ElasticJob node `j`'s wall clock `skew` ms off true time.
    pub fn set_java_skew(&mut self, j: usize, skew: i64) {
        if let Some(node) = self.java.get_mut(j) {
            node.skew = skew;
            self.skew_seen = self.skew_seen.max(skew.unsigned_abs());
        }
    }

    fn renew_java(&mut self, j: usize) {
        let now = Duration::from_millis(self.now);
        let Some(old) = self.java[j].session else {
            return;
        };
        if let Some(info) = self.store.reconnect(old, now) {
            self.java[j].session = Some(info.id);
        }
    }

    /// When ElasticJob node `j` next has something to do (for the cluster's clock).
    pub(crate) fn java_next(&self, j: usize) -> Option<u64> {
        let node = &self.java[j];
        if !node.active() {
            return None;
        }
        let mut next: Option<u64> = None;
        let mut at = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        if let Some(t) = node.wake {
            at(t.max(self.now + 1));
        }
        if let Some(d) = node.inbox.front() {
            at(d.0.max(self.now + 1));
        }
        for r in &node.replies {
            at(r.0.max(self.now + 1));
        }
        if let Some(t) = node.first_end() {
            at(t.max(self.now + 1));
        }
        next
    }

    /// Handles what is due to ElasticJob node `j` now. Whether anything was.
    pub(crate) fn step_java(&mut self, j: usize) -> bool {
        if !self.java[j].active() {
            return false;
        }
        let now = self.now;
        let mut progressed = false;
        let mut poll = false;
        if let Some(w) = self.java[j].watch {
            let events = self.store.take_events(w, Duration::from_millis(now));
            if !events.is_empty() {
                progressed = true;
                if self.network.races.watch_spread > 0 {
                    let at = (now + self.network.watch_lag()).max(self.java[j].wire.event);
                    self.java[j].wire.event = at;
                    self.java[j].inbox.push_back((at, events));
                } else {
                    self.deliver_java(j, events);
                    poll = true;
                }
            }
        }
        while self.java[j].inbox.front().is_some_and(|d| d.0 <= now) {
            if let Some((_, events)) = self.java[j].inbox.pop_front() {
                progressed = true;
                poll = true;
                self.deliver_java(j, events);
            }
        }
        if self.java[j].replies.iter().any(|r| r.0 <= now) {
            let node = &mut self.java[j];
            let (due, rest): (Vec<_>, Vec<_>) = node.replies.drain(..).partition(|r| r.0 <= now);
            node.replies = rest;
            let partitioned = node.partitioned();
            let mut s = node.jvm.state();
            for (_, id, reply) in due {
                let reply = if partitioned {
                    RegistryReply::Failed(RegistryError::ConnectionLoss)
                } else {
                    reply
                };
                s.reply(id, reply);
            }
            progressed = true;
            poll = true;
        }
        if self.java[j].first_end().is_some_and(|t| t <= now) {
            progressed = true;
            poll = true;
            self.end_java_items(j);
        }
        if self.java[j].wake.is_some_and(|t| t <= now) {
            progressed = true;
            poll = true;
        }
        if poll {
            self.poll_java(j);
        }
        progressed
    }

    /// Records the items of node `j`'s runs that ended by now; a run whose items all ended
    /// is over for its worker.
    fn end_java_items(&mut self, j: usize) {
        let now = self.now;
        let mut over = Vec::new();
        let mut notes = Vec::new();
        for (id, run) in &mut self.java[j].runs {
            for item in run.items.iter_mut().filter(|i| !i.ended && i.ends <= now) {
                item.ended = true;
                let r = &mut self.runs[item.record];
                r.end = Some(now);
                if !run.marked {
                    r.end_committed = Some(now);
                }
                notes.push((r.job.clone(), r.item));
            }
            if run.items.iter().all(|i| i.ended) {
                over.push(*id);
            }
        }
        for (job, item) in notes {
            self.note(("java-end", j, &job, item), || {
                format!("elasticjob {j}: {job}/{item} ends")
            });
        }
        let node = &mut self.java[j];
        for id in over {
            node.runs.remove(&id);
            node.jvm.state().ended.insert(id);
        }
        node.jvm.state().touch();
    }

    /// Polls node `j`'s tasks with its time, and carries out what they asked.
    pub(crate) fn poll_java(&mut self, j: usize) {
        if !self.java[j].active() {
            return;
        }
        let (now, wall) = self.java_time(j);
        let node = &mut self.java[j];
        {
            let mut s = node.jvm.state();
            s.now = now;
            s.wall = wall;
        }
        let jvm = node.jvm.clone();
        let (wake, settled) = node.tasks.run(&jvm);
        if !settled {
            self.invariant_violations.push((
                self.now,
                usize::MAX - j,
                format!("elasticjob {j}: its tasks never settled (a model task spins)"),
            ));
        }
        let out = std::mem::take(&mut jvm.state().out);
        let lag = self.network.timer_lag();
        self.java[j].wake = wake.map(|w| w.saturating_add(lag));
        for o in out {
            match o {
                Out::Request { id, op, ends } => self.send_java(j, id, op, ends),
                Out::Start {
                    run,
                    job,
                    items,
                    why,
                    marked,
                    parameter,
                } => self.start_java_run(j, run, &job, &items, why, marked, &parameter),
                Out::Missed { job, items, fire } => {
                    for item in items {
                        // A flag for a fire an S run had started (and not died in) already:
                        // the J's misfire loop replays it over the items it has now.
                        let ran = self.runs.iter().any(|r| {
                            !r.java
                                && r.job == job
                                && r.item == item
                                && r.fire == fire
                                && !crate::checkers::once::died(r)
                        });
                        if ran {
                            self.java_flagged_after_run
                                .insert((job.clone(), item, fire));
                        }
                        let e = self.java_missed.entry((job.clone(), item)).or_insert(fire);
                        *e = (*e).max(fire);
                    }
                }
                Out::Note(text) => {
                    self.note(("java-note", j, text.as_str()), || {
                        format!("elasticjob {j}: {text}")
                    });
                }
                Out::Close => {
                    let now = Duration::from_millis(self.now);
                    self.note(("java-close", j), || {
                        format!("elasticjob {j} closes its session and exits")
                    });
                    if let Some(s) = self.java[j].session.take() {
                        let _ = self.store.close_session(s, now);
                        if !self.store.is_alive(s) {
                            self.session_ended(s);
                        }
                    }
                    self.java[j].tasks.clear();
                    self.java[j].wake = None;
                    self.java[j].set_process(Process::Stopped);
                }
            }
        }
    }

    /// Hands node `j` watch events: node events to its jobs' caches (and listeners), session
    /// events to its connection-state thread.
    fn deliver_java(&mut self, j: usize, events: Vec<RegistryEvent>) {
        let jvm = self.java[j].jvm.clone();
        let mut renew = false;
        let mut reload = false;
        for e in events {
            match e {
                RegistryEvent::Node(w) => {
                    let mut s = jvm.state();
                    let job = w.path.segments().next().unwrap_or_default().to_owned();
                    let Some(state) = s.jobs.get_mut(&job) else {
                        continue;
                    };
                    let Some(rel) = relative(&job, w.path.as_str()) else {
                        continue;
                    };
                    if rel.starts_with("leader/") && rel.contains("/latch") {
                        state.latch_events += 1;
                    }
                    if let Some(event) = state.cache.apply(rel, &w) {
                        if state.listening {
                            state.events.push_back(event);
                        }
                    }
                    s.touch();
                }
                RegistryEvent::Session(s) => {
                    self.note(("java-session", j, format!("{s:?}")), || {
                        format!("elasticjob {j}: {}", timeline::session(&s))
                    });
                    let event = match s {
                        SessionEvent::Suspended(_) | SessionEvent::Expired(_) => {
                            Some(ConnEvent::Unavailable)
                        }
                        SessionEvent::Reconnected(_) => Some(ConnEvent::Reconnected),
                        SessionEvent::Connected(info) => {
                            let current = self.java[j].session;
                            if current.is_none_or(|c| info.id > c) {
                                self.java[j].session = Some(info.id);
                            }
                            reload = true;
                            Some(ConnEvent::Reconnected)
                        }
                        SessionEvent::Closed => None,
                    };
                    if matches!(s, SessionEvent::Expired(_)) && !self.java[j].partitioned() {
                        renew = true;
                    }
                    let mut st = jvm.state();
                    for job in st.jobs.values_mut() {
                        job.latch_events += 1;
                    }
                    if let Some(event) = event {
                        st.conn_events.push_back(event);
                    }
                    st.touch();
                }
            }
        }
        if reload {
            // A new session: the caches missed what happened meanwhile; each reloads and
            // hands its listeners the differences (Curator's cache rebuilds).
            let jobs: Vec<String> = jvm.get(|s| {
                s.jobs
                    .iter()
                    .filter(|(_, job)| job.listening)
                    .map(|(name, _)| name.clone())
                    .collect()
            });
            for job in jobs {
                let me = jvm.clone();
                jvm.spawn(async move { me.load_cache(&job, true).await });
            }
        }
        if renew {
            self.renew_java(j);
        }
    }

    /// Sends a request of ElasticJob node `j`, as [`Cluster`] sends a shardjob node's.
    fn send_java(&mut self, j: usize, id: RequestId, op: RegistryOp, ends: Vec<(u64, u32)>) {
        let lost = self.network.loses(0);
        let answered = !(self.java[j].deaf() || lost);
        let timeout = (
            self.now + self.request_timeout,
            id,
            RegistryReply::Failed(RegistryError::Timeout),
        );
        self.requests_java += 1;
        if !self.network.travels() || self.java[j].partitioned() {
            let session = self.java[j].session;
            let wall = self.java_time(j).1;
            let reply = self.execute_java(j, session, wall, op, &ends);
            let reply = if answered {
                let at = if self.network.travels() {
                    self.java_reply_time(j)
                } else {
                    self.now + self.latency
                };
                (at, id, reply)
            } else {
                timeout
            };
            self.java[j].replies.push(reply);
            return;
        }
        let at = (self.now + self.network.leg()).max(self.java[j].wire.request);
        self.java[j].wire.request = at;
        if !answered {
            self.java[j].replies.push(timeout);
        }
        let session = self.java[j].session;
        let wall = self.java_time(j).1;
        self.network.send(
            at,
            InFlight {
                node: j,
                java: true,
                ends,
                session,
                wall,
                id,
                op,
                answered,
            },
        );
    }

    /// When an answer sent to ElasticJob node `j` now arrives.
    pub(crate) fn java_reply_time(&mut self, j: usize) -> u64 {
        let at = (self.now + self.network.leg()).max(self.java[j].wire.reply);
        self.java[j].wire.reply = at;
        at
    }

    /// A request of ElasticJob node `j` that reached the registry: applied, answered.
    pub(crate) fn arrive_java(&mut self, r: InFlight) {
        let reply = self.execute_java(r.node, r.session, r.wall, r.op, &r.ends);
        if r.answered {
            let at = self.java_reply_time(r.node);
            self.java[r.node].replies.push((at, r.id, reply));
        }
    }

    /// Applies a request of ElasticJob node `j` to the store, and records what the world
    /// needs of it: a registration that starts its job's cluster, the queueing of an item
    /// for failover (which fire it replays), the committed ends of runs.
    fn execute_java(
        &mut self,
        j: usize,
        session: Option<SessionId>,
        wall: i64,
        op: RegistryOp,
        ends: &[(u64, u32)],
    ) -> RegistryReply {
        let now = Duration::from_millis(self.now);
        let Some(s) = session else {
            return RegistryReply::Failed(RegistryError::ConnectionLoss);
        };
        let result = match op {
            RegistryOp::Get(p) => self.store.get(s, &p, now).map(RegistryReply::Node),
            RegistryOp::Children(p) => self.store.children(s, &p, now).map(RegistryReply::Children),
            RegistryOp::GetTree(p) => self.store.read_tree(s, &p, now).map(RegistryReply::Tree),
            RegistryOp::Transact(ops) => {
                let mut starting = Vec::new();
                let mut queued = Vec::new();
                let mut sharding = Vec::new();
                let mut items = Vec::new();
                for op in &ops {
                    if let TxnOp::Delete { path, .. } = op {
                        if let Some((job, JobNode::ShardingNecessary)) = JobNode::parse(path) {
                            sharding.push((job.to_owned(), JavaSharding::Sharded(self.now)));
                        }
                    }
                    let TxnOp::Create { path, .. } = op else {
                        continue;
                    };
                    match JobNode::parse(path) {
                        Some((job, JobNode::ShardingNecessary)) => {
                            sharding.push((job.to_owned(), JavaSharding::Flagged(self.now)));
                        }
                        Some((job, JobNode::Item(item))) => items.push((job.to_owned(), item)),
                        Some((job, JobNode::Instance(_))) => {
                            let dir = path.parent();
                            if dir.is_some_and(|d| self.store.tree(&d).len() == 1) {
                                starting.push(job.to_owned());
                            }
                        }
                        Some((job, JobNode::FailoverItem(item))) => {
                            queued.push((job.to_owned(), item));
                        }
                        _ => {}
                    }
                }
                // The fire each queued item's runner was running, read before the queueing
                // applies (its `running` node is deleted after it).
                // And whether its owner was registered then: J fails over the items of an
                // instance it saw DELETED, known by its id only, so a DELETED handled after the
                // owner registered again fails its new runs over.
                let queued: Vec<(String, u32, Option<Option<i64>>, bool)> = queued
                    .into_iter()
                    .map(|(job, item)| {
                        let fire = self.replayed_fire(&job, item);
                        let live = self
                            .read(&format!("/{job}/sharding/{item}/instance"))
                            .is_some_and(|owner| {
                                let path = format!("/{job}/instances/{}", owner.trim());
                                self.read(&path).is_some()
                            });
                        (job, item, fire, live)
                    })
                    .collect();
                let result = self.store.transact(s, ops, now);
                if result.is_ok() {
                    for (job, step) in sharding {
                        self.java_sharding.entry(job).or_default().push(step);
                    }
                    for key in items {
                        self.java_item_nodes.insert(key, self.now);
                    }
                    for job in starting {
                        self.starts.push(ClusterStart {
                            at: self.now,
                            job,
                            node: j,
                            wall,
                            java: true,
                        });
                    }
                    for (job, item, replayed, live) in queued {
                        let key = (job, item);
                        if live {
                            self.java_failover_of_live.insert(key.clone());
                        } else if replayed.is_some() {
                            self.java_failover_of_live.remove(&key);
                        }
                        // Queued again with no running node (its claimer died before the
                        // failover ran: `failovering`): the failover still replays the fire
                        // it was first queued for, not the item's latest run.
                        if replayed.is_none() && self.java_failover.contains_key(&key) {
                            continue;
                        }
                        let (job, item) = key;
                        // Else the fire the item's latest run had started.
                        let fire = replayed.or_else(|| {
                            self.runs
                                .iter()
                                .rev()
                                .find(|r| r.job == job && r.item == item)
                                .map(|r| Some(r.fire))
                        });
                        if let Some(fire) = fire {
                            self.java_failover.insert((job, item), fire);
                        }
                    }
                    for key in ends {
                        if let Some(&k) = self.java[j].records.get(key) {
                            if self.runs[k].end_committed.is_none() {
                                self.runs[k].end_committed = Some(self.now);
                            }
                        }
                    }
                }
                result.map(RegistryReply::Transacted)
            }
        };
        result.unwrap_or_else(RegistryReply::Failed)
    }

    /// The fire a failover of `job`'s `item` replays, as the item's `running` node (its
    /// runner) tells it: `Some(Some(fire))` for the fire a shardjob runner claimed (its
    /// execution record names the run in progress: it may have claimed ahead and died before
    /// the start; ElasticJob writes no record) or the latest the runner started; `Some(None)`
    /// for a runner that is no instance of the world (a foreign marker: the failover replays
    /// no fire); `None` when it does not tell (no running node, or no run of the runner's).
    fn replayed_fire(&self, job: &str, item: u32) -> Option<Option<i64>> {
        let runner = self.read(&format!("/{job}/sharding/{item}/running"))?;
        let runner = runner.trim();
        let record = self
            .read(&format!("/{job}/sharding/{item}/execution"))
            .and_then(|r| ItemRecord::parse(r.as_bytes()).ok())
            .and_then(|r| r.run);
        if let Some(run) = record.filter(|run| run.instance.as_str() == runner) {
            return Some(Some(run.fire));
        }
        let id_of = |r: &RunRecord| {
            if r.java {
                self.java.get(r.node).map(|n| n.id.as_str())
            } else {
                self.nodes.get(r.node).map(|n| n.id.as_str())
            }
        };
        let known = self.nodes.iter().any(|n| n.id.as_str() == runner)
            || self.java.iter().any(|n| n.id.as_str() == runner);
        if !known {
            return Some(None);
        }
        self.runs
            .iter()
            .rev()
            .find(|r| r.job == job && r.item == item && id_of(r) == Some(runner))
            .map(|r| Some(r.fire))
    }

    /// Starts a run of ElasticJob node `j`: one record per item, with the fire and kind the
    /// world knows it stands for (see [`crate::elasticjob`]).
    #[allow(clippy::too_many_arguments)]
    fn start_java_run(
        &mut self,
        j: usize,
        run: u64,
        job: &str,
        items: &[(u32, Option<u64>)],
        why: RunWhy,
        marked: bool,
        parameter: &str,
    ) {
        let origin = self.wall_origin.timestamp_millis();
        let wall = self.java_time(j).1;
        let mut entries = Vec::with_capacity(items.len());
        for &(item, token) in items {
            let key = (job.to_owned(), item);
            let (kind, fire) = match why {
                RunWhy::Normal(Source::Cron(f)) => (RunKind::Scheduled, f),
                RunWhy::Normal(Source::Trigger(at)) => (RunKind::Trigger, at),
                RunWhy::Failover(_) => {
                    if self.java_failover_of_live.remove(&key) {
                        self.java_live_failovers
                            .insert((job.to_owned(), item, j, self.now));
                    }
                    match self.java_failover.remove(&key) {
                        // A foreign marker's failover replays no fire: a run of no fire.
                        Some(None) => (RunKind::Trigger, wall),
                        replayed => {
                            let fire = replayed.flatten().or_else(|| {
                                self.runs
                                    .iter()
                                    .rev()
                                    .find(|r| r.job == job && r.item == item)
                                    .map(|r| r.fire)
                            });
                            (RunKind::Failover, fire.unwrap_or(wall))
                        }
                    }
                }
                RunWhy::Misfire(source) => {
                    let fire = self.java_missed.remove(&key).unwrap_or_else(|| {
                        // No missed fire recorded: a second run of the fire before it.
                        self.runs
                            .iter()
                            .rev()
                            .find(|r| r.job == job && r.item == item && r.java && r.node == j)
                            .map_or(source.at(), |r| r.fire)
                    });
                    (RunKind::Misfire, fire)
                }
            };
            if matches!(why, RunWhy::Normal(_) | RunWhy::Misfire(_)) {
                let owner = self.read(&format!("/{job}/sharding/{item}/instance"));
                if owner.is_some_and(|o| o.trim() != self.java[j].id.as_str()) {
                    self.java_stale_starts
                        .insert((job.to_owned(), item, j, self.now));
                }
            }
            let duration = (self.duration)(job, item, self.now);
            let record = self.runs.len();
            let token = token.unwrap_or(self.store.revision().0);
            self.note(("java-start", j, job, item, fire, token), || {
                format!(
                    "elasticjob {j}: start {job}/{item} ({}, fire {}, token {token})",
                    timeline::kind(kind),
                    timeline::fire(fire, origin),
                )
            });
            self.runs.push(RunRecord {
                node: j,
                java: true,
                job: job.to_owned(),
                item,
                fire,
                kind,
                job_parameter: parameter.to_owned(),
                token,
                start: self.now,
                wall_start: wall,
                end: None,
                cancel_signal: None,
                cancelled: false,
                crashed: false,
                resumed: None,
                end_committed: None,
                session: self.java[j].session,
                session_end: None,
            });
            self.java[j].records.insert((run, item), record);
            entries.push(JavaItem {
                ends: self.now + duration,
                record,
                ended: false,
            });
        }
        self.java[j].runs.insert(
            run,
            JavaRun {
                items: entries,
                marked,
            },
        );
    }

    /// The data of `job`'s `sharding/{item}/{leaf}` node, if it exists (for tests).
    pub fn item_node(&self, job: &str, item: u32, leaf: ItemLeaf) -> Option<(String, bool)> {
        let name = match leaf {
            ItemLeaf::Instance => "instance",
            ItemLeaf::Running => "running",
            ItemLeaf::Misfire => "misfire",
            ItemLeaf::Disabled => "disabled",
            ItemLeaf::Failover => "failover",
            ItemLeaf::Failovering => "failovering",
            ItemLeaf::Execution => "execution",
        };
        let path = NodePath::new(format!("/{job}/sharding/{item}/{name}")).ok()?;
        let node = self.store.node(&path)?;
        Some((
            String::from_utf8_lossy(&node.data).into_owned(),
            node.stat.ephemeral_owner.is_some(),
        ))
    }

    /// The ElasticJob node that leads `job` now, as the registry shows it, if any.
    pub fn leader_of_java(&self, job: &str) -> Option<usize> {
        let id = self.read(&format!("/{job}/leader/election/instance"))?;
        self.java.iter().position(|n| n.id.as_str() == id)
    }

    /// The runs of `job` by ElasticJob nodes, in start order.
    pub fn java_runs_of(&self, job: &str) -> Vec<&RunRecord> {
        self.runs
            .iter()
            .filter(|r| r.java && r.job == job)
            .collect()
    }
}
