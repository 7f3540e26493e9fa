//! What the replies to the machine's transactions lead to: claims, completions, the rest.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    pub(crate) fn on_txn(
        &mut self,
        job: Option<JobId>,
        purpose: Purpose,
        reply: RegistryReply,
        now: Now,
    ) {
        let Some(job) = job else { return };
        let what = match &purpose {
            Purpose::Setup => "setup",
            Purpose::Elect => "election",
            Purpose::Abdicate => "abdication",
            Purpose::Reshard { .. } => "re-sharding",
            Purpose::Housekeeping { .. } => "housekeeping",
            Purpose::Foreign { .. } => "clearing stale nodes",
            Purpose::Flag => "re-sharding flag",
            Purpose::ConsumeTrigger { .. } => "trigger",
            Purpose::Leave => "leave",
            _ => "request",
        };
        match reply {
            RegistryReply::Transacted(results) => {
                let timeout = ms(self.opts.sync_timeout);
                let Some(j) = self.jobs.get_mut(&job) else {
                    return;
                };
                j.backoff = 0;
                j.await_own_writes(&results, now, timeout);
                let name = j.name().to_owned();
                match purpose {
                    // Unless the subtree is being read again meanwhile: the load's snapshot
                    // decides, and events are buffered for it until then.
                    Purpose::Setup if j.phase != Phase::Waiting => {
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
                        // A reply that comes after the leadership went reports on this part
                        // alone.
                        let mut gone = LeaderState::default();
                        let lead = j.leader.as_deref_mut().unwrap_or(&mut gone);
                        lead.moved.extend(moved_running);
                        let before = lead.written;
                        lead.written = before.saturating_add(items);
                        if !last
                            && lead.written / RESHARD_PROGRESS_STEP > before / RESHARD_PROGRESS_STEP
                        {
                            let written = lead.written;
                            self.out
                                .push_back(Command::Event(MachineEvent::ReshardProgress {
                                    job: name.clone(),
                                    written,
                                    total: written.saturating_add(remaining),
                                }));
                        }
                        if last {
                            // The whole plan is written: the next difference is a new re-shard.
                            lead.wanted = None;
                            lead.written = 0;
                            lead.plan = None;
                            let mut moved_running = std::mem::take(&mut lead.moved);
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
                        if let Some(lead) = &mut j.leader {
                            lead.last_housekeeping = Some(now.mono);
                        }
                    }
                    Purpose::Foreign { cleared, .. } => {
                        use crate::machine::leader::stale::Settle;
                        for c in cleared {
                            let settled = match c.settle {
                                Settle::FailOver(fire) => StaleSettle::FailedOver { fire },
                                Settle::GiveUp(fire) => StaleSettle::GivenUp { fire },
                                Settle::Keep => StaleSettle::Removed,
                            };
                            self.out
                                .push_back(Command::Event(MachineEvent::StaleRunningCleared {
                                    job: name.clone(),
                                    item: c.item,
                                    path: c.path.to_string(),
                                    value: c.value,
                                    settled,
                                }));
                        }
                    }
                    Purpose::ConsumeTrigger { parameter } => j.triggers.push_back(parameter),
                    Purpose::Leave => {
                        self.forget_job(job);
                        self.out
                            .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
                        self.finish_shutdown_if_done();
                    }
                    _ => {}
                }
            }
            RegistryReply::Failed(error) => {
                let units = match &purpose {
                    Purpose::Reshard { units, .. }
                    | Purpose::Housekeeping { units, .. }
                    | Purpose::Foreign { units, .. } => *units,
                    _ => 0,
                };
                if self.split_on_too_large(job, &error, units) {
                    return;
                }
                let class = error.class();
                // A conflict in an election or a trigger race is normal: someone else won.
                let quiet = class == ErrorClass::Conflict
                    && matches!(purpose, Purpose::Elect | Purpose::ConsumeTrigger { .. });
                if !quiet {
                    self.failed(Some(job), what, error.clone());
                }
                if let Purpose::Housekeeping { .. } = purpose {
                    if let Some(lead) = self.jobs.get_mut(&job).and_then(|j| j.leader.as_mut()) {
                        lead.last_housekeeping = Some(now.mono);
                    }
                }
                // The registry is not as the plan expected: work it out again.
                if let Purpose::Reshard { .. } = purpose {
                    if let Some(lead) = self.jobs.get_mut(&job).and_then(|j| j.leader.as_mut()) {
                        lead.plan = None;
                    }
                }
                self.after_failure(job, class, now);
            }
            _ => {}
        }
    }

    /// If the registry refused a transaction of `units` items as too large, lowers the job's
    /// limit to half of them and lets the next evaluation (right after this reply) try again
    /// with smaller transactions. Returns whether it did; a one-item transaction cannot be
    /// split and fails as usual.
    pub(crate) fn split_on_too_large(
        &mut self,
        job: JobId,
        error: &RegistryError,
        units: usize,
    ) -> bool {
        if !matches!(error.root_cause(), RegistryError::TooLarge(_)) || units <= 1 {
            return false;
        }
        let Some(j) = self.jobs.get_mut(&job) else {
            return false;
        };
        let half = units / 2;
        let items = j.txn_items.map_or(half, |k| k.min(half)).max(1);
        j.txn_items = Some(items);
        self.out.push_back(Command::Event(MachineEvent::TxnSplit {
            job: j.name().to_owned(),
            items,
        }));
        true
    }

    pub(crate) fn after_failure(&mut self, job: JobId, class: ErrorClass, now: Now) {
        match class {
            ErrorClass::Conflict => {
                // The cache was stale or someone raced us: wait for the watch to catch up,
                // and reload if it does not within a backoff.
                let t = self.backoff_of(job, now);
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.back_off(t);
                    if j.backoff > 3 {
                        j.backoff = 0;
                        self.start_load(job, now);
                    }
                }
            }
            ErrorClass::Transient | ErrorClass::Fatal => {
                let t = self.backoff_of(job, now);
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.back_off(t);
                }
            }
            ErrorClass::LostSession => {}
        }
    }
}

