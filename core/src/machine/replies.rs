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
            Purpose::Settle { .. } => "settling orphaned runs",
            Purpose::LeftMarkers { .. } => "removing markers left behind",
            Purpose::Flag => "re-sharding flag",
            Purpose::Nudge { .. } => "re-sharding flag for owners gone",
            Purpose::Garbage { .. } => "deleting garbage instance nodes",
            Purpose::ConsumeTrigger { .. } => "trigger",
            Purpose::Leave => "leave",
            Purpose::Measure => "measuring the registry's clock",
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
                        let step = self.opts.reshard_progress_step.max(1);
                        if !last && lead.written / step > before / step {
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
                    Purpose::Foreign {
                        cleared, leftovers, ..
                    } => {
                        use crate::machine::leader::stale::Settle;
                        for (path, value) in leftovers {
                            self.out
                                .push_back(Command::Event(MachineEvent::JavaLeftOverCleared {
                                    job: name.clone(),
                                    path: path.to_string(),
                                    value,
                                }));
                        }
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
                    Purpose::Settle { items } => {
                        self.out
                            .push_back(Command::Event(MachineEvent::OrphansSettled {
                                job: name,
                                items,
                            }));
                    }
                    Purpose::LeftMarkers { cleared } => {
                        for (item, value) in cleared {
                            self.out
                                .push_back(Command::Event(MachineEvent::LeftMarkerRemoved {
                                    job: name.clone(),
                                    item,
                                    value,
                                }));
                        }
                    }
                    Purpose::Garbage { nodes } => {
                        for (path, value) in nodes {
                            self.out
                                .push_back(Command::Event(MachineEvent::UnboundInstance {
                                    job: name.clone(),
                                    path,
                                    value,
                                    deleting: true,
                                }));
                        }
                    }
                    Purpose::Nudge { items } => {
                        self.out
                            .push_back(Command::Event(MachineEvent::GoneOwnersFlagged {
                                job: name.clone(),
                                items,
                            }));
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
                    Purpose::Settle { items } => items.len(),
                    Purpose::LeftMarkers { cleared } => cleared.len(),
                    _ => 0,
                };
                if self.split_on_too_large(job, &error, units) {
                    return;
                }
                let class = error.class();
                // A conflict in an election or a trigger race is normal: someone else won.
                let quiet = class == ErrorClass::Conflict
                    && matches!(
                        purpose,
                        Purpose::Elect
                            | Purpose::ConsumeTrigger { .. }
                            | Purpose::Nudge { .. }
                            | Purpose::Garbage { .. }
                    );
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
        if let RegistryReply::Transacted(results) = &reply {
            self.measure_registry_clock(results, p.sent, now);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::test_support::now;

    /// A machine hosting job `j`, active, and the job's id.
    fn hosting() -> (Machine, JobId) {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut m = Machine::new(MachineOptions::new(me));
        let spec = JobSpec {
            config: JobConfig::new("j", 4),
            job_type: "SCRIPT".to_owned(),
        };
        m.add_job(spec, now(0)).unwrap();
        let id = m.jobs.id("j").unwrap();
        if let Some(j) = m.jobs.get_mut(&id) {
            j.phase = Phase::Active;
        }
        (m, id)
    }

    fn commands(m: &mut Machine) -> Vec<Command> {
        std::iter::from_fn(|| m.poll_command()).collect()
    }

    fn conflict() -> RegistryReply {
        RegistryReply::Failed(RegistryError::NodeExists(NodePath::new("/j/x").unwrap()))
    }

    /// What a transaction's reply reports, by its purpose and outcome: a conflict of an
    /// election or of a trigger's consumption is a race lost, not a failure; every other
    /// failure is reported. A consumed trigger is queued only once its node's deletion is
    /// committed.
    #[test]
    fn what_a_reply_reports_and_queues() {
        let failed = |purpose: &'static str, error: RegistryError| {
            vec![Command::Event(MachineEvent::RegistryFailed {
                job: Some("j".to_owned()),
                purpose,
                error,
            })]
        };
        let trigger = || Purpose::ConsumeTrigger {
            parameter: "p".to_owned(),
        };
        let exists = RegistryError::NodeExists(NodePath::new("/j/x").unwrap());
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, Purpose, RegistryReply, Vec<Command>, Vec<&str>)> = vec![
            ("a trigger consumed", trigger(), RegistryReply::Transacted(Vec::new()), vec![], vec!["p"]),
            ("a trigger taken by another", trigger(), conflict(), vec![], vec![]),
            ("a trigger not consumed", trigger(), RegistryReply::Failed(RegistryError::Timeout), failed("trigger", RegistryError::Timeout), vec![]),
            ("an election lost", Purpose::Elect, conflict(), vec![], vec![]),
            ("an election failed", Purpose::Elect, RegistryReply::Failed(RegistryError::Timeout), failed("election", RegistryError::Timeout), vec![]),
            ("a setup refused", Purpose::Setup, conflict(), failed("setup", exists.clone()), vec![]),
            ("a flag refused", Purpose::Flag, conflict(), failed("re-sharding flag", exists), vec![]),
        ];
        for (what, purpose, reply, events, queued) in cases {
            let (mut m, id) = hosting();
            m.on_txn(Some(id), purpose, reply, now(10));
            assert_eq!(commands(&mut m), events, "{what}: events");
            let j = m.jobs.get(&id).unwrap();
            assert_eq!(j.triggers, queued, "{what}: the triggers queued");
        }
    }

    /// A re-shard written in parts reports its progress each time another
    /// `RESHARD_PROGRESS_STEP` items are written, and its last part the new plan, with the
    /// items moved while they ran, once each.
    #[test]
    fn a_reshard_in_parts_reports_its_progress_and_its_end() {
        let (mut m, id) = hosting();
        if let Some(j) = m.jobs.get_mut(&id) {
            j.leader = Some(Box::default());
        }
        let step = RESHARD_PROGRESS_STEP;
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let owners = BTreeMap::from([(0, me.clone()), (1, me)]);
        let part = |items: usize, remaining: usize, last: bool, moved: Vec<u32>| Purpose::Reshard {
            owners: if last {
                owners.clone()
            } else {
                BTreeMap::new()
            },
            moved_running: moved,
            last,
            units: items,
            items,
            remaining,
        };
        let progress = |written: usize, total: usize| {
            vec![Command::Event(MachineEvent::ReshardProgress {
                job: "j".to_owned(),
                written,
                total,
            })]
        };
        #[rustfmt::skip]
        let cases: Vec<(Purpose, Vec<Command>)> = vec![
            (part(step / 2 + 1, 2 * step, false, vec![3]), vec![]),
            (part(step / 2 + 1, step, false, vec![1, 3]), progress(step + 2, 2 * step + 2)),
            (part(step / 2, step / 2, false, vec![]), vec![]),
            (part(step / 2, 0, true, vec![2]), vec![Command::Event(MachineEvent::Resharded {
                job: "j".to_owned(),
                owners: owners.clone(),
                moved_running: vec![1, 2, 3],
            })]),
            // The next re-shard counts from nothing.
            (part(step - 1, 1, false, vec![]), vec![]),
        ];
        for (k, (purpose, events)) in cases.into_iter().enumerate() {
            m.on_txn(
                Some(id),
                purpose,
                RegistryReply::Transacted(Vec::new()),
                now(10),
            );
            assert_eq!(commands(&mut m), events, "part {k}");
        }
    }

    /// Conflicts in a row back off, and the fourth reads the job's subtree again (the cache
    /// may have missed an event); a success in between starts the count again.
    #[test]
    fn the_fourth_conflict_in_a_row_reloads() {
        let (mut m, id) = hosting();
        let loads = |m: &mut Machine| {
            commands(m)
                .into_iter()
                .filter(|c| {
                    matches!(
                        c,
                        Command::Registry {
                            op: RegistryOp::GetTree(_),
                            ..
                        }
                    )
                })
                .count()
        };
        let mut t = 0;
        let mut reply = |m: &mut Machine, reply: RegistryReply| {
            t += 10_000;
            if let Some(j) = m.jobs.get_mut(&id) {
                j.wait = Wait::Idle;
            }
            m.on_txn(Some(id), Purpose::Setup, reply, now(t));
            loads(m)
        };
        for k in 1..=3 {
            assert_eq!(reply(&mut m, conflict()), 0, "conflict {k}: no reload");
            assert!(
                matches!(m.jobs.get(&id).unwrap().wait, Wait::Backoff { .. }),
                "conflict {k}: backs off"
            );
        }
        assert_eq!(reply(&mut m, RegistryReply::Transacted(Vec::new())), 0);
        for k in 1..=3 {
            assert_eq!(reply(&mut m, conflict()), 0, "conflict {k} after a success");
        }
        assert_eq!(reply(&mut m, conflict()), 1, "the fourth reloads");
        assert!(m.jobs.get(&id).unwrap().loading());
        assert_eq!(m.jobs.get(&id).unwrap().backoff, 0);
    }
}
