//! The session: its events, the lease that running items rely on, the probes that confirm it.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The registry session, the lease that running items rely on, and the probes that confirm it.
#[derive(Debug, Default)]
pub(crate) struct SessionState {
    pub(crate) state: Session,
    /// Grows with every session (and every loss of one): replies of an older epoch are void.
    pub(crate) epoch: u64,
    /// Monotonic send time of the latest request whose success proved the session alive.
    pub(crate) confirmed: Option<u64>,
    /// The session could not be confirmed within the lease: nothing starts until it is.
    pub(crate) in_doubt: bool,
    /// The probe in flight.
    pub(crate) probe: Option<RequestId>,
    /// When the last probe was sent (monotonic ms).
    pub(crate) last_probe: u64,
    /// The number of the latest probe of the current session that succeeded (0: none).
    pub(crate) probe_ok: u64,
    /// Jobs to evaluate again once a probe confirms the session.
    pub(crate) waiters: BTreeSet<JobId>,
}

impl Machine {
    pub(crate) fn handle_session(&mut self, event: SessionEvent, now: Now) {
        match event {
            SessionEvent::Connected(info) => {
                self.sess.epoch += 1;
                self.sess.state = Session::Live(info);
                self.sess.confirmed = Some(now.mono);
                self.sess.in_doubt = false;
                self.sess.last_probe = now.mono;
                for job in self.jobs.ids() {
                    self.start_load(job, now);
                }
            }
            SessionEvent::Suspended(id) => {
                if let Session::Live(info) = self.sess.state {
                    if info.id == id {
                        self.sess.state = Session::Suspended(info);
                    }
                }
            }
            SessionEvent::Reconnected(id) => {
                if let Session::Suspended(info) | Session::Live(info) = self.sess.state {
                    if info.id == id {
                        self.sess.state = Session::Live(info);
                        // Replies of this session may have been lost; the epoch stays.
                        for job in self.jobs.ids() {
                            self.start_load(job, now);
                        }
                        self.probe_now(now);
                    }
                }
            }
            SessionEvent::Expired(id) => {
                let ours = match self.sess.state {
                    Session::Live(info) | Session::Suspended(info) => info.id == id,
                    Session::None => false,
                };
                if ours {
                    self.session_lost(now);
                    if planted!(self.opts, ShutdownOnSessionLoss) {
                        self.jobs.clear();
                        self.timers.wakes.clear();
                        self.stopped = true;
                    }
                }
            }
            SessionEvent::Closed => {
                self.session_lost(now);
                if self.shutdown.is_some() {
                    self.stopped = true;
                }
            }
        }
        self.evaluate_all(now);
    }

    pub(crate) fn session_lost(&mut self, now: Now) {
        self.sess.state = Session::None;
        self.sess.epoch += 1;
        self.sess.confirmed = None;
        self.sess.in_doubt = false;
        self.sess.probe = None;
        self.out
            .push_back(Command::Event(MachineEvent::SessionLost));
        self.cancel_all(CancelReason::SessionLost, now);
        let finished: Vec<ExecutionId> = self
            .executions
            .iter()
            .filter(|(_, e)| e.has_ended())
            .map(|(id, _)| *id)
            .collect();
        for id in finished {
            self.complete_lost(id);
        }
        for job in self.jobs.values_mut() {
            job.phase = Phase::Waiting;
            job.wait = Wait::Idle;
            job.buffer.clear();
            job.leader = None;
            // The nodes of the lost session are gone with it.
            job.unsure = false;
        }
        self.requests
            .pending
            .retain(|_, p| matches!(p.purpose, Purpose::Complete(_)));
        if self.shutdown.is_some() {
            // Nothing left to leave: the session took the instance nodes with it.
            let idle: Vec<JobId> = self
                .jobs
                .iter()
                .filter(|(_, j)| j.running.is_empty())
                .map(|(id, _)| id)
                .collect();
            for job in idle {
                self.forget_job(job);
            }
            self.finish_shutdown_if_done();
        }
    }

    pub(crate) fn lease_deadline(&self) -> Option<u64> {
        let (Session::Live(info) | Session::Suspended(info)) = self.sess.state else {
            return None;
        };
        let confirmed = self.sess.confirmed?;
        let share = if planted!(self.opts, LeaseBeyondTimeout) {
            1.5
        } else {
            1.0 - self.opts.safety_margin
        };
        let window = (ms(info.timeout) as f64 * share).max(0.0) as u64;
        Some(confirmed.saturating_add(window))
    }

    pub(crate) fn lease_valid(&self, now: Now) -> bool {
        self.lease_deadline().is_some_and(|d| now.mono < d)
    }

    /// Whether a run is still going that the lease must stop if it runs out: one neither
    /// cancelled nor finished. Only then is the lease's deadline a timer (a run that ended and
    /// waits for its completion to be recorded has nothing left to stop).
    pub(crate) fn lease_guards_runs(&self) -> bool {
        self.executions.values().any(Exec::may_run)
    }

    pub(crate) fn check_lease(&mut self, now: Now) {
        if planted!(self.opts, NoSelfFencing) {
            return;
        }
        if self.lease_guards_runs() && !self.lease_valid(now) {
            if !self.sess.in_doubt {
                self.sess.in_doubt = true;
                self.out
                    .push_back(Command::Event(MachineEvent::SessionInDoubt));
            }
            self.cancel_all(CancelReason::SessionInDoubt, now);
        }
    }

    pub(crate) fn maybe_probe(&mut self, now: Now) {
        let Session::Live(info) = self.sess.state else {
            return;
        };
        if self.sess.probe.is_some() || !self.needs_probing() {
            return;
        }
        if now.mono >= self.probe_due(info) {
            self.probe_now(now);
        }
    }

    /// Whether the session must be confirmed now and then: while executions run (their lease),
    /// while it is in doubt, and while jobs wait for a confirmation to act (adoption of markers
    /// whose claim's reply was lost). A waiting job has no wake of its own: if a probe's reply
    /// is lost too, the next probe is what brings it back.
    pub(crate) fn needs_probing(&self) -> bool {
        !self.executions.is_empty() || self.sess.in_doubt || !self.sess.waiters.is_empty()
    }

    /// When the session should be confirmed again: a quarter timeout after the last
    /// confirmation (claims and completions confirm it too) or the last probe.
    pub(crate) fn probe_due(&self, info: SessionInfo) -> u64 {
        let last = self.sess.confirmed.unwrap_or(0).max(self.sess.last_probe);
        last.saturating_add(ms(info.timeout) / 4)
    }

    pub(crate) fn probe_now(&mut self, now: Now) {
        let Session::Live(info) = self.sess.state else {
            return;
        };
        if self.sess.probe.is_some() {
            return;
        }
        self.sess.last_probe = now.mono;
        let op = RegistryOp::Transact(vec![TxnOp::Check(Check::Session(info.id))]);
        let id = self.request(None, Purpose::Probe, op, now);
        self.sess.probe = Some(id);
    }

    // ----- requests -----

    pub(crate) fn session_id(&self) -> Option<crate::registry::SessionId> {
        match self.sess.state {
            Session::Live(info) => Some(info.id),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Session {
    /// No session yet, or it ended.
    #[default]
    None,
    Live(SessionInfo),
    Suspended(SessionInfo),
}
