//! Loading a job's subtree, and when and which jobs are decided on.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    pub(super) fn start_load(&mut self, name: &str, now: Now) {
        let Some(job) = self.jobs.get_mut(name) else {
            return;
        };
        job.phase = Phase::Loading;
        job.buffer.clear();
        job.sync = None;
        let root = job.paths.root().clone();
        let id = self.request(Some(name), Purpose::Load, RegistryOp::GetTree(root), now);
        if let Some(job) = self.jobs.get_mut(name) {
            job.busy = Some(id);
            job.loading = Some(id);
        }
    }

    pub(super) fn on_load(
        &mut self,
        id: RequestId,
        job: Option<String>,
        reply: RegistryReply,
        now: Now,
    ) {
        let Some(name) = job else { return };
        let Some(j) = self.jobs.get_mut(&name) else {
            return;
        };
        if let RegistryReply::Tree(tree) = &reply {
            // Whether stale or not, it shows whether this instance's node was there.
            let me = &self.opts.instance_id;
            let own = j.paths.instance(me);
            if let Some(node) = tree.nodes.iter().find(|n| n.path == own) {
                j.note_own_node(&node.stat);
            }
        }
        if j.loading != Some(id) {
            // A later load replaced this one: its snapshot and the events buffered since do
            // not fit together.
            return;
        }
        j.loading = None;
        match reply {
            RegistryReply::Tree(tree) => {
                let me = &self.opts.instance_id;
                self.disables += 1;
                // The events buffered meanwhile may be older than the snapshot (a watch may
                // lag behind a read): the cache skips those at or below its revision.
                let revision = if planted!(self.opts, StaleEventAfterReload) {
                    None
                } else {
                    tree.revision
                };
                j.cache.load(tree.nodes, revision, me);
                for ev in std::mem::take(&mut j.buffer) {
                    j.cache.apply(ev, me);
                }
                j.phase = Phase::Loaded;
                j.backoff = 0;
                j.unsure = false;
                j.load_error = None;
                j.last_reload = Some(now.mono);
                self.refresh_config(&name);
            }
            RegistryReply::Failed(error) => {
                j.load_error = Some(error.to_string());
                self.failed(Some(&name), "load", error.clone());
                let backoff = self.backoff_of(&name, now);
                if let Some(j) = self.jobs.get_mut(&name) {
                    j.phase = Phase::Waiting;
                    j.retry_at = Some(backoff);
                }
            }
            _ => {}
        }
    }

    pub(super) fn backoff_of(&mut self, name: &str, now: Now) -> u64 {
        let base = ms(self.opts.retry_backoff).max(1);
        let Some(j) = self.jobs.get_mut(name) else {
            return now.mono + base;
        };
        let delay = base << j.backoff.min(4);
        j.backoff = j.backoff.saturating_add(1);
        now.mono.saturating_add(delay)
    }

    pub(super) fn failed(
        &mut self,
        job: Option<&str>,
        purpose: &'static str,
        error: RegistryError,
    ) {
        self.out
            .push_back(Command::Event(MachineEvent::RegistryFailed {
                job: job.map(str::to_owned),
                purpose,
                error,
            }));
    }

    /// Reads the registry's configuration of a job into `config` (or reports it unusable).
    pub(super) fn refresh_config(&mut self, name: &str) {
        let Some(j) = self.jobs.get_mut(name) else {
            return;
        };
        if matches!(j.phase, Phase::Waiting | Phase::Loading) {
            return;
        }
        let Some(data) = j.cache.config() else {
            return;
        };
        // Parsing YAML is costly: only when the text changed since the last parse.
        let changes = j.cache.config_changes();
        if j.config_seen == Some(changes) {
            return;
        }
        j.config_seen = Some(changes);
        // The text this machine wrote from its local configuration reads back as that
        // configuration (`to_yaml` and `from_yaml` round-trip): no parse.
        let written = j
            .written_config
            .take()
            .is_some_and(|w| w.as_bytes() == data);
        let parsed = if written {
            Ok(Arc::clone(&j.local))
        } else {
            std::str::from_utf8(data)
                .map_err(|_| "the config node is not UTF-8 text".to_owned())
                .and_then(|text| {
                    if text.trim().is_empty() {
                        return Err("the config node is empty".to_owned());
                    }
                    JobConfig::from_yaml_with(text, Strictness::Lenient, &self.opts.known_types)
                        .map_err(|e| e.to_string())
                })
                .and_then(|c| {
                    if c.job_name == name {
                        Ok(c)
                    } else {
                        Err(format!("the config node names job {:?}", c.job_name))
                    }
                })
                // One copy per distinct configuration: the local one while the registry's
                // says the same, and the one in force while it does not change.
                .map(|config| match &j.config {
                    _ if *j.local == config => Arc::clone(&j.local),
                    Some(current) if **current == config => Arc::clone(current),
                    _ => Arc::new(config),
                })
        };
        match parsed {
            Ok(config) => {
                j.config = Some(config);
                j.last_config_error = None;
                if j.phase == Phase::Blocked {
                    j.phase = Phase::Loaded;
                }
            }
            Err(error) => {
                if j.last_config_error.as_deref() != Some(&error) {
                    j.last_config_error = Some(error.clone());
                    self.out
                        .push_back(Command::Event(MachineEvent::ConfigInvalid {
                            job: name.to_owned(),
                            error,
                        }));
                }
            }
        }
    }

    // ----- evaluation -----

    pub(super) fn evaluate_all(&mut self, now: Now) {
        let names: Vec<String> = self.jobs.keys().cloned().collect();
        for name in names {
            self.evaluate(&name, now);
        }
        self.maybe_probe(now);
        self.finish_shutdown_if_done();
    }

    pub(super) fn evaluate(&mut self, name: &str, now: Now) {
        self.evaluate_job(name, now);
        self.index_wake(name);
        self.note_change(name);
    }

    /// An evaluation by the safety sweep of a job that is not due: its decision should be
    /// the one taken before, and counts as a change (see [`Machine::late_wakes`]) only if it
    /// is not.
    pub(super) fn evaluate_swept(&mut self, name: &str, now: Now) {
        let state = |m: &Self| m.jobs.get(name).map(|j| (j.wake, j.busy, j.loading));
        let before = state(self);
        self.evaluate_job(name, now);
        self.index_wake(name);
        if state(self) != before {
            self.note_change(name);
        }
    }

    /// Counts a change to the job's view or decision (see [`Machine::changes`]).
    pub(super) fn note_change(&mut self, name: &str) {
        self.changes += 1;
        if let Some(j) = self.jobs.get_mut(name) {
            j.changed = self.changes;
        }
    }

    /// Enters the job's `wake` in the ordered index (and drops a job that is gone).
    pub(super) fn index_wake(&mut self, name: &str) {
        let Some(j) = self.jobs.get_mut(name) else {
            return;
        };
        if j.wake != j.wake_indexed {
            if let Some(t) = j.wake_indexed {
                self.wakes.remove(&(t, name.to_owned()));
            }
            if let Some(t) = j.wake {
                self.wakes.insert((t, name.to_owned()));
            }
            j.wake_indexed = j.wake;
        }
    }

    /// Stops hosting a job: drops it and its entry in the wake index.
    pub(super) fn forget_job(&mut self, name: &str) {
        if let Some(j) = self.jobs.remove(name) {
            if let Some(t) = j.wake_indexed {
                self.wakes.remove(&(t, name.to_owned()));
            }
        }
    }

    pub(super) fn evaluate_job(&mut self, name: &str, now: Now) {
        let Some(j) = self.jobs.get_mut(name) else {
            return;
        };
        j.wake = None;
        if j.leaving && matches!(j.phase, Phase::Waiting | Phase::Loading) {
            // A job never loaded has written nothing; past the shutdown's grace, the session's
            // close takes this instance's nodes with it. Either way the leave does not wait
            // for a load that may never succeed (an ACL that denies reads, a name the
            // registry refuses).
            let grace_over = self.shutdown.is_some_and(|d| now.mono >= d);
            if j.last_reload.is_none() || grace_over {
                self.leave_unloaded(name, now);
                return;
            }
        }
        if j.phase == Phase::Waiting {
            if matches!(self.session, Session::Live(_)) && j.retry_at.is_none_or(|t| now.mono >= t)
            {
                j.retry_at = None;
                self.start_load(name, now);
            } else {
                // Without a session the connection brings every job back; a retry time
                // already past would only wake the job again and again meanwhile.
                j.wake = j.retry_at.filter(|t| *t > now.mono);
            }
            return;
        }
        if j.busy.is_some() || j.phase == Phase::Loading {
            return;
        }
        if let Some(t) = j.retry_at {
            if now.mono < t {
                j.wake = Some(t);
                return;
            }
            j.retry_at = None;
        }
        if let Some((rev, deadline)) = j.sync {
            if j.cache.seen.is_some_and(|s| s >= rev) {
                j.sync = None;
            } else if now.mono >= deadline {
                j.sync = None;
                self.start_load(name, now);
                return;
            } else {
                j.wake = Some(deadline);
                return;
            }
        }
        let action = self.decide(name, now);
        if let Action::Txn(purpose, ops) = action {
            let id = self.request(Some(name), purpose, RegistryOp::Transact(ops), now);
            if let Some(j) = self.jobs.get_mut(name) {
                j.busy = Some(id);
            }
        }
    }

    /// Leaves a job whose subtree is not loaded, without a transaction: once its local runs
    /// have ended (a shutdown cancels them at its grace deadline), it is dropped, and
    /// [`MachineEvent::LeftUnloaded`] says why before [`MachineEvent::JobLeft`].
    pub(super) fn leave_unloaded(&mut self, name: &str, now: Now) {
        let Some(j) = self.jobs.get_mut(name) else {
            return;
        };
        if !j.running.is_empty() {
            j.wake = j.leave_deadline.or(self.shutdown).filter(|d| *d > now.mono);
            return;
        }
        let reason = match (&j.load_error, j.last_reload) {
            (Some(e), None) => format!("its registry subtree could never be loaded: {e}"),
            (None, None) => "its registry subtree was not loaded yet".to_owned(),
            (Some(e), Some(_)) => format!(
                "its registry subtree could not be loaded again before the shutdown's grace ended: {e}"
            ),
            (None, Some(_)) => {
                "its registry subtree was not loaded again before the shutdown's grace ended"
                    .to_owned()
            }
        };
        let name = name.to_owned();
        self.forget_job(&name);
        self.out
            .push_back(Command::Event(MachineEvent::LeftUnloaded {
                job: name.clone(),
                reason,
            }));
        self.out
            .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
    }
}