impl Machine {
    /// The reply to a [`Command::Registry`] request.
    pub fn handle_registry_reply(&mut self, id: RequestId, reply: RegistryReply, now: Now) {
        self.noticing_clock(now, |m| m.apply_registry_reply(id, reply, now));
    }

    pub(crate) fn apply_registry_reply(&mut self, id: RequestId, reply: RegistryReply, now: Now) {
        let Some(p) = self.requests.pending.remove(&id) else {
            return;
        };
        let ok = !matches!(reply, RegistryReply::Failed(_));
        let doubt_before = self.sess.in_doubt;
        if ok && p.epoch == self.sess.epoch {
            self.sess.confirmed = Some(self.sess.confirmed.map_or(p.sent, |c| c.max(p.sent)));
            if self.sess.in_doubt && self.lease_valid(now) {
                self.sess.in_doubt = false;
            }
        }
        if self.sess.probe == Some(id) {
            self.sess.probe = None;
        }
        if ok && p.epoch == self.sess.epoch && matches!(p.purpose, Purpose::Probe) {
            self.sess.probe_ok = self.sess.probe_ok.max(id.0);
        }
        if let Some(job) = &p.job {
            if let Some(j) = self.jobs.get_mut(job) {
                if j.wait == Wait::Txn(id) {
                    j.wait = Wait::Idle;
                }
            }
        }
        if p.epoch != self.sess.epoch {
            // A reply for a session that is gone. Claims and completions of that session are
            // void: its markers vanished with it.
            if let Purpose::Complete(exec) = p.purpose {
                self.complete_lost(exec);
            }
            self.evaluate_all(now);
            return;
        }
        let p_job = p.job.or_else(|| match &p.purpose {
            Purpose::Complete(exec) => self.executions.get(exec).map(|e| e.job),
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
            Purpose::Adopt(groups) => self.on_adopt(p.job, groups, reply, now),
            purpose => self.on_txn(p.job, purpose, reply, now),
        }
        // The jobs that wait for a confirmed session, once a reply confirms it: a probe's, or
        // any other that leaves the lease valid (while other jobs' claims and completions
        // confirm the session, no probe is due at all). Only those jobs: evaluating every job
        // on each confirmation would cost O(jobs) every quarter timeout while anything runs.
        if ok && !self.sess.waiters.is_empty() && (probe || self.lease_valid(now)) {
            for job in std::mem::take(&mut self.sess.waiters) {
                self.evaluate(job, now);
            }
        }
        if doubt_before != self.sess.in_doubt {
            self.evaluate_all(now);
        } else if let Some(job) = p_job {
            self.evaluate(job, now);
            self.maybe_probe(now);
            self.finish_shutdown_if_done();
        } else {
            self.finish_shutdown_if_done();
        }
    }
}
