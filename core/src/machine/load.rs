//! Loading a job's subtree, and reading its configuration off the cache.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    pub(crate) fn start_load(&mut self, job: JobId, now: Now) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        j.phase = Phase::Waiting;
        j.buffer.clear();
        let root = j.paths.root().clone();
        let id = self.request(Some(job), Purpose::Load, RegistryOp::GetTree(root), now);
        if let Some(j) = self.jobs.get_mut(&job) {
            j.wait = Wait::Load(id);
        }
    }

    pub(crate) fn on_load(
        &mut self,
        id: RequestId,
        job: Option<JobId>,
        reply: RegistryReply,
        now: Now,
    ) {
        let Some(job) = job else { return };
        let Some(j) = self.jobs.get_mut(&job) else {
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
        if j.wait != Wait::Load(id) {
            // A later load replaced this one: its snapshot and the events buffered since do
            // not fit together.
            return;
        }
        j.wait = Wait::Idle;
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
                self.refresh_config(job);
            }
            RegistryReply::Failed(error) => {
                j.load_error = Some(error.to_string());
                self.failed(Some(job), "load", error.clone());
                let backoff = self.backoff_of(job, now);
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.phase = Phase::Waiting;
                    j.wait = Wait::Backoff { until: backoff };
                }
            }
            _ => {}
        }
    }

    /// Reads the registry's configuration of a job into `config` (or reports it unusable).
    pub(crate) fn refresh_config(&mut self, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if j.phase == Phase::Waiting {
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
                    if c.job_name == j.name() {
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
                let seconds = config.max_time_diff_seconds;
                let new = j.config.as_ref().is_none_or(|c| !Arc::ptr_eq(c, &config));
                if new && seconds != -1 && !self.opts.registry_clock {
                    self.out
                        .push_back(Command::Event(MachineEvent::UnhonouredTimeDiff {
                            job: j.name().to_owned(),
                            seconds,
                        }));
                }
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
                            job: j.name().to_owned(),
                            error,
                        }));
                }
            }
        }
    }
}
