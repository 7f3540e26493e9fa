//! The decision on one job: what its view asks of this instance now.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    /// An operator shut the job down here (see [`MachineEvent::OperatorShutdown`]): leave it
    /// at once, cancelling its running items so that they move without waiting for a grace.
    pub(super) fn operator_shutdown(&mut self, name: &str, now: Now) -> Action {
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };
        j.leaving = true;
        j.shut_down = true;
        j.leave_deadline = Some(now.mono);
        j.triggers.clear();
        j.trigger_run = None;
        self.out
            .push_back(Command::Event(MachineEvent::OperatorShutdown {
                job: name.to_owned(),
            }));
        self.decide(name, now)
    }

    pub(super) fn decide(&mut self, name: &str, now: Now) -> Action {
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };
        // The view is kept in step with the cache; it is lent to the decision.
        let view = Arc::clone(j.cache.view());
        self.decide_with(name, &view, now)
    }

    pub(super) fn decide_with(&mut self, name: &str, view: &JobView, now: Now) -> Action {
        let me = self.opts.instance_id.clone();
        let session = self.session_id();
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };
        for (path, error) in &view.corrupt {
            // Reported on every evaluation would flood; report once per distinct problem.
            let msg = format!("{path}: {error}");
            if j.reported_corrupt.insert(msg) {
                self.out
                    .push_back(Command::Event(MachineEvent::CorruptNode {
                        path: path.to_string(),
                        error: error.clone(),
                    }));
            }
        }
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };

        // Leaving: wait for local runs (the grace deadline cancels them), then leave.
        if j.leaving {
            let deadline = j.leave_deadline.or(self.shutdown);
            let grace_over = deadline.is_some_and(|d| now.mono >= d);
            let local: Vec<ExecutionId> = j.running.values().copied().collect();
            // Claimed ahead and not started: given back at once, nothing to wait for.
            let unstarted: Vec<ExecutionId> = local
                .iter()
                .copied()
                .filter(|id| self.executions.get(id).is_some_and(|e| e.pending.is_some()))
                .collect();
            if !unstarted.is_empty() {
                for id in unstarted {
                    self.release(id, now);
                }
                return Action::Nothing;
            }
            let Some(j) = self.jobs.get_mut(name) else {
                return Action::Nothing;
            };
            if !local.is_empty() && !planted!(self.opts, LeaveWhileRunning) {
                if !grace_over {
                    j.wake = deadline;
                } else {
                    for id in local {
                        if let Some(e) = self.executions.get_mut(&id) {
                            if !e.cancelled && !e.finished {
                                e.cancelled = true;
                                let reason = if self.shutdown.is_some() {
                                    CancelReason::Shutdown
                                } else if j.shut_down {
                                    CancelReason::OperatorShutdown
                                } else {
                                    CancelReason::JobRemoved
                                };
                                self.out.push_back(Command::Cancel { id, reason });
                            }
                        }
                    }
                }
                return Action::Nothing;
            }
            // A removed job waits for a suspended session: it comes back (and the job's nodes
            // are deleted) or is found expired (and they are gone with it). Left now, they
            // would stay as long as the session, holding the job's items. A shutdown does not
            // wait: it ends the session.
            if matches!(self.session, Session::Suspended(_)) && self.shutdown.is_none() {
                return Action::Nothing;
            }
            // The view may miss nodes a write of unknown outcome created (a registration whose
            // reply was lost, say): read the tree again first, or they would outlive the leave.
            if j.unsure && session.is_some() && self.shutdown.is_none() {
                self.start_load(name, now);
                return Action::Nothing;
            }
            let limit = j.txn_limit(&self.opts);
            let ops = session
                .map(|sid| leave_ops(j, view, &me, sid, limit))
                .unwrap_or_default();
            if ops.len() <= 1 {
                let name = name.to_owned();
                self.forget_job(&name);
                self.out
                    .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
                return Action::Nothing;
            }
            return Action::Txn(Purpose::Leave, ops);
        }

        let Some(sid) = session else {
            return Action::Nothing;
        };

        if view.instances.contains(&me) {
            j.node_gone = None;
        } else if j.registered_in == Some(sid) && !planted!(self.opts, IgnoreOperatorShutdown) {
            // Our node, seen in this very session, is gone: an operator deleted it (a remote
            // shutdown), or the session ended and took it. A probe sent after the deletion was
            // seen tells them apart: if it succeeds, the session outlived the deletion. If the
            // session ended, its expiry comes instead and the instance registers again in the
            // next session. Nothing is decided meanwhile (no registration, no claim).
            let marker = *j.node_gone.get_or_insert(self.next_request);
            if self.probe_ok > marker || planted!(self.opts, ShutdownWithoutProbe) {
                return self.operator_shutdown(name, now);
            }
            self.probe_waiters.insert(name.to_owned());
            self.probe_now(now);
            return Action::Nothing;
        }

        if j.phase == Phase::Loaded || j.phase == Phase::Blocked {
            return match setup_ops(j, view, &me, sid, now.wall_ms()) {
                Ok(ops) if ops.len() <= 1 => {
                    j.phase = Phase::Active;
                    let job = name.to_owned();
                    self.out
                        .push_back(Command::Event(MachineEvent::JobActive { job }));
                    self.decide_with(name, view, now)
                }
                Ok(ops) => Action::Txn(Purpose::Setup, ops),
                Err(event) => {
                    if j.phase != Phase::Blocked {
                        j.phase = Phase::Blocked;
                        self.out.push_back(Command::Event(event));
                    }
                    Action::Nothing
                }
            };
        }

        // Active.
        let Some(config) = j.config.clone() else {
            return Action::Nothing;
        };
        let standing = Standing::of(j, view, &me, sid);
        let gate = standing.gate(view, &me);
        if let Gate::Register = gate {
            // Our instance node is not there yet (a registration not visible yet, a new
            // session): register.
            j.phase = Phase::Loaded;
            return match setup_ops(j, view, &me, sid, now.wall_ms()) {
                Ok(ops) => Action::Txn(Purpose::Setup, ops),
                Err(_) => Action::Nothing,
            };
        }
        let Standing {
            enabled, i_lead, ..
        } = standing;
        if i_lead && !j.was_leader {
            self.out
                .push_back(Command::Event(MachineEvent::BecameLeader {
                    job: name.to_owned(),
                }));
        }
        j.was_leader = i_lead;

        match gate {
            Gate::Register | Gate::Items => {}
            Gate::Elect => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::create_ephemeral(j.paths.leader_instance(), me.as_str()),
                ];
                return Action::Txn(Purpose::Elect, ops);
            }
            Gate::Abdicate => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::Check(Check::Value(j.paths.leader_instance(), me.as_str().into())),
                    TxnOp::delete(j.paths.leader_instance()),
                ];
                return Action::Txn(Purpose::Abdicate, ops);
            }
            Gate::Trigger(param) => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::delete(j.paths.trigger(&me)),
                ];
                return Action::Txn(
                    Purpose::ConsumeTrigger {
                        parameter: param.to_owned(),
                    },
                    ops,
                );
            }
        }

        let mut wake: Vec<u64> = Vec::new();

        // Reconcile: reload the subtree every interval, so a change whose event was lost
        // cannot leave this instance acting on a stale view for long.
        let interval = u64::from(config.reconcile_interval_minutes).saturating_mul(60_000);
        if interval > 0 {
            if let Some(last) = j.last_reload {
                let due = last.saturating_add(interval);
                if now.mono >= due {
                    self.start_load(name, now);
                    return Action::Nothing;
                }
                wake.push(due);
            }
        }

        // Leader duties.
        if i_lead {
            let strategy = self
                .strategies
                .get(&config.job_sharding_strategy_type)
                .cloned();
            let Some(j) = self.jobs.get_mut(name) else {
                return Action::Nothing;
            };
            match reshard(
                j, view, &config, strategy, &me, sid, &self.opts, now, &mut wake,
            ) {
                Ok(Some(action)) => return action,
                Ok(None) => {}
                Err(problem) => self
                    .out
                    .push_back(Command::Event(MachineEvent::PlanRefused {
                        job: name.to_owned(),
                        strategy: config.job_sharding_strategy_type.clone(),
                        problem,
                    })),
            }
            let limit = j.txn_limit(&self.opts);
            if let Some(action) = housekeeping(j, view, &config, &me, sid, limit, now, &mut wake) {
                return action;
            }
        } else if let Some(j) = self.jobs.get_mut(name) {
            j.reshard_wanted = None;
            j.reshard_moved.clear();
            j.reshard_written = 0;
            j.reshard_plan = None;
        }

        // Markers of this session that no local execution holds: a claim whose reply was lost
        // (a timeout with unknown outcome) did apply. Adopt them: start what was claimed.
        if self.lease_valid(now) {
            if let Some(action) = self.adopt(name, view, &me, sid) {
                return action;
            }
        } else if self
            .jobs
            .get(name)
            .is_some_and(|j| adoptable(view, &me, sid, &j.running))
        {
            // Confirm the session first; the probe's reply evaluates the job again.
            self.probe_waiters.insert(name.to_owned());
            self.probe_now(now);
        }

        // Claims: own due items, triggers, failover.
        let can_claim = matches!(self.session, Session::Live(_)) && self.shutdown.is_none();
        let Some(j) = self.jobs.get_mut(name) else {
            return Action::Nothing;
        };
        let held = j.held_for_reshard(view.necessary.is_some(), &self.opts, now, &mut wake);
        if can_claim && enabled {
            let decided = claims(j, view, &config, &me, sid, held, &self.opts, now, &mut wake);
            if let Some(action) = decided {
                return action;
            }
        }
        j.wake = wake.into_iter().min();
        Action::Nothing
    }

    /// A self-check of the machine's wake times, for the simulator and for tests: the jobs that
    /// would claim an item now, or want waking for one, earlier than their wake comes, while
    /// nothing else under way evaluates them again (a request, a load, a clock step not yet
    /// noticed). Such a job runs its items late, or never, unless the safety sweep or a change
    /// in the registry comes by. Empty unless the machine has a bug.
    ///
    /// It takes the claim decision of each job whose wake is not within a second, without
    /// acting on it, but only of the jobs whose view changed or that were decided on since
    /// the audit that left `mark`, or that it passed over while something was under way for
    /// them (all of them when the wall clock moved meanwhile): a decision on a job that did
    /// not change would be the one taken before. Call it now and then with the same mark, not
    /// on every event.
    pub fn late_wakes(&mut self, now: Now, mark: &mut AuditMark) -> Vec<LateWake> {
        let mut late = Vec::new();
        // A step since the last input is for the machine to notice at its next one.
        let stepped = self
            .clock_last
            .is_none_or(|before| wall_offset(now).saturating_sub(before).abs() > CLOCK_STEP_MS);
        let Some(sid) = self.session_id() else {
            return late;
        };
        if stepped || self.shutdown.is_some() || !matches!(self.session, Session::Live(_)) {
            return late;
        }
        let since = if mark.clock == self.clock_last {
            mark.changes
        } else {
            0
        };
        let recheck = std::mem::take(&mut mark.recheck);
        mark.changes = self.changes;
        mark.clock = self.clock_last;
        // A wake may come up to this much after the decision's time, as the wall clock drifts
        // (under a step) against the monotonic one between the decision and this check.
        let slack = CLOCK_STEP_MS.unsigned_abs() + 500;
        let me = self.opts.instance_id.clone();
        for (name, j) in &mut self.jobs {
            if j.changed <= since && !recheck.contains(name) {
                continue;
            }
            // Something under way decides on the job again soon: looked at again next time,
            // in case it does not.
            if j.wake.is_some_and(|w| w <= now.mono.saturating_add(slack))
                || j.busy.is_some()
                || j.loading.is_some()
                || j.sync.is_some()
                || j.retry_at.is_some()
                || self.probe_waiters.contains(name)
            {
                mark.recheck.insert(name.clone());
                continue;
            }
            if j.phase != Phase::Active || j.leaving {
                continue;
            }
            let Some(config) = j.config.clone() else {
                continue;
            };
            let view = Arc::clone(j.cache.view());
            // Only where the decision would come to the items, and claim from this server.
            let standing = Standing::of(j, &view, &me, sid);
            if !standing.enabled || !matches!(standing.gate(&view, &me), Gate::Items) {
                continue;
            }
            // The decision's own state, put back afterwards: this only looks.
            let kept = (
                j.owned_since.clone(),
                j.triggers.clone(),
                j.trigger_run.clone(),
                j.orphan_seen.clone(),
                j.necessary_seen,
                j.fires.clone(),
            );
            let mut wake = Vec::new();
            let held = j.held_for_reshard(view.necessary.is_some(), &self.opts, now, &mut wake);
            let claims_now = claims(
                j, &view, &config, &me, sid, held, &self.opts, now, &mut wake,
            );
            (
                j.owned_since,
                j.triggers,
                j.trigger_run,
                j.orphan_seen,
                j.necessary_seen,
                j.fires,
            ) = kept;
            let wanted = if claims_now.is_some() {
                Some(now.mono)
            } else {
                wake.into_iter().min()
            };
            if let Some(wanted) = wanted {
                if j.wake
                    .is_none_or(|w| w > wanted.max(now.mono).saturating_add(slack))
                {
                    late.push(LateWake {
                        job: name.clone(),
                        wake: j.wake,
                        wanted,
                    });
                }
            }
        }
        late
    }
}
