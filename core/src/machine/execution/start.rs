//! Starting executions: at once, or at their fire when claimed ahead; and giving back a claim
//! that cannot start.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

/// The most runs claimed ahead handed out (or given back) in one timeout: the rest stay due,
/// so a driver can carry out the first starts while the machine checks the next ones (see
/// [`Machine::next_start`]).
pub(crate) const START_CHUNK: usize = 32;

/// How much older than the claim's lead the last registry reply may be when a run claimed
/// ahead starts.
pub(crate) const FRESH_VIEW_MS: u64 = 500;

impl Machine {
    pub(crate) fn on_claim(
        &mut self,
        job: Option<JobId>,
        claims: Vec<Claim>,
        reply: RegistryReply,
        now: Now,
    ) {
        let Some(job) = job else { return };
        let results = match reply {
            RegistryReply::Transacted(results) => results,
            RegistryReply::Failed(error) => {
                let class = error.class();
                let units = claims.iter().map(|c| c.items.len()).sum();
                if self.split_on_too_large(job, &error, units) {
                    // Nothing was claimed; the next evaluation claims fewer items at a time.
                } else {
                    if class != ErrorClass::Conflict {
                        self.failed(Some(job), "claim", error);
                    }
                    self.after_failure(job, class, now);
                }
                if planted!(self.opts, IgnoreFailedClaim) {
                    for claim in claims {
                        let items = claim
                            .items
                            .iter()
                            .map(|c| {
                                let it = ExecItem {
                                    item: c.item,
                                    running_version: Version(0),
                                    record_version: Version(0),
                                    record: c.record.clone(),
                                    failover: None,
                                };
                                (it, Revision(0))
                            })
                            .collect();
                        let (fire, kind, counts) = (claim.fire, claim.kind, claim.counts_as_fire);
                        let param = claim.parameter;
                        self.start_execution(job, fire, kind, counts, param, items, now);
                    }
                }
                return;
            }
            _ => return,
        };
        let lease_ok = self.lease_valid(now);
        let epoch = self.sess.epoch;
        let session = self.session_id();
        let timeout = ms(self.opts.sync_timeout);
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        j.backoff = 0;
        j.await_own_writes(&results, now, timeout);
        if let Some(run) = &mut j.trigger_run {
            for claim in claims.iter().filter(|c| c.kind == RunKind::Trigger) {
                for c in &claim.items {
                    run.items.remove(&c.item);
                }
            }
            if run.items.is_empty() {
                j.trigger_run = None;
            }
        }
        for claim in claims {
            let mut items = Vec::new();
            for c in &claim.items {
                let (Some(running), Some(record)) = (
                    created_stat(&results, c.running_op),
                    written_version(&results, c.record_op),
                ) else {
                    continue;
                };
                let failover = c
                    .failover_op
                    .and_then(|i| created_stat(&results, i))
                    .map(|s| s.version);
                items.push((
                    ExecItem {
                        item: c.item,
                        running_version: running.version,
                        record_version: record,
                        record: c.record.clone(),
                        failover,
                    },
                    running.created,
                ));
            }
            if !lease_ok || session.is_none() || epoch != self.sess.epoch {
                // The claim succeeded, but too late to be sure of the session for long
                // enough: do not start; record the end at once so the markers go.
                let exec_items = items.into_iter().map(|(i, _)| i).collect();
                let id =
                    self.insert_execution(job, claim.fire, false, exec_items, Life::NEVER_STARTED);
                self.send_completion(id, now);
                continue;
            }
            self.start_execution(
                job,
                claim.fire,
                claim.kind,
                claim.counts_as_fire,
                claim.parameter,
                items,
                now,
            );
        }
    }

