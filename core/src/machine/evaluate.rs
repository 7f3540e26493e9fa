//! When and which jobs are decided on (every input ends here), and what is reported of their plan.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    pub(crate) fn backoff_of(&mut self, job: JobId, now: Now) -> Mono {
        let base = ms(self.opts.retry_backoff).max(1);
        let Some(j) = self.jobs.get_mut(&job) else {
            return now.mono.after(base);
        };
        let delay = base << j.backoff.min(4);
        j.backoff = j.backoff.saturating_add(1);
        now.mono.after(delay)
    }

    pub(crate) fn failed(
        &mut self,
        job: Option<JobId>,
        purpose: &'static str,
        error: RegistryError,
    ) {
        let job = job
            .and_then(|id| self.jobs.get(&id))
            .map(|j| j.name().to_owned());
        self.out
            .push_back(Command::Event(MachineEvent::RegistryFailed {
                job,
                purpose,
                error,
            }));
    }

    // ----- evaluation -----

    pub(crate) fn evaluate_all(&mut self, now: Now) {
        for id in self.jobs.ids() {
            self.evaluate(id, now);
        }
        self.maybe_probe(now);
        self.finish_shutdown_if_done();
    }

    pub(crate) fn evaluate(&mut self, job: JobId, now: Now) {
        self.evaluate_job(job, now);
        self.index_wake(job);
        self.note_change(job);
        self.report_plan(job);
    }

    /// Reports what changed in the job's plan as this instance's view shows it: the items it
    /// owns, and whether a re-shard is pending ([`MachineEvent::ItemsOwned`],
    /// [`MachineEvent::ReshardingPending`]). A job whose subtree is not loaded reports nothing.
    pub(crate) fn report_plan(&mut self, job: JobId) {
        let me = Arc::clone(&self.me);
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if j.phase == Phase::Waiting {
            return;
        }
        let view = j.cache.view();
        let pending = view.necessary.is_some();
        if pending != j.necessary_reported {
            j.necessary_reported = pending;
            self.out
                .push_back(Command::Event(MachineEvent::ReshardingPending {
                    job: j.name().to_owned(),
                    pending,
                }));
        }
        // A plan not written yet (no item has an owner) is no news.
        if j.owned_reported.is_none() && !view.items.values().any(|v| v.owner.is_some()) {
            return;
        }
        let owned = view
            .items
            .iter()
            .filter(|(_, v)| v.owner.as_ref() == Some(&*me))
            .map(|(i, _)| *i);
        if j.owned_reported
            .as_ref()
            .is_some_and(|r| r.iter().copied().eq(owned.clone()))
        {
            return;
        }
        let items: Vec<u32> = owned.collect();
        j.owned_reported = Some(items.clone());
        self.out.push_back(Command::Event(MachineEvent::ItemsOwned {
            job: j.name().to_owned(),
            items,
        }));
    }

    /// An evaluation by the safety sweep of a job that is not due: its decision should be
    /// the one taken before, and counts as a change (see [`Machine::late_wakes`]) only if it
    /// is not.
    pub(crate) fn evaluate_swept(&mut self, job: JobId, now: Now) {
        let state = |m: &Self| m.jobs.get(&job).map(|j| (j.wake, j.wait));
        let before = state(self);
        self.evaluate_job(job, now);
        self.index_wake(job);
        if state(self) != before {
            self.note_change(job);
        }
    }

    /// Counts a change to the job's view or decision (see [`Machine::changes`]).
    pub(crate) fn note_change(&mut self, job: JobId) {
        self.changes += 1;
        if let Some(j) = self.jobs.get_mut(&job) {
            j.changed = self.changes;
        }
    }

    /// Enters the job's `wake` in the ordered index (and drops a job that is gone).
    pub(crate) fn index_wake(&mut self, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if j.wake != j.wake_indexed {
            if let Some(t) = j.wake_indexed {
                self.timers.wakes.remove(&(t, job));
            }
            if let Some(t) = j.wake {
                self.timers.wakes.insert((t, job));
            }
            j.wake_indexed = j.wake;
        }
    }

    /// Stops hosting a job: drops it and its entry in the wake index. What was reported of its
    /// plan is withdrawn: this instance owns none of its items, and no re-shard is pending here
    /// (a job hosted again starts its reports afresh).
    pub(crate) fn forget_job(&mut self, job: JobId) {
        let Some(j) = self.jobs.remove(&job) else {
            return;
        };
        self.clock.held.remove(&job);
        if let Some(t) = j.wake_indexed {
            self.timers.wakes.remove(&(t, job));
        }
        if planted!(self.opts, StalePlanReport) {
            return;
        }
        if j.owned_reported.as_ref().is_some_and(|o| !o.is_empty()) {
            self.out.push_back(Command::Event(MachineEvent::ItemsOwned {
                job: j.name().to_owned(),
                items: Vec::new(),
            }));
        }
        if j.necessary_reported {
            self.out
                .push_back(Command::Event(MachineEvent::ReshardingPending {
                    job: j.name().to_owned(),
                    pending: false,
                }));
        }
    }

    pub(crate) fn evaluate_job(&mut self, job: JobId, now: Now) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        j.wake = None;
        if j.leaving.is_some() && j.phase == Phase::Waiting {
            // A job never loaded has written nothing; past the shutdown's grace, the session's
            // close takes this instance's nodes with it. Either way the leave does not wait
            // for a load that may never succeed (an ACL that denies reads, a name the
            // registry refuses).
            let grace_over = self.shutdown.is_some_and(|d| now.mono >= d);
            if j.last_reload.is_none() || grace_over {
                self.leave_unloaded(job, now);
                return;
            }
        }
        let live = matches!(self.sess.state, Session::Live(_));
        match j.wait {
            Wait::Load(_) | Wait::Txn(_) => return,
            Wait::Backoff { until } if now.mono < until => {
                // Without a session the connection brings every job back; a retry time
                // already past would only wake the job again and again meanwhile.
                j.wake = Some(until);
                return;
            }
            Wait::Backoff { .. } => j.wait = Wait::Idle,
            Wait::Sync { revision, .. } if j.cache.seen.is_some_and(|s| s >= revision) => {
                j.wait = Wait::Idle;
            }
            Wait::Sync { deadline, .. } if now.mono >= deadline => {
                j.wait = Wait::Idle;
                self.start_load(job, now);
                return;
            }
            Wait::Sync { deadline, .. } => {
                j.wake = Some(deadline);
                return;
            }
            Wait::Idle => {}
        }
        if j.phase == Phase::Waiting {
            if live {
                self.start_load(job, now);
            }
            return;
        }
        let action = self.decide(job, now);
        if let Action::Txn(purpose, ops) = action {
            let id = self.request(Some(job), purpose, RegistryOp::Transact(ops), now);
            if let Some(j) = self.jobs.get_mut(&job) {
                j.wait = Wait::Txn(id);
            }
        }
    }
}
