//! Leaving a job (removed, shut down by an operator, or the instance's graceful shutdown).

#[allow(clippy::wildcard_imports)]
use super::*;

pub(crate) fn leave_ops(
    j: &Job,
    view: &JobView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    limit: Option<usize>,
) -> Vec<TxnOp> {
    let p = &j.paths;
    let mut ops = vec![TxnOp::Check(Check::Session(sid))];
    // Run markers and failover nodes of this session: by now no local run holds any, so they
    // are claims whose reply was lost. Left, they would keep their items "running", or their
    // failover taken, for the session's life; deleted, the fire is one whose attempt died.
    // Within the transaction limit (in items); the next round deletes the rest.
    let orphans = view
        .items
        .iter()
        .filter(|(item, _)| !j.running.contains_key(item))
        .filter_map(|(item, v)| {
            let marker = session_marker(v, me, sid);
            let failover = v.failover.filter(|stat| stat.ephemeral_owner == Some(sid));
            let deletes: Vec<TxnOp> = marker
                .map(|stat| (p.item_running(*item), stat.version))
                .into_iter()
                .chain(failover.map(|stat| (p.item_failover(*item), stat.version)))
                .map(|(path, version)| TxnOp::Delete {
                    path,
                    expected: Some(version),
                })
                .collect();
            (!deletes.is_empty()).then_some(deletes)
        });
    ops.extend(orphans.take(limit.unwrap_or(usize::MAX)).flatten());
    if view.instances.contains(me) {
        ops.push(TxnOp::delete(p.instance(me)));
    }
    if view.leader.as_deref() == Some(me.as_str()) {
        ops.push(TxnOp::Check(Check::Value(
            p.leader_instance(),
            me.as_str().into(),
        )));
        ops.push(TxnOp::delete(p.leader_instance()));
    }
    if view.triggers.contains_key(me) {
        ops.push(TxnOp::delete(p.trigger(me)));
    }
    // The server node goes with its last instance, unless an operator disabled it.
    let ip = me.server_ip();
    let others_on_ip = view
        .instances
        .iter()
        .any(|i| i != me && i.server_ip() == ip);
    if !others_on_ip && view.servers.get(ip).is_some_and(|v| v.trim() == "ENABLED") {
        ops.push(TxnOp::Check(Check::Value(
            p.server_of(me),
            b"ENABLED".to_vec(),
        )));
        ops.push(TxnOp::delete(p.server_of(me)));
    }
    ops
}

impl Machine {
    /// The decision on a job this instance leaves: claims ahead are given back, runs wait for
    /// (or are cancelled at) the grace's end, then the instance's nodes go in one transaction
    /// (or more, under a transaction limit), after which the job is forgotten.
    pub(crate) fn decide_leave(
        &mut self,
        job: JobId,
        leaving: Leaving,
        view: &JobView,
        now: Now,
    ) -> Action {
        let me = Arc::clone(&self.me);
        let session = self.session_id();
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        let deadline = leaving.deadline.or(self.shutdown);
        let grace_over = deadline.is_some_and(|d| now.mono >= d);
        let local: Vec<ExecutionId> = j.running.values().copied().collect();
        // Claimed ahead and not started: given back at once, nothing to wait for.
        let unstarted: Vec<ExecutionId> = local
            .iter()
            .copied()
            .filter(|id| self.executions.get(id).is_some_and(Exec::is_ahead))
            .collect();
        if !unstarted.is_empty() {
            for id in unstarted {
                self.release(id, now);
            }
            return Action::Nothing;
        }
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        if !local.is_empty() && !planted!(self.opts, LeaveWhileRunning) {
            if !grace_over {
                j.wake = deadline;
            } else {
                for id in local {
                    if let Some(e) = self.executions.get_mut(&id) {
                        if matches!(e.life, Life::Running) {
                            e.life = Life::Cancelling;
                            let reason = match leaving.cause {
                                _ if self.shutdown.is_some() => CancelReason::Shutdown,
                                LeaveCause::Operator => CancelReason::OperatorShutdown,
                                LeaveCause::Removed | LeaveCause::Shutdown => {
                                    CancelReason::JobRemoved
                                }
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
        if matches!(self.sess.state, Session::Suspended(_)) && self.shutdown.is_none() {
            return Action::Nothing;
        }
        // The view may miss nodes a write of unknown outcome created (a registration whose
        // reply was lost, say): read the tree again first, or they would outlive the leave.
        if j.unsure && session.is_some() && self.shutdown.is_none() {
            self.start_load(job, now);
            return Action::Nothing;
        }
        let limit = j.txn_limit(&self.opts);
        let ops = session
            .map(|sid| leave_ops(j, view, &me, sid, limit))
            .unwrap_or_default();
        if ops.len() <= 1 {
            let name = j.name().to_owned();
            self.forget_job(job);
            self.out
                .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
            return Action::Nothing;
        }
        Action::Txn(Purpose::Leave, ops)
    }

    /// An operator shut the job down here (see [`MachineEvent::OperatorShutdown`]): leave it
    /// at once, cancelling its running items so that they move without waiting for a grace.
    pub(crate) fn operator_shutdown(&mut self, job: JobId, now: Now) -> Action {
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        j.leaving = Some(Leaving {
            cause: LeaveCause::Operator,
            deadline: Some(now.mono),
        });
        j.triggers.clear();
        j.trigger_run = None;
        self.out
            .push_back(Command::Event(MachineEvent::OperatorShutdown {
                job: j.name().to_owned(),
            }));
        self.decide(job, now)
    }

    /// Leaves a job whose subtree is not loaded, without a transaction: once its local runs
    /// have ended (a shutdown cancels them at its grace deadline), it is dropped, and
    /// [`MachineEvent::LeftUnloaded`] says why before [`MachineEvent::JobLeft`].
    pub(crate) fn leave_unloaded(&mut self, job: JobId, now: Now) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if !j.running.is_empty() {
            j.wake = j
                .leaving
                .and_then(|l| l.deadline)
                .or(self.shutdown)
                .filter(|d| *d > now.mono);
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
        let name = j.name().to_owned();
        self.forget_job(job);
        self.out
            .push_back(Command::Event(MachineEvent::LeftUnloaded {
                job: name.clone(),
                reason,
            }));
        self.out
            .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
    }

    pub(crate) fn finish_shutdown_if_done(&mut self) {
        if self.shutdown.is_none() || self.stopped {
            return;
        }
        if !self.jobs.is_empty() {
            return;
        }
        let busy = self
            .requests
            .pending
            .values()
            .any(|p| matches!(p.purpose, Purpose::Complete(_) | Purpose::Leave));
        if !busy {
            self.out.push_back(Command::CloseSession);
            self.stopped = true;
        }
    }
}