    /// Records a new execution and asks the driver to start it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_execution(
        &mut self,
        job: JobId,
        fire: i64,
        kind: RunKind,
        counts_as_fire: bool,
        parameter: Option<String>,
        items: Vec<(ExecItem, Revision)>,
        now: Now,
    ) -> Option<ExecutionId> {
        let j = self.jobs.get(&job)?;
        let config = j.config.clone()?;
        let name = j.name().to_owned();
        let runs: Vec<ItemRun> = items
            .iter()
            .map(|(it, token)| ItemRun {
                item: it.item,
                parameter: config.item_parameter(it.item).map(str::to_owned),
                fencing_token: *token,
            })
            .collect();
        let item_list: Vec<String> = runs.iter().map(|r| r.item.to_string()).collect();
        let exec_items = items.into_iter().map(|(it, _)| it).collect();
        let id = self.insert_execution(job, fire, counts_as_fire, exec_items, Life::Running);
        let job_parameter = match (&kind, &parameter) {
            (RunKind::Trigger, Some(p)) if !p.is_empty() => p.clone(),
            _ => config.job_parameter.clone(),
        };
        let task_id = format!(
            "{name}{DELIMITER}{}{DELIMITER}READY{DELIMITER}{}",
            item_list.join(","),
            self.opts.instance_id
        );
        let execution = Execution {
            id,
            job_name: name,
            task_id,
            sharding_total_count: config.sharding_total_count,
            job_parameter,
            fire_time: DateTime::<Utc>::from_timestamp_millis(fire).unwrap_or_default(),
            kind,
            items: runs,
        };
        if fire > now.wall_ms() && kind != RunKind::Trigger {
            // Claimed ahead: started when the fire comes.
            let at = now.mono_at(fire);
            if let Some(e) = self.executions.get_mut(&id) {
                e.life = Life::Ahead(if self.opts.prepare_ahead {
                    self.out.push_back(Command::Prepare(execution));
                    Ahead::Prepared
                } else {
                    Ahead::Held(execution)
                });
                self.timers.starts.insert((at, id));
            }
            let enabled = !self.disabled_since_claim(id);
            let disables = self.disables;
            if let Some(e) = self.executions.get_mut(&id) {
                e.enabled_at = enabled.then_some(disables);
            }
        } else if self.clock_held(job, now) {
            // Due at once, but the clock's hold came between the claim and its answer (the
            // job became shared with ElasticJob meanwhile, or the answer showed the clock
            // off): given back at the start, as a run claimed ahead is.
            let enabled = (!self.disabled_since_claim(id)).then_some(self.disables);
            if let Some(e) = self.executions.get_mut(&id) {
                e.life = Life::Ahead(Ahead::Held(execution));
                e.enabled_at = enabled;
                self.timers.starts.insert((now.mono, id));
            }
        } else {
            self.out.push_back(Command::Start(execution));
        }
        Some(id)
    }

    /// Hands the driver the executions claimed ahead whose fire has come, if the session is
    /// sure; releases them otherwise.
    pub(crate) fn start_due(&mut self, now: Now) {
        let mut handled = 0;
        // The view must be recent too: after a pause or a cut longer than the claim's lead,
        // an operator's disable may not have reached it. Then the claim is given back, and
        // claimed again with the registry's own checks.
        let fresh = matches!(self.sess.state, Session::Live(_))
            && self.sess.confirmed.is_some_and(|c| {
                now.mono.since(c) <= ms(self.opts.claim_ahead).saturating_add(FRESH_VIEW_MS)
            });
        let lease_ok = self.lease_valid(now) && fresh;
        while let Some(&(t, id)) = self.timers.starts.first() {
            if t > now.mono || handled == START_CHUNK {
                break;
            }
            handled += 1;
            self.timers.starts.remove(&(t, id));
            // Entries of executions given back or gone meanwhile are stale.
            let Some(e) = self.executions.get(&id) else {
                continue;
            };
            if !e.is_ahead() {
                continue;
            }
            // Nothing disabled at the claim, and no disable seen since: no need to look.
            let go = lease_ok
                && e.epoch == self.sess.epoch
                && (e.enabled_at == Some(self.disables) || !self.disabled_since_claim(id))
                && !self.gate_closed_since_claim(id)
                && !self.clock_held(e.job, now);
            let Some(e) = self.executions.get_mut(&id) else {
                continue;
            };
            if go {
                match std::mem::replace(&mut e.life, Life::Running) {
                    Life::Ahead(Ahead::Held(execution)) => {
                        self.out.push_back(Command::Start(execution));
                    }
                    Life::Ahead(Ahead::Prepared) => self.out.push_back(Command::StartPrepared(id)),
                    other => e.life = other,
                }
            } else {
                self.release(id, now);
            }
        }
    }

    /// Whether an operator disabled one of the execution's items, or this server, after the
    /// claim: a run claimed ahead then does not start.
    pub(crate) fn disabled_since_claim(&self, id: ExecutionId) -> bool {
        let Some(e) = self.executions.get(&id) else {
            return false;
        };
        let Some(j) = self.jobs.get(&e.job) else {
            return false;
        };
        let view = j.cache.view();
        !view.server_enabled(self.opts.instance_id.server_ip())
            || e.items
                .iter()
                .any(|it| view.items.get(&it.item).is_some_and(|v| v.disabled))
    }

    /// Whether ElasticJob's leader set the re-sharding flag after a claim made ahead of its
    /// fire (the claim checked the flag absent): the run then does not start, and its claim is
    /// given back (`docs/migration-design.md` 3.4, point 3). ElasticJob's leader shards at the
    /// fire once every `running` node is gone, and the item's owner under the new plan runs
    /// that fire; a run started here under the old plan would be its second. A J that owned
    /// the item could only have started at the fire, so giving the claim back narrows the
    /// window to ElasticJob's own: a flag set after a run's start.
    pub(crate) fn gate_closed_since_claim(&self, id: ExecutionId) -> bool {
        if planted!(self.opts, StartAheadPastTheGate) {
            return false;
        }
        let Some(e) = self.executions.get(&id) else {
            return false;
        };
        self.jobs.get(&e.job).is_some_and(|j| {
            let view = j.cache.view();
            view.necessary.is_some() && view.led_by_java()
        })
    }

    /// Whether the registry's clock holds the job's runs now (see `clock`): a step of the
    /// wall clock since the claim (which forgets the measurement, and moved the run's start
    /// by the step), or the claim's own answer showing the clock off. A run claimed ahead
    /// then does not start, and its claim is given back.
    pub(crate) fn clock_held(&self, job: JobId, now: Now) -> bool {
        let Some(j) = self.jobs.get(&job) else {
            return false;
        };
        let limit = job_clock_limit(j, j.cache.view(), &self.opts, now.mono);
        judge(self.clock.registry, limit) != ClockVerdict::Fine
    }

    /// Gives up an execution claimed ahead that never started: its markers go and its records
    /// return to what they were, so the fire is run later (here or elsewhere), not lost.
    pub(crate) fn release(&mut self, id: ExecutionId, now: Now) {
        let Some(e) = self.executions.get_mut(&id) else {
            return;
        };
        if matches!(e.life, Life::Ahead(Ahead::Prepared)) {
            self.out.push_back(Command::Discard(id));
        }
        if !planted!(self.opts, GiveBackAsDone) {
            e.counts_as_fire = false;
        }
        e.end();
        if e.epoch == self.sess.epoch && self.sess.state != Session::None {
            self.send_completion(id, now);
        } else {
            self.complete_lost(id);
        }
    }
}
