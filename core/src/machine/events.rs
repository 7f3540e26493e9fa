//! Watch events and registry replies: applied to the jobs' caches, then the jobs decided on.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    pub(super) fn apply_registry_events(
        &mut self,
        events: impl IntoIterator<Item = RegistryEvent>,
        now: Now,
    ) {
        let mut touched: Vec<Touched> = Vec::new();
        for event in events {
            match event {
                RegistryEvent::Session(s) => {
                    self.evaluate_touched(std::mem::take(&mut touched), now);
                    self.handle_session(s, now);
                }
                RegistryEvent::Node(ev) => self.apply_node_event(ev, &mut touched),
            }
        }
        self.evaluate_touched(touched, now);
    }

    /// Evaluates the jobs a batch of node events changed, but not one whose only changes are
    /// other instances' run markers and records of items that bear on nothing this instance
    /// decides (see [`Machine::bears_on_me`]). With every instance watching every job, each
    /// run of an item is seen by all of them; only a few have anything to decide about it.
    pub(super) fn evaluate_touched(&mut self, mut touched: Vec<Touched>, now: Now) {
        // In the order of the jobs' names, as everywhere else.
        touched.sort_unstable_by(|a, b| a.job.cmp(&b.job));
        for t in touched {
            if t.others || t.items.iter().any(|i| self.bears_on_me(&t.job, *i)) {
                self.evaluate(&t.job, now);
                if planted!(self.opts, ForgetWakes) {
                    if let Some(j) = self.jobs.get_mut(&t.job) {
                        j.wake = None;
                    }
                    self.index_wake(&t.job);
                }
            }
        }
    }

    /// Whether item `i` of job `name`, whose run marker or record changed, bears on what this
    /// instance decides. It does not when the job is active here and led by another instance,
    /// nothing of ours waits on the registry or on an orphan, and the item is neither ours
    /// (owned, run or recorded as run here) nor an orphan, nor, for the leader, beyond the count:
    /// a decision on it would be the one taken before, and the wake it set still stands.
    pub(super) fn bears_on_me(&self, name: &str, i: u32) -> bool {
        let Some(j) = self.jobs.get(name) else {
            return false;
        };
        let me = &self.opts.instance_id;
        let view = j.cache.view();
        if j.phase != Phase::Active
            || j.leaving
            || j.sync
                .is_some_and(|(rev, _)| j.cache.seen.is_some_and(|s| s >= rev))
            || !j.orphan_seen.is_empty()
            || j.running.contains_key(&i)
            || self.shutdown.is_some()
            || !view.corrupt.is_empty()
            || view
                .leader
                .as_deref()
                .is_none_or(|l| l == me.as_str() && j.reshard_idle != Some(j.cache.plan_version))
        {
            return true;
        }
        // The leader removes an item beyond the count once its run ends.
        let beyond = j
            .config
            .as_ref()
            .is_some_and(|c| i >= c.sharding_total_count);
        if beyond && view.leader.as_deref() == Some(me.as_str()) {
            return true;
        }
        let Some(v) = view.items.get(&i) else {
            return false;
        };
        let run = v.record.as_ref().and_then(|(r, _)| r.run.as_ref());
        v.owner.as_ref() == Some(me)
            || v.running
                .as_ref()
                .is_some_and(|(h, _)| h.trim() == me.as_str())
            || run.is_some_and(|r| r.instance == *me)
            || (run.is_some() && v.running.is_none() && v.failover.is_none())
    }

    /// Applies a node event to its job's cache and notes the job in `touched` if it should be
    /// evaluated.
    pub(super) fn apply_node_event(
        &mut self,
        ev: crate::registry::WatchEvent,
        touched: &mut Vec<Touched>,
    ) {
        let Some((job, node)) = JobNode::parse(&ev.path) else {
            return;
        };
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        if let (JobNode::Instance(id), Some(stat)) = (&node, &ev.stat) {
            if *id == self.opts.instance_id {
                j.note_own_node(stat);
            }
        }
        match j.phase {
            Phase::Waiting => return,
            Phase::Loading => {
                j.buffer.push(ev);
                return;
            }
            _ => {}
        }
        // Older than the snapshot the cache was loaded from: nothing changes.
        if j.cache.is_stale(&ev) {
            return;
        }
        if planted!(self.opts, StaleCache)
            && ev.kind == crate::registry::WatchEventKind::Deleted
            && matches!(node, JobNode::ItemState(_, ItemLeaf::Disabled))
        {
            return;
        }
        if view::bears_on_disabled(&node) {
            self.disables += 1;
        }
        let config = matches!(node, JobNode::Config | JobNode::Root);
        let run_item = match node {
            JobNode::ItemState(i, ItemLeaf::Running | ItemLeaf::Execution) => Some(i),
            _ => None,
        };
        let k = match touched.iter().position(|t| t.job == job) {
            Some(k) => k,
            None => {
                touched.push(Touched {
                    job: job.to_owned(),
                    others: false,
                    items: Vec::new(),
                });
                touched.len() - 1
            }
        };
        let t = &mut touched[k];
        // An item may be noted more than once (a search of the list per event would cost a
        // batch of k events k²); only whether any of them bears on this instance is asked.
        match run_item {
            Some(i) if t.items.last() != Some(&i) => t.items.push(i),
            Some(_) => {}
            None => t.others = true,
        }
        j.cache.apply_parsed(ev, Some(node), &self.opts.instance_id);
        self.changes += 1;
        j.changed = self.changes;
        if config {
            let name = touched[k].job.clone();
            self.refresh_config(&name);
        }
    }

    /// The reply to a [`Command::Registry`] request.
    pub fn handle_registry_reply(&mut self, id: RequestId, reply: RegistryReply, now: Now) {
        self.noticing_clock(now, |m| m.apply_registry_reply(id, reply, now));
    }

    pub(super) fn apply_registry_reply(&mut self, id: RequestId, reply: RegistryReply, now: Now) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        let ok = !matches!(reply, RegistryReply::Failed(_));
        let doubt_before = self.in_doubt;
        if ok && p.epoch == self.epoch {
            self.confirmed = Some(self.confirmed.map_or(p.sent, |c| c.max(p.sent)));
            if self.in_doubt && self.lease_valid(now) {
                self.in_doubt = false;
            }
        }
        if self.probe == Some(id) {
            self.probe = None;
        }
        if ok && p.epoch == self.epoch && matches!(p.purpose, Purpose::Probe) {
            self.probe_ok = self.probe_ok.max(id.0);
        }
        if let Some(job) = &p.job {
            if let Some(j) = self.jobs.get_mut(job) {
                if j.busy == Some(id) {
                    j.busy = None;
                }
            }
        }
        if p.epoch != self.epoch {
            // A reply for a session that is gone. Claims and completions of that session are
            // void: its markers vanished with it.
            if let Purpose::Complete(exec) = p.purpose {
                self.complete_lost(exec);
            }
            self.evaluate_all(now);
            return;
        }
        let p_job = p.job.clone().or_else(|| match &p.purpose {
            Purpose::Complete(exec) => self.executions.get(exec).map(|e| e.job.clone()),
            _ => None,
        });
        let probe = matches!(p.purpose, Purpose::Probe);
        if let (Some(job), RegistryReply::Failed(e)) = (&p_job, &reply) {
            let write = !matches!(p.purpose, Purpose::Load | Purpose::Probe);
            if write && e.class() == ErrorClass::Transient {
                if let Some(j) = self.jobs.get_mut(job) {
                    j.unsure = true;
                }
            }
        }
        match p.purpose {
            Purpose::Load => self.on_load(id, p.job, reply, now),
            Purpose::Probe => {}
            Purpose::Complete(exec) => self.on_complete(exec, reply, now),
            Purpose::Claim(claims) => self.on_claim(p.job, claims, reply, now),
            Purpose::Adopt(groups) => {
                let name = p.job.clone().unwrap_or_default();
                match reply {
                    RegistryReply::Transacted(_) if self.lease_valid(now) => {
                        let total = self
                            .jobs
                            .get(&name)
                            .and_then(|j| j.config.as_ref())
                            .map(|c| c.sharding_total_count);
                        for ((fire, kind), items) in groups {
                            // Claimed before the count shrank under it: not started now (the
                            // item's work belongs to others by the new count), but recorded
                            // as ended, so that its marker goes and the item can be removed.
                            let (gone, items): (Vec<_>, Vec<_>) = items
                                .into_iter()
                                .partition(|(it, _)| total.is_some_and(|n| it.item >= n));
                            if !gone.is_empty() {
                                let gone = gone.into_iter().map(|(it, _)| it).collect();
                                let id = self.insert_execution(&name, fire, false, gone, true);
                                self.send_completion(id, now);
                            }
                            if !items.is_empty() {
                                let counts = kind != RunKind::Trigger;
                                self.start_execution(&name, fire, kind, counts, None, items, now);
                            }
                        }
                    }
                    RegistryReply::Failed(error) => {
                        let units = groups.iter().map(|(_, items)| items.len()).sum();
                        if !self.split_on_too_large(&name, &error, units) {
                            self.after_failure(&name, error.class(), now);
                        }
                    }
                    _ => {}
                }
            }
            purpose => self.on_txn(p.job, purpose, reply, now),
        }
        // The jobs that wait for a confirmed session, once a reply confirms it: a probe's, or
        // any other that leaves the lease valid (while other jobs' claims and completions
        // confirm the session, no probe is due at all). Only those jobs: evaluating every job
        // on each confirmation would cost O(jobs) every quarter timeout while anything runs.
        if ok && !self.probe_waiters.is_empty() && (probe || self.lease_valid(now)) {
            for name in std::mem::take(&mut self.probe_waiters) {
                self.evaluate(&name, now);
            }
        }
        if doubt_before != self.in_doubt {
            self.evaluate_all(now);
        } else if let Some(job) = &p_job {
            self.evaluate(job, now);
            self.maybe_probe(now);
            self.finish_shutdown_if_done();
        } else {
            self.finish_shutdown_if_done();
        }
    }
}
