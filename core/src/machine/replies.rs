//! What the replies to the machine's transactions lead to: claims, completions, the rest.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    pub(super) fn on_txn(
        &mut self,
        job: Option<String>,
        purpose: Purpose,
        reply: RegistryReply,
        now: Now,
    ) {
        let Some(name) = job else { return };
        let what = match &purpose {
            Purpose::Setup => "setup",
            Purpose::Elect => "election",
            Purpose::Abdicate => "abdication",
            Purpose::Reshard { .. } => "re-sharding",
            Purpose::Housekeeping { .. } => "housekeeping",
            Purpose::Flag => "re-sharding flag",
            Purpose::ConsumeTrigger { .. } => "trigger",
            Purpose::Leave => "leave",
            _ => "request",
        };
        match reply {
            RegistryReply::Transacted(results) => {
                let timeout = ms(self.opts.sync_timeout);
                let Some(j) = self.jobs.get_mut(&name) else {
                    return;
                };
                j.backoff = 0;
                j.await_own_writes(&results, now, timeout);
                match purpose {
                    Purpose::Setup => {
                        j.phase = Phase::Active;
                        self.out
                            .push_back(Command::Event(MachineEvent::JobActive { job: name }));
                    }
                    Purpose::Reshard {
                        owners,
                        moved_running,
                        last,
                        items,
                        remaining,
                        ..
                    } => {
                        j.reshard_moved.extend(moved_running);
                        let before = j.reshard_written;
                        j.reshard_written = before.saturating_add(items);
                        if !last
                            && j.reshard_written / RESHARD_PROGRESS_STEP
                                > before / RESHARD_PROGRESS_STEP
                        {
                            let written = j.reshard_written;
                            self.out
                                .push_back(Command::Event(MachineEvent::ReshardProgress {
                                    job: name.clone(),
                                    written,
                                    total: written.saturating_add(remaining),
                                }));
                        }
                        if last {
                            // The whole plan is written: the next difference is a new re-shard.
                            j.reshard_wanted = None;
                            j.reshard_written = 0;
                            j.reshard_plan = None;
                            let mut moved_running = std::mem::take(&mut j.reshard_moved);
                            moved_running.sort_unstable();
                            moved_running.dedup();
                            self.out.push_back(Command::Event(MachineEvent::Resharded {
                                job: name,
                                owners,
                                moved_running,
                            }));
                        }
                    }
                    // A part of the clean-up (not `last`): the next evaluation removes the rest.
                    Purpose::Housekeeping { last: true, .. } => {
                        j.last_housekeeping = Some(now.mono);
                    }
                    Purpose::ConsumeTrigger { parameter } => j.triggers.push_back(parameter),
                    Purpose::Leave => {
                        self.forget_job(&name);
                        self.out
                            .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
                        self.finish_shutdown_if_done();
                    }
                    _ => {}
                }
            }
            RegistryReply::Failed(error) => {
                let units = match &purpose {
                    Purpose::Reshard { units, .. } | Purpose::Housekeeping { units, .. } => *units,
                    _ => 0,
                };
                if self.split_on_too_large(&name, &error, units) {
                    return;
                }
                let class = error.class();
                // A conflict in an election or a trigger race is normal: someone else won.
                let quiet = class == ErrorClass::Conflict
                    && matches!(purpose, Purpose::Elect | Purpose::ConsumeTrigger { .. });
                if !quiet {
                    self.failed(Some(&name), what, error.clone());
                }
                if let Purpose::Housekeeping { .. } = purpose {
                    if let Some(j) = self.jobs.get_mut(&name) {
                        j.last_housekeeping = Some(now.mono);
                    }
                }
                // The registry is not as the plan expected: work it out again.
                if let Purpose::Reshard { .. } = purpose {
                    if let Some(j) = self.jobs.get_mut(&name) {
                        j.reshard_plan = None;
                    }
                }
                self.after_failure(&name, class, now);
            }
            _ => {}
        }
    }

    /// If the registry refused a transaction of `units` items as too large, lowers the job's
    /// limit to half of them and lets the next evaluation (right after this reply) try again
    /// with smaller transactions. Returns whether it did; a one-item transaction cannot be
    /// split and fails as usual.
    pub(super) fn split_on_too_large(
        &mut self,
        name: &str,
        error: &RegistryError,
        units: usize,
    ) -> bool {
        if !matches!(error.root_cause(), RegistryError::TooLarge(_)) || units <= 1 {
            return false;
        }
        let Some(j) = self.jobs.get_mut(name) else {
            return false;
        };
        let half = units / 2;
        let items = j.txn_items.map_or(half, |k| k.min(half)).max(1);
        j.txn_items = Some(items);
        self.out.push_back(Command::Event(MachineEvent::TxnSplit {
            job: name.to_owned(),
            items,
        }));
        true
    }

    pub(super) fn after_failure(&mut self, name: &str, class: ErrorClass, now: Now) {
        match class {
            ErrorClass::Conflict => {
                // The cache was stale or someone raced us: wait for the watch to catch up,
                // and reload if it does not within a backoff.
                let t = self.backoff_of(name, now);
                if let Some(j) = self.jobs.get_mut(name) {
                    j.retry_at = Some(t);
                    if j.backoff > 3 {
                        j.backoff = 0;
                        self.start_load(name, now);
                    }
                }
            }
            ErrorClass::Transient | ErrorClass::Fatal => {
                let t = self.backoff_of(name, now);
                if let Some(j) = self.jobs.get_mut(name) {
                    j.retry_at = Some(t);
                }
            }
            ErrorClass::LostSession => {}
        }
    }

    pub(super) fn on_claim(
        &mut self,
        job: Option<String>,
        claims: Vec<Claim>,
        reply: RegistryReply,
        now: Now,
    ) {
        let Some(name) = job else { return };
        let results = match reply {
            RegistryReply::Transacted(results) => results,
            RegistryReply::Failed(error) => {
                let class = error.class();
                let units = claims.iter().map(|c| c.items.len()).sum();
                if self.split_on_too_large(&name, &error, units) {
                    // Nothing was claimed; the next evaluation claims fewer items at a time.
                } else {
                    if class != ErrorClass::Conflict {
                        self.failed(Some(&name), "claim", error);
                    }
                    self.after_failure(&name, class, now);
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
                        self.start_execution(&name, fire, kind, counts, param, items, now);
                    }
                }
                return;
            }
            _ => return,
        };
        let lease_ok = self.lease_valid(now);
        let epoch = self.epoch;
        let session = self.session_id();
        let timeout = ms(self.opts.sync_timeout);
        let Some(j) = self.jobs.get_mut(&name) else {
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
            if !lease_ok || session.is_none() || epoch != self.epoch {
                // The claim succeeded, but too late to be sure of the session for long
                // enough: do not start; record the end at once so the markers go.
                let exec_items = items.into_iter().map(|(i, _)| i).collect();
                let id = self.insert_execution(&name, claim.fire, false, exec_items, true);
                self.send_completion(id, now);
                continue;
            }
            self.start_execution(
                &name,
                claim.fire,
                claim.kind,
                claim.counts_as_fire,
                claim.parameter,
                items,
                now,
            );
        }
    }

    pub(super) fn send_completion(&mut self, id: ExecutionId, now: Now) {
        let Some(sid) = self.session_id() else {
            // Suspended: retry when reconnected (or lose it on expiry).
            if let Some(e) = self.executions.get_mut(&id) {
                let t = now.mono.saturating_add(ms(self.opts.retry_backoff));
                e.retry_at = Some(t);
                self.retries.insert((t, id));
            }
            return;
        };
        let Some(exec) = self.executions.get_mut(&id) else {
            return;
        };
        if exec.completing {
            return;
        }
        exec.completing = true;
        let Some(job) = self.jobs.get(&exec.job) else {
            self.executions.remove(&id);
            return;
        };
        // With a transaction limit the end is recorded in parts, the first items first: each
        // part removes only its own items' markers and records only their fire.
        let take = job
            .txn_limit(&self.opts)
            .map_or(exec.items.len(), |k| k.min(exec.items.len()));
        exec.sending = take;
        let part = &exec.items[..take];
        let mut ops = vec![TxnOp::Check(Check::Session(sid))];
        for it in part {
            ops.push(TxnOp::Delete {
                path: job.paths.item_running(it.item),
                expected: Some(it.running_version),
            });
            if let Some(v) = it.failover {
                ops.push(TxnOp::Delete {
                    path: job.paths.item_failover(it.item),
                    expected: Some(v),
                });
            }
        }
        for it in part {
            let done = if exec.counts_as_fire && !planted!(self.opts, ForgetCompletion) {
                Some(it.record.done.map_or(exec.fire, |d| d.max(exec.fire)))
            } else {
                it.record.done
            };
            let record = ItemRecord { done, run: None };
            ops.push(TxnOp::Set {
                path: job.paths.item_execution(it.item),
                data: record.to_bytes(),
                expected: Some(it.record_version),
            });
        }
        let name = exec.job.clone();
        self.request(
            Some(&name),
            Purpose::Complete(id),
            RegistryOp::Transact(ops),
            now,
        );
    }

    pub(super) fn on_complete(&mut self, id: ExecutionId, reply: RegistryReply, now: Now) {
        match reply {
            RegistryReply::Transacted(results) => {
                let Some(exec) = self.executions.get_mut(&id) else {
                    return;
                };
                let take = exec.sending.min(exec.items.len());
                let recorded: Vec<ExecItem> = exec.items.drain(..take).collect();
                let (job, started) = (exec.job.clone(), exec.started);
                if planted!(self.opts, SplitCompletionDropsParts) {
                    exec.items.clear();
                }
                let rest = !exec.items.is_empty();
                if rest {
                    exec.completing = false;
                    exec.backoff = 0;
                } else {
                    self.executions.remove(&id);
                }
                if started {
                    self.out
                        .push_back(Command::Event(MachineEvent::RunRecorded {
                            job: job.clone(),
                            items: recorded.iter().map(|i| i.item).collect(),
                        }));
                }
                if let Some(j) = self.jobs.get_mut(&job) {
                    for it in &recorded {
                        if j.running.get(&it.item) == Some(&id) {
                            j.running.remove(&it.item);
                        }
                        j.last_end.insert(it.item, now.wall_ms());
                    }
                    j.await_own_writes(&results, now, ms(self.opts.sync_timeout));
                }
                if rest {
                    // The next part at once.
                    self.send_completion(id, now);
                }
            }
            RegistryReply::Failed(error) => {
                let class = error.class();
                let sent = self.executions.get(&id).map(|e| (e.job.clone(), e.sending));
                if let Some((job, units)) = sent {
                    if self.split_on_too_large(&job, &error, units) {
                        if let Some(e) = self.executions.get_mut(&id) {
                            e.completing = false;
                        }
                        self.send_completion(id, now);
                        return;
                    }
                }
                match class {
                    ErrorClass::Transient => {
                        if let Some(e) = self.executions.get_mut(&id) {
                            e.completing = false;
                            let delay = ms(self.opts.retry_backoff) << e.backoff.min(4);
                            e.backoff += 1;
                            let t = now.mono.saturating_add(delay);
                            e.retry_at = Some(t);
                            self.retries.insert((t, id));
                        }
                    }
                    class
                    @ (ErrorClass::LostSession | ErrorClass::Conflict | ErrorClass::Fatal) => {
                        let job = self.executions.get(&id).map(|e| e.job.clone());
                        self.failed(job.as_deref(), "completion", error);
                        if class == ErrorClass::LostSession {
                            self.complete_lost(id);
                        } else {
                            self.lose_part(id, now);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Gives up the part of an execution's end that the registry refused while the session
    /// lives (a conflict: the part's markers or records are not as the run left them, most
    /// often because an earlier attempt whose reply was lost did apply), and goes on with the
    /// later parts. Those were never sent: their `running` markers are still this session's
    /// and, once out of `running`, would look like a claim whose reply was lost; adopted, the
    /// fire would start again under the same fencing token. See [`Machine::adopt`].
    pub(super) fn lose_part(&mut self, id: ExecutionId, now: Now) {
        let Some(exec) = self.executions.get_mut(&id) else {
            return;
        };
        let take = exec.sending.min(exec.items.len());
        if take == 0 || take == exec.items.len() || planted!(self.opts, ConflictDropsRest) {
            self.complete_lost(id);
            return;
        }
        let lost: Vec<ExecItem> = exec.items.drain(..take).collect();
        exec.completing = false;
        exec.backoff = 0;
        let (job, started) = (exec.job.clone(), exec.started);
        self.give_up_items(job, id, &lost, started);
        self.send_completion(id, now);
    }

    /// Takes `items` of execution `id` out of the job's `running`, and, if the run started,
    /// says their end was not recorded ([`MachineEvent::CompletionLost`]).
    fn give_up_items(&mut self, job: String, id: ExecutionId, items: &[ExecItem], started: bool) {
        if let Some(j) = self.jobs.get_mut(&job) {
            for it in items {
                if j.running.get(&it.item) == Some(&id) {
                    j.running.remove(&it.item);
                }
            }
        }
        if started {
            self.out
                .push_back(Command::Event(MachineEvent::CompletionLost {
                    job,
                    items: items.iter().map(|i| i.item).collect(),
                }));
        }
    }

    /// Forgets an execution whose end cannot be recorded.
    pub(super) fn complete_lost(&mut self, id: ExecutionId) {
        let Some(exec) = self.executions.remove(&id) else {
            return;
        };
        if matches!(exec.pending, Some(Ahead::Prepared)) {
            self.out.push_back(Command::Discard(id));
        }
        self.give_up_items(exec.job, id, &exec.items, exec.started);
    }

    pub(super) fn finish_shutdown_if_done(&mut self) {
        if self.shutdown.is_none() || self.stopped {
            return;
        }
        if !self.jobs.is_empty() {
            return;
        }
        let busy = self
            .pending
            .values()
            .any(|p| matches!(p.purpose, Purpose::Complete(_) | Purpose::Leave));
        if !busy {
            self.out.push_back(Command::CloseSession);
            self.stopped = true;
        }
    }
}
